//! A connection's typed segment ([`Segment`]) on a shared-memory [`Region`]
//! (`ferrocx_sdk::same_host::region`).
//!
//! **Liveness.** Each end of a connection keeps its descriptor of the segment
//! open and holds the liveness lock on one byte of it: byte [`RECEIVER_BYTE`]
//! for the receiver (the creator), byte [`SENDER_BYTE`] for the sender; a free
//! lock means that end is gone (see the region's docs). Shared words are
//! reached through atomics only.

use crate::layout::{Layout, SegHeader, SlotHeader};
use crate::regslot::{slot_index, RegSlot};
use crate::revoke::RevokeEntry;
pub use ferrocx_sdk::same_host::region::{unlink_name, Region};
use std::io;

/// Lock byte held by a region's creator (a connection's receiver).
pub const RECEIVER_BYTE: i64 = 0;
/// Lock byte held by a connection's sender.
pub const SENDER_BYTE: i64 = 1;

/// One connection's segment: a region with the [`Layout`] of the FIFO flags,
/// handshake slots and revocations.
#[derive(Debug)]
pub struct Segment {
    region: Region,
    layout: Layout,
}

impl Segment {
    /// Receiver: create the segment (holding the receiver's lock byte).
    pub fn create(name: &str, layout: Layout) -> io::Result<Segment> {
        Ok(Segment {
            region: Region::create(name, layout.total, RECEIVER_BYTE)?,
            layout,
        })
    }

    /// Sender: map the receiver's segment and take the sender's lock byte.
    pub fn open(name: &str, layout: Layout) -> io::Result<Segment> {
        let region = Region::open(name, Some(layout.total))?;
        let _ = region.lock(SENDER_BYTE);
        Ok(Segment { region, layout })
    }

    /// The region (name, unlink, locks).
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The region, mutably (unlink).
    pub fn region_mut(&mut self) -> &mut Region {
        &mut self.region
    }

    /// The geometry this mapping was made with.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The header.
    pub fn header(&self) -> &SegHeader {
        // SAFETY: the mapping holds at least `layout.total` bytes, is page aligned
        // (≥ the header's 128-byte alignment), lives as long as `self`, and the
        // header holds only atomics, for which every bit pattern is valid.
        unsafe { &*(self.region.base() as *const SegHeader) }
    }

    /// Header of FIFO slot `i` (`i < nslots`).
    pub fn slot(&self, i: usize) -> &SlotHeader {
        assert!(i < self.layout.nslots, "FIFO slot {i} out of range");
        let off = self.layout.slots_off + i * std::mem::size_of::<SlotHeader>();
        // SAFETY: bounds checked above; 64-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.region.base().add(off) as *const SlotHeader) }
    }

    /// The handshake slot of message `seq`.
    pub fn reg(&self, seq: u64) -> &RegSlot {
        let i = slot_index(seq, self.layout.nreg);
        let off = self.layout.reg_off + i * std::mem::size_of::<RegSlot>();
        // SAFETY: `i < nreg`, so the slot lies inside the RegSlot array, which the
        // layout places at a 128-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.region.base().add(off) as *const RegSlot) }
    }

    /// Revocation entry `i` (`i < nrevoke`).
    pub fn revoke(&self, i: usize) -> &RevokeEntry {
        assert!(i < self.layout.nrevoke, "revocation entry {i} out of range");
        let off = self.layout.rev_off + i * std::mem::size_of::<RevokeEntry>();
        // SAFETY: bounds checked above; 64-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.region.base().add(off) as *const RevokeEntry) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::atomic::Ordering;

    fn test_name(tag: &str) -> String {
        format!("/ferrocx-p2ptest-{}-{tag}", std::process::id())
    }

    #[test]
    fn create_open_share_and_unlink() {
        let name = test_name("seg");
        let layout = Layout::new(4, 4096).unwrap();
        let a = Segment::create(&name, layout).unwrap();
        assert!(Path::new("/dev/shm").join(&name[1..]).exists());
        assert_eq!(
            Segment::create(&name, layout).unwrap_err().raw_os_error(),
            Some(libc::EEXIST)
        );
        let b = Segment::open(&name, layout).unwrap();
        a.header().tail.0.store(42, Ordering::Release);
        assert_eq!(b.header().tail.0.load(Ordering::Acquire), 42);
        a.slot(3).seq.store(9, Ordering::Relaxed);
        assert_eq!(b.slot(3).seq.load(Ordering::Relaxed), 9);
        let bigger = Layout::new(64, 4096).unwrap();
        assert!(
            Segment::open(&name, bigger).is_err(),
            "a short segment must not be mapped"
        );
        drop(a);
        assert!(
            !Path::new("/dev/shm").join(&name[1..]).exists(),
            "drop of the creator unlinks"
        );
        assert_eq!(
            b.header().tail.0.load(Ordering::Acquire),
            42,
            "mapping outlives the name"
        );
    }

    #[test]
    fn liveness_locks_follow_the_open_descriptions() {
        let name = test_name("locks");
        let layout = Layout::new(2, 4096).unwrap();
        let rx = Segment::create(&name, layout).unwrap();
        assert_eq!(rx.region().lock_held(SENDER_BYTE), Some(false));
        let tx = Segment::open(&name, layout).unwrap();
        assert_eq!(rx.region().lock_held(SENDER_BYTE), Some(true));
        assert_eq!(tx.region().lock_held(RECEIVER_BYTE), Some(true));
        drop(tx);
        assert_eq!(
            rx.region().lock_held(SENDER_BYTE),
            Some(false),
            "closing releases the lock"
        );
        let tx = Segment::open(&name, layout).unwrap();
        drop(rx);
        assert_eq!(tx.region().lock_held(RECEIVER_BYTE), Some(false));
    }
}
