//! A connection's typed segment ([`Segment`]) on a shared-memory [`Region`].
//!
//! **Liveness.** Each end keeps its descriptor of the segment open and holds
//! the liveness lock on one byte of it: [`RECEIVER_BYTE`] for the receiver
//! (the creator), [`SENDER_BYTE`] for the sender; a free lock means that end
//! is gone (see the region's docs). Shared words are reached through atomics
//! only; the FIFO's bytes, when they live here, only through raw copies
//! whose ownership the FIFO protocol decides.

use super::layout::{Layout, RevokeEntry, SegHeader, SlotHeader};
use super::regslot::{slot_index, RegSlot, WriteTarget};
use crate::error::{PluginError, PluginResult};
use crate::region::Region;
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lock byte held by a region's creator (a connection's receiver).
pub const RECEIVER_BYTE: i64 = 0;
/// Lock byte held by a connection's sender.
pub const SENDER_BYTE: i64 = 1;

/// Attempts at finding a free segment name before giving up.
const NAME_ATTEMPTS: usize = 64;

/// Makes segment names unique within the process (with the pid, across processes).
static SEGMENT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Every segment of transport `name` is called `/ferrocx-<name>-<pid>-<conn id>-<n>`.
pub fn name_prefix(name: &str) -> String {
    format!("/ferrocx-{name}-")
}

/// One connection's segment: a region with the [`Layout`] of the FIFO flags,
/// handshake slots, revocations and (for host back ends) the FIFO's bytes.
#[derive(Debug)]
pub struct Segment<T: WriteTarget> {
    region: Region,
    layout: Layout,
    _target: PhantomData<T>,
}

impl<T: WriteTarget> Segment<T> {
    /// Receiver: create `name` exclusively (EEXIST if taken), holding the
    /// receiver's lock byte. Zero-filled; owns its name until unlinked.
    pub fn create(name: &str, layout: Layout) -> io::Result<Self> {
        Self::check(&layout);
        Ok(Segment {
            region: Region::create(name, layout.total, RECEIVER_BYTE)?,
            layout,
            _target: PhantomData,
        })
    }

