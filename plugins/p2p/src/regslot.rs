//! The direct-copy handshake: one [`P2pRegInfo`] per in-flight message, in
//! the connection's shared segment. The same protocol as the shm transport's
//! (`plugins/shm/src/regslot.rs`), with a copy back end of CUDA IPC +
//! `cuMemcpyAsync` instead of `process_vm_writev`, so the slot also carries
//! the receiver's IPC handle and the offset of the buffer in its allocation.
//!
//! Slot `seq % NREG` belongs to message `seq` (sequence numbers start at 1, so
//! 0 means "never used"). Every field that names a message holds its sequence
//! number rather than a flag, so a slot still carrying an older message
//! (`seq - NREG`) can never be mistaken for the current one.
//!
//! * receiver: `publish(seq, …)` — the handle, offset and size of the
//!   allocation to write into (or nothing: use the FIFO), then
//!   `receiver_ready = seq` (Release).
//! * sender: `offer(seq)` sees `receiver_ready == seq` (Acquire) and reads the
//!   rest; opens the handle (cached), `begin_copy` (`copy_started = seq`),
//!   queues the copy on its stream, and once the copy's event completed,
//!   `finish_copy` raises `copy_done = seq` (Release).
//! * receiver: `copied(seq)` observes `copy_done == seq` (Acquire); the bytes
//!   are in its buffer.
//!
//! The receiver republishes a slot only after message `seq - NREG` completed
//! on its side, which is after the sender's last access to the slot for it.

use crate::backend::{IpcHandle, HANDLE_BYTES};
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
    /// The receive buffer's address in the receiver's process, or 0 to use the
    /// FIFO. Another process writes through the handle (below) instead; a
    /// sender in the same process writes here directly.
    pub receiver_reg_addr: AtomicU64,
    /// Bytes available at `receiver_reg_addr` (the posted receive's size).
    pub receiver_reg_bytes: AtomicU64,
}

/// One slot as laid out in the segment: the handshake, the bytes the direct
/// copy delivered, and where the buffer lies in its exported allocation.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct RegSlot {
    /// The normative handshake.
    pub info: P2pRegInfo,
    /// Bytes written by the direct copy of message `copy_done`; stored before `copy_done`.
    pub copied_bytes: AtomicU64,
    /// Offset of `receiver_reg_addr` in its allocation.
    pub alloc_offset: AtomicU64,
    /// Size of that allocation.
    pub alloc_size: AtomicU64,
    /// The allocation's IPC handle (little-endian words).
    pub handle: [AtomicU64; HANDLE_BYTES / 8],
}

const _: () = assert!(std::mem::size_of::<RegSlot>() == 128);

/// Where the receiver wants a message written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The buffer's address in the receiver's process.
    pub addr: u64,
    /// The allocation's handle.
    pub handle: IpcHandle,
    /// `addr - allocation base`.
    pub offset: u64,
    /// The allocation's size.
    pub alloc_size: u64,
}

/// What the receiver published for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Size of the posted receive.
    pub bytes: u64,
    /// Where to write directly; `None`: use the FIFO.
    pub target: Option<Target>,
}

/// Slot index of message `seq`.
pub fn slot_index(seq: u64, nreg: usize) -> usize {
    (seq % nreg as u64) as usize
}

impl RegSlot {
    /// Receiver: publish message `seq` of a `bytes`-byte receive, with a
    /// direct-write target or none (FIFO only).
    pub fn publish(&self, seq: u64, bytes: u64, target: Option<&Target>) {
        let i = &self.info;
        match target {
            Some(t) => {
                for (w, v) in self.handle.iter().zip(t.handle.to_words()) {
                    w.store(v, Ordering::Relaxed);
                }
                self.alloc_offset.store(t.offset, Ordering::Relaxed);
                self.alloc_size.store(t.alloc_size, Ordering::Relaxed);
                i.receiver_reg_addr.store(t.addr, Ordering::Relaxed);
            }
            None => i.receiver_reg_addr.store(0, Ordering::Relaxed),
        }
        i.receiver_reg_bytes.store(bytes, Ordering::Relaxed);
        i.receiver_ready.store(seq, Ordering::Release);
    }

    /// Sender: the receiver's offer for `seq`, once it is published.
    pub fn offer(&self, seq: u64) -> Option<Offer> {
        let i = &self.info;
        if i.receiver_ready.load(Ordering::Acquire) != seq {
            return None;
        }
        let bytes = i.receiver_reg_bytes.load(Ordering::Relaxed);
        let addr = i.receiver_reg_addr.load(Ordering::Relaxed);
        let target = (addr != 0).then(|| {
            let mut words = [0u64; HANDLE_BYTES / 8];
            for (v, w) in words.iter_mut().zip(&self.handle) {
                *v = w.load(Ordering::Relaxed);
            }
            Target {
                addr,
                handle: IpcHandle::from_words(&words),
                offset: self.alloc_offset.load(Ordering::Relaxed),
                alloc_size: self.alloc_size.load(Ordering::Relaxed),
            }
        });
        Some(Offer { bytes, target })
    }

    /// Sender: mark `seq` as being copied directly; returns the previous value
    /// for [`cancel_copy`](Self::cancel_copy).
    pub fn begin_copy(&self, seq: u64) -> u64 {
        self.info.copy_started.swap(seq, Ordering::Release)
    }

    /// Sender: the direct copy could not be queued (nothing was written); undo `begin_copy`.
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

    fn target(b: u8) -> Target {
        Target {
            addr: 0x7000_0000 + b as u64,
            handle: IpcHandle([b; HANDLE_BYTES]),
            offset: b as u64,
            alloc_size: 1 << 20,
        }
    }

    #[test]
    fn offers_match_exact_sequence_numbers() {
        let s = RegSlot::default();
        assert_eq!(s.offer(1), None, "an empty slot offers nothing");
        s.publish(1, 4096, Some(&target(7)));
        assert_eq!(
            s.offer(1),
            Some(Offer {
                bytes: 4096,
                target: Some(target(7))
            })
        );
        // The same slot serves message 1 + NREG later: the old offer must not match it.
        let later = 1 + NREG as u64;
        assert_eq!(s.offer(later), None);
        s.publish(later, 10, None);
        assert_eq!(s.offer(1), None);
        assert_eq!(
            s.offer(later),
            Some(Offer {
                bytes: 10,
                target: None
            })
        );
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
        assert_eq!(s.copied(newer), None);
        let prev = s.begin_copy(newer);
        assert_eq!(prev, 3);
        s.cancel_copy(prev);
        assert_eq!(s.info.copy_started.load(Ordering::Relaxed), 3);
        assert_eq!(s.copied(newer), None);
    }

    #[test]
    fn handle_words_round_trip() {
        let mut b = [0u8; HANDLE_BYTES];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 ^ 0xa5;
        }
        let h = IpcHandle(b);
        assert_eq!(IpcHandle::from_words(&h.to_words()), h);
        assert!(IpcHandle::NONE.is_none() && !h.is_none());
    }
}
