//! Call notes (sans-IO): how ce checks that the ranks' calls match without a
//! host round trip (`FERROCX_CE_CHECK_CALLS`, on by default).
//!
//! With its ready flag, each rank writes a *note* of the call — its
//! collective, type, operator, count and root ([`Call`]), in [`WORDS`]
//! 32-bit words that each carry the call's number tag — into a ring of
//! [`RING`] slots per writer in every peer's flag buffer, at the call's
//! number modulo [`RING`] (the core's collective numbers are equal on every
//! rank). The note is written before the ready flag (an LL call: by its
//! kernel, before its first line of data) (each stream memory
//! write is ordered after the ones before it), so a rank that passed the
//! ready barrier has every peer's note for that call in its ring. After a
//! collective completed on the stream, the watchdog reads the ring and
//! compares each peer's note with this rank's own call ([`verify`]): a
//! different call under the same tag is a mismatch, and the communicator
//! breaks with the core's "mismatched calls" wording, both calls named, on
//! every rank.
//!
//! What it does not do: stop the data of that call (the copies ran; the
//! error comes from `status` / the next launch, as NCCL's asynchronous errors
//! do), check graph-captured calls (their numbers repeat), or compare every
//! call when calls complete faster than the watchdog looks (it compares the
//! last `RING / 2` completed calls per pass: every 100 ms while busy, and
//! whenever a launch finds `RING / 4` completed calls waiting, so it normally
//! compares them all, unless its thread is kept from running; a mismatch that
//! lasts is always found). A slot
//! overwritten by a later call (the peer ran more than [`RING`] calls ahead
//! of this rank's watchdog), or caught half rewritten (its words' tags
//! differ), is skipped, never reported. Counts are compared modulo 2⁴⁴
//! elements and roots modulo 2²⁰.

use ferrocx_algo::fingerprint::{mismatch_text, Fingerprint};
use ferrocx_algo::{DataType, RedOp};
use ferrocx_sdk::collective::Coll;

/// Slots per writer in each rank's ring.
pub const RING: usize = 1024;

/// 32-bit words per note.
pub const WORDS: usize = 4;

/// A note as written: [`WORDS`] words, each `tag << 20 | 20 payload bits`.
pub type Words = [u32; WORDS];

/// Payload bits per word; the 12 above are the tag.
const PAYLOAD: u32 = 20;
const MASK: u32 = (1 << PAYLOAD) - 1;
/// Set in the first word of every note, so an unwritten slot is never a call.
const WRITTEN: u32 = 1 << 19;

/// One rank's call as its note holds it: the operator of reductions only,
/// the root of rooted collectives only (elsewhere ranks may pass anything),
/// as the core's fingerprint. Whether a rank runs in place may differ
/// between ranks, so it is not in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    coll: Coll,
    dtype: i32,
    op: i32,
    count: u64,
    root: u32,
}

impl Call {
    /// The call (the fields a collective ignores are dropped; the rest are
    /// kept to the bits a note has).
    pub fn new(coll: Coll, dtype: i32, op: i32, count: usize, root: usize) -> Self {
        let kind = coll.kind();
        Call {
            coll,
            dtype: dtype & 0x1f,
            op: if kind.reduces() { op & 0x1f } else { 0 },
            count: count as u64 & ((1 << 44) - 1),
            root: if kind.rooted() { root as u32 & MASK } else { 0 },
        }
    }

    /// The note of this call as call `seq`: word 0 holds the written bit,
    /// collective, type, operator and count bits 40–43; word 1 the root;
    /// words 2 and 3 count bits 0–19 and 20–39.
    pub fn note(&self, seq: u64) -> Words {
        let t = tag(seq) << PAYLOAD;
        let c = self.count;
        [
            t | WRITTEN
                | (self.coll.raw() as u32 & 0x1f) << 14
                | (self.dtype as u32) << 9
                | (self.op as u32) << 4
                | (c >> 40) as u32 & 0xf,
            t | self.root,
            t | c as u32 & MASK,
            t | (c >> 20) as u32 & MASK,
        ]
    }

