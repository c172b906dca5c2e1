//! One connection's POSIX shared-memory segment: typed access to its parts on
//! a shared-memory region (`ferrocx_sdk::same_host::region`: create/open, map,
//! unlink, unmap; a full /dev/shm is an error at setup, not a SIGBUS later). Everything shared is
//! reached through atomics ([`SegHeader`], [`RegSlot`], [`SlotHeader`]) or
//! copied in and out of ring slots with [`Segment::write_slot`] /
//! [`Segment::read_slot`]; no Rust reference into the payload ever exists, so
//! the other process writing it cannot alias one.

use crate::layout::{Layout, SegHeader, SlotHeader};
use crate::regslot::{slot_index, RegSlot};
pub use ferrocx_sdk::same_host::region::unlink_name;
use ferrocx_sdk::same_host::region::Region;
use std::io;

/// A mapped segment on a shared-memory [`Region`]: unmapped on drop, and
/// unlinked then if this side still owns the name.
#[derive(Debug)]
pub struct Segment {
    region: Region,
    layout: Layout,
}

/// The lock byte the creator (the receiver) holds on its segment (see
/// `ferrocx_sdk::same_host::region`; nothing reads it yet in shm).
const CREATOR_BYTE: i64 = 0;

impl Segment {
    /// Create `name` exclusively (EEXIST if taken), size and reserve it, map it.
    /// The new segment is zero-filled and owns its name until [`unlink`](Self::unlink).
    pub fn create(name: &str, layout: Layout) -> io::Result<Segment> {
        let region = Region::create(name, layout.total, CREATOR_BYTE).map_err(|e| {
            if e.kind() == io::ErrorKind::StorageFull {
                io::Error::new(
                    e.kind(),
                    format!("{e}; or lower FERROCX_SHM_NSLOTS / FERROCX_SHM_CHUNK_SIZE"),
                )
            } else {
                e
            }
        })?;
        Ok(Segment { region, layout })
    }

    /// Map an existing segment made by the peer; fails if it is smaller than `layout`.
    pub fn open(name: &str, layout: Layout) -> io::Result<Segment> {
        Ok(Segment {
            region: Region::open(name, Some(layout.total))?,
            layout,
        })
    }

    /// The segment's name in /dev/shm.
    pub fn name(&self) -> &str {
        self.region.name()
    }

    /// Remove the name now; the mapping stays. Safe to repeat; ENOENT (the
    /// peer unlinked first) is not an error.
    pub fn unlink(&mut self) -> io::Result<()> {
        self.region.unlink()
    }

    fn base(&self) -> *mut u8 {
        self.region.base()
    }

    /// The geometry this mapping was made with.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The header.
    pub fn header(&self) -> &SegHeader {
        // SAFETY: the mapping is at least `layout.total` bytes, page aligned
        // (≥ the header's 128-byte alignment), lives as long as `self`, and the
        // header holds only atomics, for which every bit pattern is valid.
        unsafe { &*(self.base() as *const SegHeader) }
    }

    /// The handshake slot of message `seq`.
    pub fn reg(&self, seq: u64) -> &RegSlot {
        let i = slot_index(seq, self.layout.nreg);
        let off = self.layout.reg_off + i * std::mem::size_of::<RegSlot>();
        // SAFETY: `i < nreg`, so the slot lies inside the RegSlot array, which
        // Layout places at a 128-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.base().add(off) as *const RegSlot) }
    }

    /// Header of ring slot `i` (`i < nslots`).
    pub fn slot_header(&self, i: usize) -> &SlotHeader {
        assert!(i < self.layout.nslots, "ring slot {i} out of range");
        let off = self.layout.slots_off + i * std::mem::size_of::<SlotHeader>();
        // SAFETY: bounds checked above; 64-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.base().add(off) as *const SlotHeader) }
    }

    /// Copy `src` into the payload of ring slot `i` (the sender owns the slot).
    pub fn write_slot(&self, i: usize, src: &[u8]) {
        assert!(
            i < self.layout.nslots && src.len() <= self.layout.chunk,
            "ring write out of range"
        );
        // SAFETY: destination range is inside slot i of the mapping (checked);
        // `src` is a valid slice in our own memory and cannot overlap the mapping
        // region we own exclusively under the ring protocol.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.base().add(self.layout.slot_data_off(i)),
                src.len(),
            )
        }
    }

    /// Copy the first `dst.len()` bytes of ring slot `i` out (the receiver owns the slot).
    pub fn read_slot(&self, i: usize, dst: &mut [u8]) {
        assert!(
            i < self.layout.nslots && dst.len() <= self.layout.chunk,
            "ring read out of range"
        );
        // SAFETY: source range is inside slot i of the mapping (checked); `dst`
        // is a valid, exclusively borrowed slice outside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base().add(self.layout.slot_data_off(i)),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::atomic::Ordering;

    fn test_name(tag: &str) -> String {
        format!("/ferrocx-test-{}-{tag}", std::process::id())
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
        a.header().head.0.store(42, Ordering::Release);
        assert_eq!(b.header().head.0.load(Ordering::Acquire), 42);
        a.write_slot(3, b"hello");
        let mut out = [0u8; 5];
        b.read_slot(3, &mut out);
        assert_eq!(&out, b"hello");
        a.reg(7).publish(7, 2, Some(&1));
        assert!(b.reg(7).offer(7).is_some());
        let bigger = Layout::new(8, 4096).unwrap();
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
            b.header().head.0.load(Ordering::Acquire),
            42,
            "mapping outlives the name"
        );
    }
}
