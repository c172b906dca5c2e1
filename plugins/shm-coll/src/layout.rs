//! Where things lie in a rank's mailbox region (sans-IO: offsets only).
//!
//! Each rank owns one shared-memory region that its peers write into and it
//! reads. After a header come the collective rings, one per sender: rank `s`
//! writes its `k`-th collective message to rank `o` into head `k mod heads` of
//! `o`'s region and, when its payload is over [`INLINE`] bytes, the payload
//! into slot `k mod depth` (both powers of two agreed at setup, `depth` ≤
//! `heads` ≤ [`MAX_DEPTH`]; its own slots are this rank's scratch). A head is
//! one cache line — the message number + 1 as a `u64` flag, written last; the
//! call's 32-byte fingerprint; the payload's length; a payload of up to
//! [`INLINE`] bytes — so a small message is one line, and the heads of a
//! sender lie side by side: a ring of small messages as deep as `heads` costs
//! a few pages, whatever the slot size (slots of `bytes` each take their share
//! of `FERROCX_SHM_COLL_MEMORY`, which bounds `depth`).
//! Then one collective credit word per peer, each on its own
//! cache line: how many of this rank's collective messages that peer has
//! taken, written by the peer (every quarter ring, `comm::credit_every`); a
//! sender writes message `k` once message `k − heads` was credited, and
//! `k − depth` where it fills a slot. With the call check synchronous, every pair exchanges in
//! every call (once per chunk), so no rank gets more than an exchange ahead, and
//! the credit words are not used (both rings are 2 deep): taking the peer's message `k − 1` says it is
//! done with `k − 2` (`comm`'s lockstep); otherwise messages
//! flow only where data does, and a rank that receives nothing in a call (a
//! broadcast's root) runs up to `heads − 1` calls ahead of its peers
//! (`depth − 1` with payloads over [`INLINE`] bytes).
//!
//! After the collective credits come the point-to-point rings (when
//! `FERROCX_SHM_COLL_P2P_BYTES` is not 0): [`P2P_SLOTS`] slots per sender, each
//! a 16-byte head — the flag (message number + 1, written last), the length,
//! the sender's count of collective exchanges with the receiver — then the
//! payload, so a message of up to 48 bytes travels in the flag's cache line.
//! The send's fingerprint is implied, not carried: the ring says who sent it
//! to whom and its number, the head its size. Then one credit word per peer,
//! each on its own cache line: the number of this rank's messages that peer
//! has taken, written by the peer. Sends are one-way, unlike a collective's
//! exchange, so a sender needs those credits to know a slot is free again.

/// Bytes of the region's header.
pub const HEADER: usize = 1024;
/// Offset of the `broken` word in the header (its own cache line).
pub const BROKEN: usize = 64;
/// Offset of the call this rank is in, with the deferred check (its own cache
/// line): a `u64` word — 0 while being written, else the call's sequence
/// number + 1 — then the call's fingerprint.
pub const CALL: usize = 128;
/// Offset and size of the failure text that goes with `broken`.
pub const REASON: usize = 192;
/// Bytes of the failure text (NUL-padded).
pub const REASON_BYTES: usize = HEADER - REASON;
/// Bytes of a collective head before its inline payload (16-byte aligned).
pub const HEAD: usize = 48;
/// The largest payload carried in its head's line.
pub const INLINE: usize = 64 - HEAD;
/// Offset of the fingerprint in a head.
pub const FINGERPRINT: usize = 8;
/// Offset of the payload length (`u32`) in a head.
pub const LEN: usize = 40;
/// Bytes of a point-to-point slot's head; the payload follows.
pub const P2P_HEAD: usize = 16;
/// Offset of the payload length (`u32`) in a point-to-point slot.
pub const P2P_LEN: usize = 8;
/// Offset, in a point-to-point slot, of the sender's count of collective
/// exchanges with the receiver when it sent (`u32`, wrapping): which of the
/// two ranks' collectives the send came before.
pub const EPOCH: usize = 12;
/// Region magic (`FXSC` v6: collective heads apart from their slots; the
/// checked rings in lockstep, without credits; the call published) at offset 0. A peer of another version is
/// refused at mapping (shm-coll then sits the communicator out) rather than
/// left waiting for credits the other never writes.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FXSC\x06\0\0\0");
/// The most collective heads (and slots) per pair.
pub const MAX_DEPTH: usize = 64;
/// Point-to-point slots per sender: that many sends to one peer complete
/// before it takes any.
pub const P2P_SLOTS: usize = 8;