    /// What a slot holds for call `seq`: `Ok(Some)` a note of it, `Ok(None)`
    /// nothing (never written, tag 0), `Err(())` another call's note or a
    /// half-rewritten one (not comparable).
    fn read(w: &Words, seq: u64) -> Result<Option<Call>, ()> {
        let t = tag(seq);
        if *w == [0; WORDS] && t == 0 {
            return Ok(None);
        }
        if w.iter().any(|x| x >> PAYLOAD != t) || w[0] & WRITTEN == 0 {
            return Err(());
        }
        let coll = Coll::from_raw(((w[0] >> 14) & 0x1f) as i32).map_err(|_| ())?;
        let count =
            ((w[0] & 0xf) as u64) << 40 | ((w[3] & MASK) as u64) << 20 | (w[2] & MASK) as u64;
        Ok(Some(Call {
            coll,
            dtype: ((w[0] >> 9) & 0x1f) as i32,
            op: ((w[0] >> 4) & 0x1f) as i32,
            count,
            root: w[1] & MASK,
        }))
    }

    /// `all_reduce(float, sum, 1000) as op #5`, as the core's fingerprint
    /// prints a call.
    fn describe(&self, seq: u64) -> String {
        let dtype = DataType::from_code(self.dtype as u32);
        let op = RedOp::from_code(self.op as u32);
        match (dtype, op) {
            (Ok(t), Ok(o)) => Fingerprint::of(
                seq,
                self.coll.kind(),
                t,
                o,
                self.count as usize,
                self.root as usize,
                false,
            )
            .to_string(),
            _ => format!(
                "{}(type {}, operator {}, {}, root {}) as op #{seq}",
                self.coll.name(),
                self.dtype,
                self.op,
                self.count,
                self.root
            ),
        }
    }
}

/// The tag of call `seq`: `seq / RING`, 12 bits. Two calls that share a slot
/// are `RING` apart, so their tags differ (for 2²² calls in a row).
fn tag(seq: u64) -> u32 {
    ((seq / RING as u64) as u32) & 0xfff
}

/// Which slot of a writer's ring call `seq` uses.
pub fn slot(seq: u64) -> usize {
    (seq % RING as u64) as usize
}

/// A call whose note a peer contradicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The peer.
    pub peer: usize,
    /// The call's number.
    pub seq: u64,
    /// This rank's call.
    pub mine: Call,
    /// The peer's (`None`: it wrote no note for this number: it called no ce
    /// collective there).
    pub theirs: Option<Call>,
}

/// The first of `calls` (`(seq, call)`, completed on this rank's stream,
/// oldest first) that some peer noted differently in `ring` (this rank's
/// ring: `nranks × RING × WORDS` words, writer-major). Slots holding another
/// call's note are skipped.
pub fn verify(me: usize, nranks: usize, ring: &[u32], calls: &[(u64, Call)]) -> Option<Mismatch> {
    debug_assert_eq!(ring.len(), nranks * RING * WORDS);
    calls.iter().find_map(|&(seq, mine)| {
        (0..nranks).filter(|&p| p != me).find_map(|peer| {
            let at = (peer * RING + slot(seq)) * WORDS;
            let words: Words = ring.get(at..at + WORDS)?.try_into().ok()?;
            match Call::read(&words, seq) {
                Ok(theirs) if theirs != Some(mine) => Some(Mismatch {
                    peer,
                    seq,
                    mine,
                    theirs,
                }),
                _ => None,
            }
        })
    })
}

/// A note as bytes (little-endian words), for the out-of-band exchange of
/// captured calls.
pub fn to_bytes(w: &Words) -> [u8; WORDS * 4] {
    let mut b = [0u8; WORDS * 4];
    for (i, x) in w.iter().enumerate() {
        b[i * 4..i * 4 + 4].copy_from_slice(&x.to_le_bytes());
    }
    b
}

