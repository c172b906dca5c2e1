//! Where a receiver wants a message written, as p2p publishes it in the
//! `P2pRegInfo` handshake (`ferrocx_sdk::same_host::regslot`, shared with
//! shm): besides the receiver's address, the allocation's IPC handle and the
//! buffer's offset in it. The sender opens the handle (cached), queues the
//! copy on its stream and raises `copy_done` once the copy's event completed.
//! 128 bytes a slot.

use ferrocx_sdk::device::{IpcHandle, HANDLE_BYTES};
use ferrocx_sdk::same_host::regslot as proto;
use ferrocx_sdk::same_host::WriteTarget;
use std::sync::atomic::{AtomicU64, Ordering};

/// One slot: the handshake, the copied length and the IPC target's cells.
pub type RegSlot = proto::RegSlot<Target>;

/// What the receiver published for one message.
pub type Offer = proto::Offer<Target>;

const _: () = assert!(std::mem::size_of::<RegSlot>() == 128);

/// Where the receiver wants a message written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The buffer's address in the receiver's process (a sender in the same
    /// process writes here directly; another one through the handle).
    pub addr: u64,
    /// The allocation's handle.
    pub handle: IpcHandle,
    /// `addr - allocation base`.
    pub offset: u64,
    /// The allocation's size.
    pub alloc_size: u64,
}

/// The slot cells of a [`Target`] besides its address.
#[derive(Debug, Default)]
pub struct TargetCells {
    /// Offset of `receiver_reg_addr` in its allocation.
    pub alloc_offset: AtomicU64,
    /// Size of that allocation.
    pub alloc_size: AtomicU64,
    /// The allocation's IPC handle (little-endian words).
    pub handle: [AtomicU64; HANDLE_BYTES / 8],
}

impl WriteTarget for Target {
    type Cells = TargetCells;

    fn addr(&self) -> u64 {
        self.addr
    }

    fn store(&self, c: &TargetCells) {
        for (w, v) in c.handle.iter().zip(self.handle.to_words()) {
            w.store(v, Ordering::Relaxed);
        }
        c.alloc_offset.store(self.offset, Ordering::Relaxed);
        c.alloc_size.store(self.alloc_size, Ordering::Relaxed);
    }

    fn fits(&self, len: u64) -> bool {
        self.offset
            .checked_add(len)
            .is_some_and(|end| end <= self.alloc_size)
    }

    fn load(addr: u64, c: &TargetCells) -> Target {
        let mut words = [0u64; HANDLE_BYTES / 8];
        for (v, w) in words.iter_mut().zip(&c.handle) {
            *v = w.load(Ordering::Relaxed);
        }
        Target {
            addr,
            handle: IpcHandle::from_words(&words),
            offset: c.alloc_offset.load(Ordering::Relaxed),
            alloc_size: c.alloc_size.load(Ordering::Relaxed),
        }
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

    /// The IPC target survives the slot, and a later message's offer without
    /// one does not reuse it.
    use proto::NREG;

    #[test]
    fn ipc_targets_round_trip_through_the_slot() {
        let s = RegSlot::default();
        s.publish(1, 4096, Some(&target(7)));
        assert_eq!(
            s.offer(1),
            Some(Offer {
                bytes: 4096,
                target: Some(target(7))
            })
        );
        let later = 1 + NREG as u64;
        s.publish(later, 10, None);
        assert_eq!(
            s.offer(later),
            Some(Offer {
                bytes: 10,
                target: None
            })
        );
        s.publish(later + NREG as u64, 20, Some(&target(9)));
        assert_eq!(
            s.offer(later + NREG as u64).unwrap().target,
            Some(target(9))
        );
        assert!(target(9).fits((1 << 20) - 9) && !target(9).fits((1 << 20) - 8));
    }
}
