//! The single-copy handshake: one [`P2pRegInfo`] per in-flight message, in the segment.
//!
//! Slot `seq % NREG` belongs to message `seq` (sequence numbers start at 1, so
//! 0 means "never used"). Every field that names a message holds its sequence
//! number rather than a flag, so a slot still carrying an older message
//! (`seq - NREG`) can never be mistaken for the current one.
//!
//! * receiver: `publish(seq, addr, bytes)` — where the sender may write
//!   (`addr == 0`: use the ring), then `receiver_ready = seq` (Release).
//! * sender: `offer(seq)` sees `receiver_ready == seq` (Acquire) and reads
//!   the address; `begin_copy`, the copy itself, `finish_copy` raises
//!   `copy_done = seq` (Release) after the bytes landed.
//! * receiver: `copied(seq)` observes `copy_done == seq` (Acquire).
//!
//! The receiver may republish a slot only after message `seq - NREG` completed
//! on its side, which is after the sender's last access to the slot for it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Number of handshake slots in a segment (messages that may be offered ahead).
pub const NREG: usize = 32;

/// The per-message handshake record shared by sender and receiver (normative names).
#[repr(C)]
#[derive(Debug, Default)]
pub struct P2pRegInfo {
    /// Sequence number of the message the sender started copying directly.
    pub copy_started: AtomicU64,
    /// Sequence number of the message whose direct copy has fully landed.
    pub copy_done: AtomicU64,
    /// Sequence number of the message the receiver published this slot for.
    pub receiver_ready: AtomicU64,
    /// Address in the receiver's process to write to, or 0 to use the ring.
    pub receiver_reg_addr: AtomicU64,
    /// Bytes available at `receiver_reg_addr` (the posted receive's size).
    pub receiver_reg_bytes: AtomicU64,
}

/// One slot as laid out in the segment: the handshake plus the length that
/// the direct copy delivered (the receiver's `nbytes`), padded to a cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct RegSlot {
    /// The normative handshake.
    pub info: P2pRegInfo,
    /// Bytes written by the direct copy of message `copy_done`; stored before `copy_done`.
    pub copied_bytes: AtomicU64,
}

/// What the receiver offered for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Destination address in the receiver (0: no direct copy).
    pub addr: u64,
    /// Size of the posted receive.
    pub bytes: u64,
}

/// Slot index of message `seq`.
pub fn slot_index(seq: u64, nreg: usize) -> usize {
    (seq % nreg as u64) as usize
}

impl RegSlot {
    /// Receiver: publish message `seq`'s destination (`addr == 0`: ring only).
    pub fn publish(&self, seq: u64, addr: u64, bytes: u64) {
        self.info.receiver_reg_addr.store(addr, Ordering::Relaxed);
        self.info.receiver_reg_bytes.store(bytes, Ordering::Relaxed);
        self.info.receiver_ready.store(seq, Ordering::Release);
    }

    /// Sender: the receiver's offer for `seq`, once it is published.
    pub fn offer(&self, seq: u64) -> Option<Offer> {
        if self.info.receiver_ready.load(Ordering::Acquire) != seq {
            return None;
        }
        Some(Offer {
            addr: self.info.receiver_reg_addr.load(Ordering::Relaxed),
            bytes: self.info.receiver_reg_bytes.load(Ordering::Relaxed),
        })
    }

    /// Sender: mark `seq` as being copied directly; returns the previous value
    /// for [`cancel_copy`](Self::cancel_copy).
    pub fn begin_copy(&self, seq: u64) -> u64 {
        self.info.copy_started.swap(seq, Ordering::Release)
    }

    /// Sender: the direct copy could not start (nothing was written); undo `begin_copy`.
    pub fn cancel_copy(&self, previous: u64) {
        self.info.copy_started.store(previous, Ordering::Release);
    }

    /// Sender: all `nbytes` of `seq` are in the receiver's buffer.
    pub fn finish_copy(&self, seq: u64, nbytes: u64) {
        self.copied_bytes.store(nbytes, Ordering::Relaxed);
        self.info.copy_done.store(seq, Ordering::Release);
    }

    /// Receiver: `Some(nbytes)` once the direct copy of `seq` has landed.
    pub fn copied(&self, seq: u64) -> Option<u64> {
        if self.info.copy_done.load(Ordering::Acquire) != seq {
            return None;
        }
        Some(self.copied_bytes.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<P2pRegInfo>(), 40);
        assert_eq!(std::mem::size_of::<RegSlot>(), 64);
        assert_eq!(slot_index(1, NREG), 1);
        assert_eq!(slot_index(NREG as u64, NREG), 0);
    }

    #[test]
    fn offers_match_exact_sequence_numbers() {
        let s = RegSlot::default();
        assert_eq!(s.offer(1), None, "an empty slot offers nothing");
        s.publish(1, 0x1000, 4096);
        assert_eq!(
            s.offer(1),
            Some(Offer {
                addr: 0x1000,
                bytes: 4096
            })
        );
        // The same slot serves message 1 + NREG later: the old offer must not match it.
        assert_eq!(s.offer(1 + NREG as u64), None);
        s.publish(1 + NREG as u64, 0, 10);
        assert_eq!(s.offer(1), None);
        assert_eq!(s.offer(1 + NREG as u64), Some(Offer { addr: 0, bytes: 10 }));
    }

    #[test]
    fn stale_copy_done_is_not_a_completion() {
        let s = RegSlot::default();
        let prev = s.begin_copy(3);
        assert_eq!(prev, 0);
        assert_eq!(s.copied(3), None);
        s.finish_copy(3, 77);
        assert_eq!(s.copied(3), Some(77));
        let newer = 3 + NREG as u64;
        assert_eq!(
            s.copied(newer),
            None,
            "copy_done of message 3 must not complete message 3+NREG"
        );
        let prev = s.begin_copy(newer);
        assert_eq!(prev, 3);
        s.cancel_copy(prev);
        assert_eq!(s.info.copy_started.load(Ordering::Relaxed), 3);
        assert_eq!(s.copied(newer), None);
    }
}