/// The first peer whose note of call `seq` in `all` (every rank's
/// [`to_bytes`], in rank order, from an out-of-band all-gather) is not
/// `mine`. A graph-captured call is checked this way, once, at capture: its
/// replays repeat what was captured, and its number would not tell replays
/// apart in the rings.
pub fn compare_gathered(me: usize, seq: u64, mine: Call, all: &[Vec<u8>]) -> Option<Mismatch> {
    all.iter()
        .enumerate()
        .filter(|&(p, _)| p != me)
        .find_map(|(peer, b)| {
            let mut w: Words = [0; WORDS];
            for (i, x) in w.iter_mut().enumerate() {
                *x = b
                    .get(i * 4..i * 4 + 4)
                    .map_or(0, |c| u32::from_le_bytes(c.try_into().expect("4 bytes")));
            }
            // Another call's number, a torn or short note: not this call.
            let theirs = Call::read(&w, seq).ok().flatten();
            (theirs != Some(mine)).then_some(Mismatch {
                peer,
                seq,
                mine,
                theirs,
            })
        })
}

/// The error of a mismatch, in the core's wording (`mismatched calls: rank
/// A called …, rank B called …`), so the core reports `Error::Mismatch`.
pub fn mismatch_message(me: usize, m: &Mismatch) -> String {
    let on = " on plugin 'ce'";
    mismatch_text(
        me,
        &format!("{}{on}", m.mine.describe(m.seq)),
        m.peer,
        &match m.theirs {
            Some(c) => format!("{}{on}", c.describe(m.seq)),
            None => format!("no ce collective as op #{}", m.seq),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::abi::{FX_OP_MAX, FX_OP_SUM, FX_TYPE_F32, FX_TYPE_I32};

    #[test]
    fn captured_calls_compare_their_gathered_notes() {
        let mine = ar(FX_TYPE_F32, 1000);
        let gathered = |calls: &[(u64, Call)]| -> Vec<Vec<u8>> {
            calls
                .iter()
                .map(|(s, c)| to_bytes(&c.note(*s)).to_vec())
                .collect()
        };
        // Every rank agrees (this rank's own entry is not compared).
        let all = gathered(&[(5, mine), (5, mine), (5, mine)]);
        assert_eq!(compare_gathered(1, 5, mine, &all), None);
        // Rank 2 captured another type: named, both calls in the message.
        let other = ar(FX_TYPE_I32, 1000);
        let all = gathered(&[(5, mine), (5, mine), (5, other)]);
        let m = compare_gathered(0, 5, mine, &all).expect("a mismatch");
        assert_eq!((m.peer, m.theirs), (2, Some(other)));
        let text = mismatch_message(0, &m);
        assert!(
            text.starts_with(
                "mismatched calls: rank 0 called all_reduce(float, sum, 1000) as op #5"
            ) && text.contains("rank 2 called all_reduce(int32, sum, 1000) as op #5"),
            "{text}"
        );
        // A peer at another call number (it skipped or added a call), or a
        // short note, is not this call.
        let all = gathered(&[(5, mine), (6 + RING as u64, mine)]);
        assert_eq!(
            compare_gathered(0, 5, mine, &all).map(|m| m.theirs),
            Some(None)
        );
        let all = vec![to_bytes(&mine.note(5)).to_vec(), vec![1, 2, 3]];
        assert_eq!(compare_gathered(0, 5, mine, &all).map(|m| m.peer), Some(1));
    }

    fn ar(dtype: i32, count: usize) -> Call {
        Call::new(Coll::AllReduce, dtype, FX_OP_SUM, count, 0)
    }

    #[test]
    fn notes_read_back_as_the_call() {
        let calls = [
            ar(FX_TYPE_F32, 1000),
            Call::new(Coll::ReduceScatter, FX_TYPE_I32, FX_OP_MAX, 1 << 43, 0),
            Call::new(Coll::Broadcast, 11, 0, (1 << 40) + 5, 7),
            Call::new(Coll::Scatter, 0, 0, 0, (1 << 20) - 1),
        ];
        for seq in [0, 5, RING as u64 + 5, 4095 * RING as u64 + 1] {
            for c in calls {
                assert_eq!(Call::read(&c.note(seq), seq), Ok(Some(c)), "{c:?} #{seq}");
            }
        }
        // What a collective ignores is not in its note.
        assert_eq!(
            Call::new(Coll::AllGather, FX_TYPE_F32, FX_OP_MAX, 8, 3),
            Call::new(Coll::AllGather, FX_TYPE_F32, FX_OP_SUM, 8, 0)
        );
    }

    #[test]
    fn slots_wrap_and_tags_tell_their_calls_apart() {
        assert_eq!(slot(5), 5);
        assert_eq!(slot(RING as u64 + 5), 5);
        let c = ar(FX_TYPE_F32, 8);
        assert_ne!(c.note(5), c.note(RING as u64 + 5), "same slot, other tag");
        assert_eq!(Call::read(&c.note(5), RING as u64 + 5), Err(()));
        // Never written: nothing at tag 0, not comparable after.
        assert_eq!(Call::read(&[0; WORDS], 3), Ok(None));
        assert_eq!(Call::read(&[0; WORDS], RING as u64 + 3), Err(()));
        // Half rewritten by the next call in that slot: skipped.
        let mut torn = c.note(5);
        torn[2] = c.note(RING as u64 + 5)[2];
        assert_eq!(Call::read(&torn, 5), Err(()));
    }

    fn ring_with(n: usize, writes: &[(usize, u64, Call)]) -> Vec<u32> {
        let mut ring = vec![0u32; n * RING * WORDS];
        for &(peer, seq, c) in writes {
            let at = (peer * RING + slot(seq)) * WORDS;
            ring[at..at + WORDS].copy_from_slice(&c.note(seq));
        }
        ring
    }

    #[test]
    fn equal_calls_pass_different_ones_are_named() {
        let (n, me) = (3, 1);
        let (a, b) = (ar(FX_TYPE_F32, 1000), ar(FX_TYPE_I32, 1000));
        let ring = ring_with(n, &[(0, 7, a), (2, 7, a), (0, 8, a), (2, 8, b)]);
        assert_eq!(verify(me, n, &ring, &[(7, a)]), None);
        let m = Mismatch {
            peer: 2,
            seq: 8,
            mine: a,
            theirs: Some(b),
        };
        assert_eq!(verify(me, n, &ring, &[(7, a), (8, a)]), Some(m));
        // A peer that never wrote this call's slot (it called no ce collective
        // at this number): the empty slot differs.
        assert_eq!(
            verify(me, n, &ring, &[(9, a)]),
            Some(Mismatch {
                peer: 0,
                seq: 9,
                mine: a,
                theirs: None
            })
        );
    }

    #[test]
    fn mismatches_name_both_calls_as_the_core_does() {
        let m = Mismatch {
            peer: 0,
            seq: 5,
            mine: ar(FX_TYPE_I32, 1000),
            theirs: Some(ar(FX_TYPE_F32, 1000)),
        };
        assert_eq!(
            mismatch_message(2, &m),
            "mismatched calls: rank 0 called all_reduce(float, sum, 1000) as op #5 on plugin 'ce', \
             rank 2 called all_reduce(int32, sum, 1000) as op #5 on plugin 'ce'"
        );
        let rooted = Mismatch {
            peer: 3,
            seq: 9,
            mine: Call::new(Coll::Broadcast, FX_TYPE_F32, 0, 4, 1),
            theirs: None,
        };
        let text = mismatch_message(0, &rooted);
        assert!(
            text.starts_with(
                "mismatched calls: rank 0 called broadcast(float, 4, root 1) as op #9"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("rank 3 called no ce collective as op #9"),
            "{text}"
        );
    }

    #[test]
    fn slots_overwritten_by_later_calls_are_skipped() {
        let (n, me) = (2, 0);
        let later = RING as u64 + 3;
        let (a, b) = (ar(FX_TYPE_F32, 4), ar(FX_TYPE_F32, 5));
        let ring = ring_with(n, &[(1, later, a)]);
        assert_eq!(verify(me, n, &ring, &[(3, b)]), None);
        assert!(verify(me, n, &ring, &[(later, b)]).is_some());
    }
}
