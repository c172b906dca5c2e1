//! Call notes (sans-IO): how ce checks that the ranks' calls match without a
//! host round trip (`FERROCX_CE_CHECK_CALLS`).
//!
//! With its ready flag, each rank writes one 32-bit *note* of the call — the
//! call's number tag and a hash of its collective, type, operator, count and
//! root — into a ring of [`RING`] slots per writer in every peer's flag
//! buffer, at the call's number modulo [`RING`] (the core's collective
//! numbers are equal on every rank). The note is written before the ready
//! flag (each stream memory write is ordered after the ones before it), so a
//! rank that passed the ready barrier has every peer's note for that call in
//! its ring. After a collective completed on the stream, the watchdog reads
//! the ring and compares each peer's note with this rank's own ([`verify`]):
//! a different hash under the same tag is a mismatch, and the communicator
//! breaks with the core's "mismatched calls" wording on every rank.
//!
//! What it does not do: stop the data of that call (the copies ran; the
//! error comes from `status` / the next launch, as NCCL's asynchronous errors
//! do), check graph-captured calls (their numbers repeat), or tell what the
//! peer called (only that it differs). A slot overwritten by a later call
//! (the peer ran more than [`RING`] calls ahead of this rank's watchdog) is
//! skipped, never reported.

use ferrocx_sdk::collective::Coll;

/// Slots per writer in each rank's ring.
pub const RING: usize = 4096;

/// Bits of the hash in a note; the rest is the tag.
const HASH_BITS: u32 = 20;
const HASH_MASK: u32 = (1 << HASH_BITS) - 1;

