//! Where things lie in a rank's mailbox region (sans-IO: offsets only).
//!
//! Each rank owns one shared-memory region that its peers write into and it
//! reads. After a header come two slots per sender (rank `s` writes its
//! messages to rank `o` alternately into slot 0 and 1 of `o`'s region; its own
//! pair is this rank's scratch). A slot is a 48-byte head — the message
//! number as a `u64` flag, written last; the call's 32-byte fingerprint; the
//! payload's length — then the payload, so a message of up to 16 bytes
//! travels in the flag's cache line.
//!
//! Two slots per pair suffice because every pair exchanges in every call, both
//! ways, posting before taking: a rank writes its message number `m` to a peer
//! only after reading the peer's message `m − 1`, which the peer wrote only
//! after it had finished with message `m − 2` — the one in the slot being
//! overwritten.

/// Bytes of the region's header.
pub const HEADER: usize = 1024;
/// Offset of the `broken` word in the header (its own cache line).
pub const BROKEN: usize = 64;
/// Offset and size of the failure text that goes with `broken`.
pub const REASON: usize = 128;
/// Bytes of the failure text (NUL-padded).
pub const REASON_BYTES: usize = HEADER - REASON;
/// Bytes of a slot's head; the payload follows (16-byte aligned).
pub const HEAD: usize = 48;
/// Offset of the fingerprint in a slot.
pub const FINGERPRINT: usize = 8;
/// Offset of the payload length (`u32`) in a slot.
pub const LEN: usize = 40;
/// Region magic (`FXSC` v1) at offset 0.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FXSC\x01\0\0\0");

// The header's and the head's fields do not overlap.
const _: () = assert!(REASON + REASON_BYTES <= HEADER && BROKEN + 8 <= REASON);
const _: () = assert!(FINGERPRINT + ferrocx_algo::fingerprint::FINGERPRINT_BYTES <= LEN);
const _: () = assert!(LEN + 4 <= HEAD && HEAD.is_multiple_of(16));

/// The layout every rank computes alike from the agreed slot size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Ranks.
    pub nranks: usize,
    /// Largest payload.
    pub bytes: usize,
    /// Distance between slots (head + payload, rounded to a cache line).
    pub stride: usize,
}

impl Layout {
    /// `nranks` ranks, payloads of at most `bytes`.
    pub fn new(nranks: usize, bytes: usize) -> Self {
        Layout {
            nranks,
            bytes,
            stride: (HEAD + bytes).div_ceil(64) * 64,
        }
    }

    /// Bytes of a region.
    pub fn len(&self) -> usize {
        HEADER + self.nranks * 2 * self.stride
    }

    /// Whether the region is empty (never: it has a header).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Offset of sender `from`'s slot `parity` in a region.
    pub fn slot(&self, from: usize, parity: usize) -> usize {
        debug_assert!(from < self.nranks && parity < 2);
        HEADER + (from * 2 + parity) * self.stride
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_disjoint_and_inside() {
        for (n, bytes) in [(1, 0), (2, 8), (3, 16), (5, 4000), (16, 16 << 10)] {
            let l = Layout::new(n, bytes);
            let mut last_end = HEADER;
            for from in 0..n {
                for parity in 0..2 {
                    let at = l.slot(from, parity);
                    assert_eq!(at % 64, 0, "slot on a cache line");
                    assert_eq!((at + HEAD) % 16, 0, "payload 16-byte aligned");
                    assert!(at >= last_end, "slots do not overlap");
                    last_end = at + HEAD + bytes;
                }
            }
            assert!(last_end <= l.len());
        }
    }
}
