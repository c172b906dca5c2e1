//! The same-host direct-copy handshake: one [`P2pRegInfo`] per in-flight
//! message in a connection's shared segment. One implementation of the
//! protocol for every copy back end (DESIGN, "Memory, registration, windows"):
//! shm writes with `process_vm_writev` and needs only the receiver's address;
//! p2p writes with copy engines through the receiver's CUDA IPC handle, which
//! it carries next to the handshake as its [`WriteTarget`].
//!
//! Slot `seq % NREG` belongs to message `seq` (sequence numbers start at 1, so
//! 0 means "never used"). Every field that names a message holds its sequence
//! number rather than a flag, so a slot still carrying an older message
//! (`seq - NREG`) can never be mistaken for the current one.
//!
//! * receiver: [`RegSlot::publish`]`(seq, bytes, target)` — where the sender
//!   may write (or nowhere: the transport's own buffer), then
//!   `receiver_ready = seq` (Release).
//! * sender: [`RegSlot::offer`]`(seq)` sees `receiver_ready == seq` (Acquire)
//!   and reads the target; [`begin_copy`](RegSlot::begin_copy)
//!   (`copy_started = seq`), the copy, and once every byte landed
//!   [`finish_copy`](RegSlot::finish_copy) raises `copy_done = seq` (Release).
//! * receiver: [`RegSlot::copied`]`(seq)` observes `copy_done == seq` (Acquire).
//!
//! The receiver may republish a slot only after message `seq - NREG` completed
//! on its side, which is after the sender's last access to the slot for it.
//!
//! ```
//! use ferrocx_sdk::same_host::regslot::{Offer, RegSlot};
//! let slot = RegSlot::<u64>::default(); // shm: the target is the address alone
//! slot.publish(1, 4096, Some(&0x7f00_1000));
//! let offer = slot.offer(1).unwrap();
//! assert_eq!(offer, Offer { bytes: 4096, target: Some(0x7f00_1000) });
//! let prev = slot.begin_copy(1);
//! // ... write the bytes to 0x7f00_1000 in the receiver ...
//! slot.finish_copy(1, 4096);
//! assert_eq!(slot.copied(1), Some(4096));
//! # let _ = prev;
//! ```

use std::fmt;
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
    /// The receive buffer's address in the receiver's process, or 0: no direct
    /// copy (the transport's own buffer carries the message).
    pub receiver_reg_addr: AtomicU64,
    /// Bytes available at `receiver_reg_addr` (the posted receive's size).
    pub receiver_reg_bytes: AtomicU64,
}

/// Where the sender writes a message directly, as a copy back end needs it:
/// the receiver's address plus whatever else the back end must know (p2p: the
/// allocation's IPC handle and the buffer's offset in it). Stored in the slot
/// next to the handshake.
pub trait WriteTarget: Copy {
    /// The slot's cells for the part besides the address: atomics, written
    /// before `receiver_ready` is raised and read after it is seen.
    type Cells: Default + fmt::Debug + Send + Sync;
    /// The buffer's address in the receiver's process (never 0).
    fn addr(&self) -> u64;
    /// Store the rest into `cells` (Relaxed is enough: the Release store of
    /// `receiver_ready` publishes it).
    fn store(&self, cells: &Self::Cells);
    /// Rebuild from the published address and `cells`.
    fn load(addr: u64, cells: &Self::Cells) -> Self;
    /// Whether a message of `len` bytes fits the target as far as the target
    /// itself can tell (p2p: inside its allocation); the posted size is
    /// checked separately.
    fn fits(&self, _len: u64) -> bool {
        true
    }
}

/// The address alone (shm: `process_vm_writev` needs nothing else).
impl WriteTarget for u64 {
    type Cells = ();
    fn addr(&self) -> u64 {
        *self
    }
    fn store(&self, _: &()) {}
    fn load(addr: u64, _: &()) -> u64 {
        addr
    }
}

/// One slot as laid out in the segment: the handshake, the length the direct
/// copy delivered, and the back end's target cells, cache-line aligned (64
/// bytes with the address alone, 128 with p2p's IPC handle).
#[repr(C, align(64))]
pub struct RegSlot<T: WriteTarget> {
    /// The normative handshake.
    pub info: P2pRegInfo,
    /// Bytes written by the direct copy of message `copy_done`; stored before `copy_done`.
    pub copied_bytes: AtomicU64,
    /// The back end's part of the target.
    pub target: T::Cells,
}

impl<T: WriteTarget> Default for RegSlot<T> {
    fn default() -> Self {
        RegSlot {
            info: P2pRegInfo::default(),
            copied_bytes: AtomicU64::new(0),
            target: T::Cells::default(),
        }
    }
}

impl<T: WriteTarget> fmt::Debug for RegSlot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegSlot")
            .field("info", &self.info)
            .field("copied_bytes", &self.copied_bytes)
            .field("target", &self.target)
            .finish()
    }
}

/// What the receiver published for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer<T> {
    /// Size of the posted receive.
    pub bytes: u64,
    /// Where to write directly; `None`: through the transport's own buffer.
    pub target: Option<T>,
}

/// Slot index of message `seq` among `nreg` slots.
pub fn slot_index(seq: u64, nreg: usize) -> usize {
    (seq % nreg as u64) as usize
}

impl<T: WriteTarget> RegSlot<T> {
    /// Receiver: publish message `seq` of a `bytes`-byte receive, with a
    /// direct-write target or none.
    pub fn publish(&self, seq: u64, bytes: u64, target: Option<&T>) {
        let i = &self.info;
        match target {
            Some(t) => {
                t.store(&self.target);
                i.receiver_reg_addr.store(t.addr(), Ordering::Relaxed);
            }
            None => i.receiver_reg_addr.store(0, Ordering::Relaxed),
        }
        i.receiver_reg_bytes.store(bytes, Ordering::Relaxed);
        i.receiver_ready.store(seq, Ordering::Release);
    }

    /// Sender: the receiver's offer for `seq`, once it is published.
    pub fn offer(&self, seq: u64) -> Option<Offer<T>> {
        let i = &self.info;
        if i.receiver_ready.load(Ordering::Acquire) != seq {
            return None;
        }
        let bytes = i.receiver_reg_bytes.load(Ordering::Relaxed);
        let addr = i.receiver_reg_addr.load(Ordering::Relaxed);
        let target = (addr != 0).then(|| T::load(addr, &self.target));
        Some(Offer { bytes, target })
    }

    /// Sender: mark `seq` as being copied directly; returns the previous value
    /// for [`cancel_copy`](Self::cancel_copy).
    pub fn begin_copy(&self, seq: u64) -> u64 {
        self.info.copy_started.swap(seq, Ordering::Release)
    }

    /// Sender: the direct copy could not start (nothing was written); undo
    /// [`begin_copy`](Self::begin_copy).
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
    fn address_only_slots_are_one_cache_line() {
        assert_eq!(std::mem::size_of::<P2pRegInfo>(), 40);
        assert_eq!(std::mem::size_of::<RegSlot<u64>>(), 64);
        assert_eq!(slot_index(1, NREG), 1);
        assert_eq!(slot_index(NREG as u64, NREG), 0);
    }

    #[test]
    fn offers_match_exact_sequence_numbers() {
        let s = RegSlot::<u64>::default();
        assert_eq!(s.offer(1), None, "an empty slot offers nothing");
        s.publish(1, 4096, Some(&0x1000));
        assert_eq!(
            s.offer(1),
            Some(Offer {
                bytes: 4096,
                target: Some(0x1000)
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
        let s = RegSlot::<u64>::default();
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