/// The hash of a call's shape: collective, type, operator, count, root
/// (whether the rank runs in place may differ between ranks, so it is not in
/// it). Never 0, so a slot nobody wrote never matches.
pub fn hash(coll: Coll, dtype: i32, op: i32, count: usize, root: usize) -> u32 {
    let coll_index = Coll::ALL
        .iter()
        .position(|&c| c == coll)
        .unwrap_or(usize::MAX);
    // FNV-1a over the fields' little-endian bytes.
    let mut h: u32 = 0x811c_9dc5;
    for field in [
        coll_index as u64,
        dtype as u64,
        op as u64,
        count as u64,
        root as u64,
    ] {
        for b in field.to_le_bytes() {
            h ^= b as u32;
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    (h ^ (h >> HASH_BITS)) % HASH_MASK + 1
}

/// Which slot of a writer's ring call `seq` uses.
pub fn slot(seq: u64) -> usize {
    (seq % RING as u64) as usize
}

/// The note of call `seq` with `hash`: the tag (`seq / RING`, 12 bits) over
/// the hash. Two calls that share a slot are `RING` apart, so their tags
/// differ (for 2²⁴ calls in a row).
pub fn note(seq: u64, hash: u32) -> u32 {
    (((seq / RING as u64) as u32) << HASH_BITS) | (hash & HASH_MASK)
}

/// A call whose note a peer contradicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The peer.
    pub peer: usize,
    /// The call's number.
    pub seq: u64,
}

/// The first of `calls` (`(seq, note)`, completed on this rank's stream,
/// oldest first) that some peer noted differently in `ring` (this rank's
/// ring: `nranks × RING` words, writer-major). Slots holding another call's
/// note (another tag) are skipped.
pub fn verify(me: usize, nranks: usize, ring: &[u32], calls: &[(u64, u32)]) -> Option<Mismatch> {
    debug_assert_eq!(ring.len(), nranks * RING);
    calls.iter().find_map(|&(seq, mine)| {
        (0..nranks).filter(|&p| p != me).find_map(|peer| {
            let theirs = *ring.get(peer * RING + slot(seq))?;
            let same_call = theirs >> HASH_BITS == mine >> HASH_BITS;
            (same_call && theirs != mine).then_some(Mismatch { peer, seq })
        })
    })
}

/// The error of a mismatch, in the core's wording (`mismatched calls: rank
/// A called …, rank B called …`), so the core reports `Error::Mismatch`.
/// `what` is this rank's call ("all_reduce of 4000 bytes per rank").
pub fn mismatch_message(me: usize, what: &str, m: &Mismatch) -> String {
    ferrocx_algo::fingerprint::mismatch_text(
        me,
        &format!("{what} as op #{} on plugin 'ce'", m.seq),
        m.peer,
        &format!(
            "another collective, type, operator, count or root as op #{} on plugin 'ce'",
            m.seq
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_tell_calls_apart_and_are_never_zero() {
        let h = |c, t, o, n, r| hash(c, t, o, n, r);
        let base = h(Coll::AllReduce, 8, 0, 1000, 0);
        assert_ne!(base, 0);
        assert_eq!(base, h(Coll::AllReduce, 8, 0, 1000, 0));
        for other in [
            h(Coll::AllReduce, 2, 0, 1000, 0),
            h(Coll::AllReduce, 8, 1, 1000, 0),
            h(Coll::AllReduce, 8, 0, 1001, 0),
            h(Coll::Broadcast, 8, 0, 1000, 0),
            h(Coll::Broadcast, 8, 0, 1000, 1),
        ] {
            assert_ne!(other, base);
        }
        for n in 0..10_000 {
            assert!(hash(Coll::AllGather, 0, 0, n, 0) & HASH_MASK != 0);
        }
    }

    #[test]
    fn notes_carry_the_tag_and_slots_wrap() {
        assert_eq!(slot(5), 5);
        assert_eq!(slot(RING as u64 + 5), 5);
        let a = note(5, 77);
        let b = note(RING as u64 + 5, 77);
        assert_ne!(a, b, "same slot, same call shape, other tag");
        assert_eq!(a & HASH_MASK, 77);
    }

    fn ring_with(n: usize, writes: &[(usize, u64, u32)]) -> Vec<u32> {
        let mut ring = vec![0u32; n * RING];
        for &(peer, seq, hash) in writes {
            ring[peer * RING + slot(seq)] = note(seq, hash);
        }
        ring
    }

    #[test]
    fn equal_calls_pass_different_ones_are_named() {
        let (n, me) = (3, 1);
        let mine = |seq, h| (seq, note(seq, h));
        let ring = ring_with(n, &[(0, 7, 11), (2, 7, 11), (0, 8, 12), (2, 8, 99)]);
        assert_eq!(verify(me, n, &ring, &[mine(7, 11)]), None);
        assert_eq!(
            verify(me, n, &ring, &[mine(7, 11), mine(8, 12)]),
            Some(Mismatch { peer: 2, seq: 8 })
        );
        // A peer that never wrote this call's slot (it called something else at
        // this number, or no ce collective at all): the empty slot differs.
        assert_eq!(
            verify(me, n, &ring, &[mine(9, 5)]),
            Some(Mismatch { peer: 0, seq: 9 })
        );
    }

    #[test]
    fn mismatches_read_as_the_core_words_them() {
        let m = Mismatch { peer: 0, seq: 5 };
        let text = mismatch_message(2, "all_reduce of 4000 bytes per rank", &m);
        assert!(
            text.starts_with("mismatched calls: rank 0 called another collective"),
            "{text}"
        );
        assert!(
            text.contains(
                ", rank 2 called all_reduce of 4000 bytes per rank as op #5 on plugin 'ce'"
            ),
            "{text}"
        );
    }

    #[test]
    fn slots_overwritten_by_later_calls_are_skipped() {
        let (n, me) = (2, 0);
        let later = RING as u64 + 3;
        let ring = ring_with(n, &[(1, later, 4)]);
        assert_eq!(verify(me, n, &ring, &[(3, note(3, 9))]), None);
        assert_eq!(
            verify(me, n, &ring, &[(later, note(later, 5))]),
            Some(Mismatch {
                peer: 1,
                seq: later
            })
        );
    }
}