// The header's and the head's fields do not overlap.
const _: () = assert!(REASON + REASON_BYTES <= HEADER && BROKEN + 8 <= CALL);
const _: () = assert!(CALL + 8 + ferrocx_algo::fingerprint::FINGERPRINT_BYTES <= REASON);
const _: () = assert!(FINGERPRINT + ferrocx_algo::fingerprint::FINGERPRINT_BYTES <= LEN);
const _: () = assert!(LEN + 4 <= HEAD && HEAD.is_multiple_of(16));
const _: () = assert!(P2P_LEN + 4 <= EPOCH && EPOCH + 4 <= P2P_HEAD && P2P_HEAD.is_multiple_of(16));

/// The layout every rank computes alike from the agreed slot size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Ranks.
    pub nranks: usize,
    /// Largest payload.
    pub bytes: usize,
    /// Distance between slots (the payload, rounded to a cache line).
    pub stride: usize,
    /// Collective slots per sender (a power of two, 2 to `heads`: the
    /// slot of a message is a mask away, not a division).
    pub depth: usize,
    /// Collective heads per sender (a power of two, `depth` to [`MAX_DEPTH`]).
    pub heads: usize,
    /// Largest point-to-point message (0: no rings).
    pub p2p_bytes: usize,
    /// Distance between point-to-point slots.
    pub p2p_stride: usize,
    /// Where the slots, the collective credit words, the point-to-point rings
    /// and their credit words begin (computed once: every post and poll
    /// places a head).
    slots_at: usize,
    coll_credits_at: usize,
    rings_at: usize,
    credits_at: usize,
}

fn stride(head: usize, bytes: usize) -> usize {
    (head + bytes).div_ceil(64) * 64
}

impl Layout {
    /// `nranks` ranks, `heads` heads and `depth` slots for payloads of at
    /// most `bytes` per sender, point-to-point messages of at most
    /// `p2p_bytes` (0: none).
    pub fn new(nranks: usize, bytes: usize, depth: usize, heads: usize, p2p_bytes: usize) -> Self {
        debug_assert!((2..=heads).contains(&depth) && depth.is_power_of_two());
        debug_assert!(heads <= MAX_DEPTH && heads.is_power_of_two());
        let slot_stride = stride(0, bytes);
        let p2p_stride = if p2p_bytes == 0 {
            0
        } else {
            stride(P2P_HEAD, p2p_bytes)
        };
        let slots_at = HEADER + nranks * heads * 64;
        let coll_credits_at = slots_at + nranks * depth * slot_stride;
        let rings_at = coll_credits_at + nranks * 64;
        Layout {
            nranks,
            bytes,
            stride: slot_stride,
            depth,
            heads,
            p2p_bytes,
            p2p_stride,
            slots_at,
            coll_credits_at,
            rings_at,
            credits_at: rings_at + nranks * P2P_SLOTS * p2p_stride,
        }
    }

    /// Where the collective credit words begin.
    fn coll_credits(&self) -> usize {
        self.coll_credits_at
    }

    /// Where the point-to-point rings begin.
    fn rings(&self) -> usize {
        self.rings_at
    }

    /// Where the credit words begin.
    fn credits(&self) -> usize {
        self.credits_at
    }

    /// Bytes of a region.
    pub fn len(&self) -> usize {
        if self.p2p_bytes == 0 {
            self.rings()
        } else {
            self.credits() + self.nranks * 64
        }
    }

    /// Whether the region is empty (never: it has a header).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Offset of sender `from`'s head for its collective message `number`.
    #[inline]
    pub fn head(&self, from: usize, number: u64) -> usize {
        debug_assert!(from < self.nranks);
        let i = (number & (self.heads as u64 - 1)) as usize;
        HEADER + (from * self.heads + i) * 64
    }

    /// Offset of sender `from`'s slot for the payload of its collective
    /// message `number` (when over [`INLINE`] bytes).
    #[inline]
    pub fn slot(&self, from: usize, number: u64) -> usize {
        debug_assert!(from < self.nranks);
        let i = (number & (self.depth as u64 - 1)) as usize;
        self.slots_at + (from * self.depth + i) * self.stride
    }

