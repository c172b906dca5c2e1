//! Where things lie in a rank's mailbox region (sans-IO: offsets only).
//!
//! Each rank owns one shared-memory region that its peers write into and it
//! reads. After a header come `depth` slots per sender (a power of two, 2 to [`MAX_DEPTH`],
//! agreed at setup: rank `s` writes its `k`-th collective message to rank `o`
//! into slot `k mod depth` of `o`'s region; its own slots are this rank's
//! scratch). A slot is a 48-byte head — the message number + 1 as a `u64`
//! flag, written last; the call's 32-byte fingerprint; the payload's length —
//! then the payload, so a message of up to 16 bytes travels in the flag's
//! cache line. Then one collective credit word per peer, each on its own
//! cache line: how many of this rank's collective messages that peer has
//! taken, written by the peer (every quarter ring, `comm::credit_every`); a
//! sender writes message `k` once message `k − depth` was credited. With the call check synchronous, every pair exchanges in
//! every call (once per chunk), so no rank gets more than an exchange ahead, and
//! the credit words are not used: taking the peer's message `k − 1` says it is
//! done with `k − 2` (`comm`'s lockstep); otherwise messages
//! flow only where data does, and a rank that receives nothing in a call (a
//! broadcast's root) runs up to `depth − 1` calls ahead of its peers.
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
/// Bytes of a slot's head; the payload follows (16-byte aligned).
pub const HEAD: usize = 48;
/// Offset of the fingerprint in a slot.
pub const FINGERPRINT: usize = 8;
/// Offset of the payload length (`u32`) in a slot.
pub const LEN: usize = 40;
/// Bytes of a point-to-point slot's head; the payload follows.
pub const P2P_HEAD: usize = 16;
/// Offset of the payload length (`u32`) in a point-to-point slot.
pub const P2P_LEN: usize = 8;
/// Offset, in a point-to-point slot, of the sender's count of collective
/// exchanges with the receiver when it sent (`u32`, wrapping): which of the
/// two ranks' collectives the send came before.
pub const EPOCH: usize = 12;
/// Region magic (`FXSC` v5: the checked collective rings in lockstep, without
/// credits; the call published) at offset 0. A peer of another version is
/// refused at mapping (shm-coll then sits the communicator out) rather than
/// left waiting for credits the other never writes.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FXSC\x05\0\0\0");
/// The most collective slots per pair.
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
    /// Distance between slots (head + payload, rounded to a cache line).
    pub stride: usize,
    /// Collective slots per sender (a power of two, 2 to [`MAX_DEPTH`]: the
    /// slot of a message is a mask away, not a division).
    pub depth: usize,
    /// Largest point-to-point message (0: no rings).
    pub p2p_bytes: usize,
    /// Distance between point-to-point slots.
    pub p2p_stride: usize,
    /// Where the collective credit words, the point-to-point rings and their
    /// credit words begin (computed once: every post and poll places a slot).
    coll_credits_at: usize,
    rings_at: usize,
    credits_at: usize,
}

fn stride(head: usize, bytes: usize) -> usize {
    (head + bytes).div_ceil(64) * 64
}

impl Layout {
    /// `nranks` ranks, payloads of at most `bytes` in `depth` slots per
    /// sender, point-to-point messages of at most `p2p_bytes` (0: none).
    pub fn new(nranks: usize, bytes: usize, depth: usize, p2p_bytes: usize) -> Self {
        debug_assert!((2..=MAX_DEPTH).contains(&depth) && depth.is_power_of_two());
        let slot_stride = stride(HEAD, bytes);
        let p2p_stride = if p2p_bytes == 0 {
            0
        } else {
            stride(P2P_HEAD, p2p_bytes)
        };
        let coll_credits_at = HEADER + nranks * depth * slot_stride;
        let rings_at = coll_credits_at + nranks * 64;
        Layout {
            nranks,
            bytes,
            stride: slot_stride,
            depth,
            p2p_bytes,
            p2p_stride,
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

    /// Offset of sender `from`'s slot for its collective message `number`.
    pub fn slot(&self, from: usize, number: u64) -> usize {
        debug_assert!(from < self.nranks);
        let i = (number & (self.depth as u64 - 1)) as usize;
        HEADER + (from * self.depth + i) * self.stride
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

    #[test]
    fn slots_are_aligned_disjoint_and_inside() {
        for (n, bytes, depth) in [
            (1, 0, 2),
            (2, 8, 8),
            (3, 16, 4),
            (5, 4000, 64),
            (16, 16 << 10, 2),
        ] {
            let l = Layout::new(n, bytes, depth, 0);
            let mut last_end = HEADER;
            for from in 0..n {
                for k in 0..depth as u64 {
                    let at = l.slot(from, k);
                    assert_eq!(at, l.slot(from, k + depth as u64), "a ring");
                    assert_eq!(at % 64, 0, "slot on a cache line");
                    assert_eq!((at + HEAD) % 16, 0, "payload 16-byte aligned");
                    assert!(at >= last_end, "slots do not overlap");
                    last_end = at + HEAD + bytes;
                }
            }
            for from in 0..n {
                let c = l.coll_credit(from);
                assert_eq!(c % 64, 0, "a credit word has its own cache line");
                assert!(c >= last_end);
                last_end = c + 64;
            }
            assert_eq!(l.len(), last_end, "no point-to-point rings");
        }
    }

    #[test]
    fn rings_and_credits_follow_the_slots_aligned_and_disjoint() {
        for (n, bytes, depth, p2p) in [(2, 64, 8, 16), (3, 4000, 2, 4096), (5, 64, 32, 100)] {
            let l = Layout::new(n, bytes, depth, p2p);
            // Every span: (start, end); none overlaps another or leaves the region.
            let mut spans = vec![(0, HEADER)];
            for from in 0..n {
                for k in 0..depth as u64 {
                    spans.push((l.slot(from, k), l.slot(from, k) + HEAD + bytes));
                }
                spans.push((l.coll_credit(from), l.coll_credit(from) + 64));
                for m in 0..P2P_SLOTS as u64 {
                    let at = l.p2p_slot(from, m);
                    assert_eq!(at % 64, 0);
                    assert_eq!(at, l.p2p_slot(from, m + P2P_SLOTS as u64), "a ring");
                    assert_eq!((at + P2P_HEAD) % 16, 0, "payload 16-byte aligned");
                    spans.push((at, at + P2P_HEAD + p2p));
                }
                let c = l.credit(from);
                assert_eq!(c % 64, 0, "a credit word has its own cache line");
                spans.push((c, c + 64));
            }
            spans.sort_unstable();
            for w in spans.windows(2) {
                assert!(w[0].1 <= w[1].0, "{w:?} overlap");
            }
            assert!(spans.last().unwrap().1 <= l.len());
        }
    }
}