    /// Receiver: create a segment with a fresh name for connection `conn_id`
    /// of transport `transport`. `hint` follows a "no room" error.
    pub fn create_unique(
        transport: &str,
        conn_id: u64,
        layout: Layout,
        hint: &str,
    ) -> PluginResult<Self> {
        let pid = std::process::id();
        let prefix = name_prefix(transport);
        for _ in 0..NAME_ATTEMPTS {
            let n = SEGMENT_COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("{prefix}{pid}-{conn_id:x}-{n:x}");
            match Self::create(&name, layout) {
                Ok(seg) => return Ok(seg),
                // A leftover of an earlier process with our pid: take the next name.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => {
                    let what = format!(
                        "{transport}: cannot create segment {name} ({} bytes)",
                        layout.total
                    );
                    let e = if e.kind() == io::ErrorKind::StorageFull {
                        io::Error::new(e.kind(), format!("{e}; or {hint}"))
                    } else {
                        e
                    };
                    return Err(PluginError::io(what, e));
                }
            }
        }
        Err(PluginError::internal(format!(
            "{transport}: no free segment name after {NAME_ATTEMPTS} attempts"
        )))
    }

    /// Sender: map the receiver's segment and take the sender's lock byte.
    pub fn open(name: &str, layout: Layout) -> io::Result<Self> {
        Self::check(&layout);
        let region = Region::open(name, Some(layout.total))?;
        let _ = region.lock(SENDER_BYTE);
        Ok(Segment {
            region,
            layout,
            _target: PhantomData,
        })
    }

    fn check(layout: &Layout) {
        assert_eq!(
            layout.reg_bytes,
            std::mem::size_of::<RegSlot<T>>(),
            "layout made for another handshake slot size"
        );
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
    pub fn reg(&self, seq: u64) -> &RegSlot<T> {
        let i = slot_index(seq, self.layout.nreg);
        let off = self.layout.reg_off + i * self.layout.reg_bytes;
        // SAFETY: `i < nreg` and `reg_bytes` is the slot's size (checked at
        // construction), so the slot lies inside the RegSlot array, which the
        // layout places at a 128-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.region.base().add(off) as *const RegSlot<T>) }
    }

    /// Revocation entry `i` (`i < nrevoke`).
    pub fn revoke(&self, i: usize) -> &RevokeEntry {
        assert!(i < self.layout.nrevoke, "revocation entry {i} out of range");
        let off = self.layout.rev_off + i * std::mem::size_of::<RevokeEntry>();
        // SAFETY: bounds checked above; 64-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.region.base().add(off) as *const RevokeEntry) }
    }

    /// The FIFO's bytes in this process, when they live in the segment.
    pub fn data_addr(&self) -> Option<u64> {
        self.layout
            .data_off
            .map(|off| self.region.base() as u64 + off as u64)
    }

    /// Whether the other end still holds its lock on the segment (`me_sender`:
    /// this end is the sender); `None` where the system cannot tell.
    pub fn peer_holds(&self, me_sender: bool) -> Option<bool> {
        let byte = if me_sender {
            RECEIVER_BYTE
        } else {
            SENDER_BYTE
        };
        self.region.lock_held(byte)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    type Seg = Segment<u64>;

    fn test_name(tag: &str) -> String {
        format!("/ferrocx-test-{}-{tag}", std::process::id())
    }

    fn layout(nslots: usize, in_segment: bool) -> Layout {
        Layout::new(nslots, 4096, 8, 64, 4, in_segment).unwrap()
    }

    #[test]
    fn create_open_share_and_unlink() {
        let name = test_name("seg");
        let a = Seg::create(&name, layout(4, true)).unwrap();
        assert!(Path::new("/dev/shm").join(&name[1..]).exists());
        assert_eq!(
            Seg::create(&name, layout(4, true))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EEXIST)
        );
        let b = Seg::open(&name, layout(4, true)).unwrap();
        a.header().tail.0.store(42, Ordering::Release);
        assert_eq!(b.header().tail.0.load(Ordering::Acquire), 42);
        a.slot(3).seq.store(9, Ordering::Relaxed);
        assert_eq!(b.slot(3).seq.load(Ordering::Relaxed), 9);
        a.reg(7).publish(7, 2, Some(&1));
        assert!(b.reg(7).offer(7).is_some());
        a.revoke(3).handle[0].store(5, Ordering::Relaxed);
        assert_eq!(b.revoke(3).handle[0].load(Ordering::Relaxed), 5);
        let (da, db) = (a.data_addr().unwrap(), b.data_addr().unwrap());
        assert_ne!(da, db, "two mappings of the same bytes");
        assert!(
            Seg::open(&name, layout(64, true)).is_err(),
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
        let no_data = Seg::create(&test_name("nodata"), layout(2, false)).unwrap();
        assert_eq!(no_data.data_addr(), None);
    }

    #[test]
    fn liveness_locks_follow_the_open_descriptions() {
        let name = test_name("locks");
        let rx = Seg::create(&name, layout(2, false)).unwrap();
        assert_eq!(rx.peer_holds(false), Some(false));
        let tx = Seg::open(&name, layout(2, false)).unwrap();
        assert_eq!(rx.peer_holds(false), Some(true));
        assert_eq!(tx.peer_holds(true), Some(true));
        drop(tx);
        assert_eq!(
            rx.peer_holds(false),
            Some(false),
            "closing releases the lock"
        );
        let tx = Seg::open(&name, layout(2, false)).unwrap();
        drop(rx);
        assert_eq!(tx.peer_holds(true), Some(false));
    }

    #[test]
    fn unique_names_carry_the_transport_and_pid() {
        let s = Seg::create_unique("tst", 0xab, layout(2, false), "hint").unwrap();
        let name = s.region().name().to_owned();
        let want = format!("/ferrocx-tst-{}-ab-", std::process::id());
        assert!(name.starts_with(&want), "{name}");
    }
}
