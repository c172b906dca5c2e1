//! One connection's POSIX shared-memory segment: create/open, map, typed
//! access to its parts, unlink, unmap.
//!
//! The creator reserves the pages with `posix_fallocate` so a full /dev/shm is
//! an error at setup instead of a SIGBUS on first touch. Everything shared is
//! reached through atomics ([`SegHeader`], [`RegSlot`], [`SlotHeader`]) or
//! copied in and out of ring slots with [`Segment::write_slot`] /
//! [`Segment::read_slot`]; no Rust reference into the payload ever exists, so
//! the other process writing it cannot alias one.

use crate::layout::{Layout, SegHeader, SlotHeader};
use crate::regslot::{slot_index, RegSlot};
use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

/// A mapped segment. Unmapped on drop, and unlinked then if this side still owns the name.
#[derive(Debug)]
pub struct Segment {
    base: NonNull<u8>,
    layout: Layout,
    name: String,
    linked: bool,
}

// SAFETY: the mapping is process-wide memory, not tied to a thread; all shared
// parts are accessed through atomics or through copies under the ring protocol.
unsafe impl Send for Segment {}

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment name holds a NUL"))
}

/// Remove `name` from /dev/shm (the mapping of anyone who has it stays valid).
pub fn unlink_name(name: &str) -> io::Result<()> {
    let c = c_name(name)?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::shm_unlink(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Close `fd`, ignoring errors (nothing useful to do about them).
fn close(fd: i32) {
    // SAFETY: `fd` is a descriptor this module opened and has not closed.
    unsafe { libc::close(fd) };
}

/// Map `len` bytes of `fd` shared and read-write.
fn map(fd: i32, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap returned null"))
}

impl Segment {
    /// Create `name` exclusively (EEXIST if taken), size and reserve it, map it.
    /// The new segment is zero-filled and owns its name until [`unlink`](Self::unlink).
    pub fn create(name: &str, layout: Layout) -> io::Result<Segment> {
        let c = c_name(name)?;
        // SAFETY: valid C string; O_EXCL makes us the only creator.
        let fd = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let result = Self::size_and_map(fd, layout);
        close(fd);
        match result {
            Ok(base) => Ok(Segment {
                base,
                layout,
                name: name.to_owned(),
                linked: true,
            }),
            Err(e) => {
                let _ = unlink_name(name);
                Err(e)
            }
        }
    }

    fn size_and_map(fd: i32, layout: Layout) -> io::Result<NonNull<u8>> {
        let len = layout.total as libc::off_t;
        // SAFETY: fd is an open shared-memory object we own.
        if unsafe { libc::ftruncate(fd, len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above; posix_fallocate returns the error number instead of setting errno.
        let rc = unsafe { libc::posix_fallocate(fd, 0, len) };
        match rc {
            0 => {}
            // Some file systems cannot reserve; the mapping still works.
            libc::EOPNOTSUPP | libc::EINVAL => {}
            libc::ENOSPC => {
                return Err(io::Error::other(format!(
                "/dev/shm has no room for {} bytes (enlarge it, e.g. docker --shm-size, or lower \
                     FERROCX_SHM_NSLOTS / FERROCX_SHM_CHUNK_SIZE)",
                layout.total
            )))
            }
            e => return Err(io::Error::from_raw_os_error(e)),
        }
        map(fd, layout.total)
    }

    /// Map an existing segment made by the peer; fails if it is smaller than `layout`.
    pub fn open(name: &str, layout: Layout) -> io::Result<Segment> {
        let c = c_name(name)?;
        // SAFETY: valid C string.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: zeroed `stat` is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is a valid out-pointer.
        let rc = unsafe { libc::fstat(fd, &mut st) };
        let result = if rc != 0 {
            Err(io::Error::last_os_error())
        } else if (st.st_size as u64) < layout.total as u64 {
            // Mapping past the end would SIGBUS on access.
            Err(io::Error::other(format!(
                "segment {name} holds {} bytes, the peer announced {}",
                st.st_size, layout.total
            )))
        } else {
            map(fd, layout.total)
        };
        close(fd);
        Ok(Segment {
            base: result?,
            layout,
            name: name.to_owned(),
            linked: false,
        })
    }

    /// The segment's name in /dev/shm.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Remove the name now; the mapping stays. Safe to repeat; ENOENT (the
    /// peer unlinked first) is not an error.
    pub fn unlink(&mut self) -> io::Result<()> {
        if !self.linked {
            return Ok(());
        }
        self.linked = false;
        match unlink_name(&self.name) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
            _ => Ok(()),
        }
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
        unsafe { &*(self.base.as_ptr() as *const SegHeader) }
    }

    /// The handshake slot of message `seq`.
    pub fn reg(&self, seq: u64) -> &RegSlot {
        let i = slot_index(seq, self.layout.nreg);
        let off = self.layout.reg_off + i * std::mem::size_of::<RegSlot>();
        // SAFETY: `i < nreg`, so the slot lies inside the RegSlot array, which
        // Layout places at a 128-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.base.as_ptr().add(off) as *const RegSlot) }
    }

    /// Header of ring slot `i` (`i < nslots`).
    pub fn slot_header(&self, i: usize) -> &SlotHeader {
        assert!(i < self.layout.nslots, "ring slot {i} out of range");
        let off = self.layout.slots_off + i * std::mem::size_of::<SlotHeader>();
        // SAFETY: bounds checked above; 64-aligned offset inside the mapping; atomics only.
        unsafe { &*(self.base.as_ptr().add(off) as *const SlotHeader) }
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
                self.base.as_ptr().add(self.layout.slot_data_off(i)),
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
                self.base.as_ptr().add(self.layout.slot_data_off(i)),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly the mapping made in create/open, unmapped only here;
        // no reference into it outlives `self` (accessors borrow `self`).
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.layout.total) };
        let _ = self.unlink();
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
        a.reg(7).publish(7, 1, 2);
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