    /// Offset of the collective credit word peer `from` writes (how many of
    /// this region's owner's collective messages it took).
    pub fn coll_credit(&self, from: usize) -> usize {
        debug_assert!(from < self.nranks);
        self.coll_credits() + from * 64
    }

    /// Offset of sender `from`'s point-to-point slot for its message `number`.
    pub fn p2p_slot(&self, from: usize, number: u64) -> usize {
        debug_assert!(from < self.nranks && self.p2p_bytes > 0);
        let i = (number % P2P_SLOTS as u64) as usize;
        self.rings() + (from * P2P_SLOTS + i) * self.p2p_stride
    }

    /// Offset of the credit word peer `from` writes (how many of this
    /// region's owner's messages it took).
    pub fn credit(&self, from: usize) -> usize {
        debug_assert!(from < self.nranks && self.p2p_bytes > 0);
        self.credits() + from * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every span of a layout — (start, end) of the header, each head, slot
    /// and credit word, and each point-to-point slot and credit — checked for
    /// alignment and rings on the way.
    fn spans(l: &Layout) -> Vec<(usize, usize)> {
        let mut spans = vec![(0, HEADER)];
        for from in 0..l.nranks {
            for k in 0..l.heads as u64 {
                let at = l.head(from, k);
                assert_eq!(at, l.head(from, k + l.heads as u64), "a ring");
                assert_eq!(at % 64, 0, "a head is a cache line");
                assert_eq!((at + HEAD) % 16, 0, "inline payload 16-byte aligned");
                spans.push((at, at + 64));
            }
            for k in 0..l.depth as u64 {
                let at = l.slot(from, k);
                assert_eq!(at, l.slot(from, k + l.depth as u64), "a ring");
                assert_eq!(at % 64, 0, "slot on a cache line");
                spans.push((at, at + l.bytes));
            }
            let c = l.coll_credit(from);
            assert_eq!(c % 64, 0, "a credit word has its own cache line");
            spans.push((c, c + 64));
            if l.p2p_bytes > 0 {
                for m in 0..P2P_SLOTS as u64 {
                    let at = l.p2p_slot(from, m);
                    assert_eq!(at % 64, 0);
                    assert_eq!(at, l.p2p_slot(from, m + P2P_SLOTS as u64), "a ring");
                    assert_eq!((at + P2P_HEAD) % 16, 0, "payload 16-byte aligned");
                    spans.push((at, at + P2P_HEAD + l.p2p_bytes));
                }
                let c = l.credit(from);
                assert_eq!(c % 64, 0, "a credit word has its own cache line");
                spans.push((c, c + 64));
            }
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{w:?} overlap");
        }
        spans
    }

    #[test]
    fn heads_slots_and_credits_are_aligned_disjoint_and_inside() {
        for (n, bytes, depth, heads) in [
            (1, 64, 2, 2),
            (2, 64, 8, 64),
            (3, 4032, 4, 4),
            (5, 4000, 64, 64),
            (16, 16 << 10, 2, 64),
        ] {
            let l = Layout::new(n, bytes, depth, heads, 0);
            let spans = spans(&l);
            assert_eq!(l.len(), spans.last().unwrap().1, "no point-to-point rings");
        }
    }

    #[test]
    fn rings_and_credits_follow_the_slots_aligned_and_disjoint() {
        for (n, bytes, depth, heads, p2p) in [
            (2, 64, 8, 64, 16),
            (3, 4000, 2, 2, 4096),
            (5, 64, 32, 64, 100),
        ] {
            let l = Layout::new(n, bytes, depth, heads, p2p);
            assert!(spans(&l).last().unwrap().1 <= l.len());
        }
    }

    #[test]
    fn heads_take_a_line_each_whatever_the_slot() {
        // 64 heads per sender at 4 ranks: 16 KiB, against 64 slots of 64 KiB.
        let deep = Layout::new(4, 64 << 10, 16, 64, 0);
        let shallow = Layout::new(4, 64 << 10, 16, 16, 0);
        assert_eq!(deep.len() - shallow.len(), 4 * 48 * 64);
    }
}
