//! POSIX shared memory: a mapped region ([`Region`]) with liveness locks, and
//! a connection's typed segment ([`Segment`]).
//!
//! **Liveness.** Each end of a connection keeps its descriptor of the segment
//! open and holds an open-file-description lock (`F_OFD_SETLK`) on one byte of
//! it: byte [`RECEIVER_BYTE`] for the receiver (the creator), byte
//! [`SENDER_BYTE`] for the sender. The kernel drops the lock when the process
//! exits or the end closes the segment, however it dies, so a free lock means
//! "that end is gone" — also across pid namespaces and without pid reuse
//! races, which `kill(pid, 0)` cannot promise. Where OFD locks are not
//! supported, the callers fall back to the peer's pid.
//!
//! The creator reserves the pages with `posix_fallocate`, so a full /dev/shm
//! is an error at setup instead of a SIGBUS on first touch. Shared words are
//! reached through atomics only.

use crate::layout::{Layout, SegHeader, SlotHeader};
use crate::regslot::{slot_index, RegSlot};
use crate::revoke::RevokeEntry;
use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

/// Lock byte held by a region's creator (a connection's receiver).
pub const RECEIVER_BYTE: i64 = 0;
/// Lock byte held by a connection's sender.
pub const SENDER_BYTE: i64 = 1;

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment name holds a NUL"))
}

/// Remove `name` from /dev/shm (existing mappings stay valid).
pub fn unlink_name(name: &str) -> io::Result<()> {
    let c = c_name(name)?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::shm_unlink(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn lock_struct(kind: i32, byte: i64) -> libc::flock {
    // SAFETY: `flock` is plain data; all-zero is a valid value (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = byte as _;
    fl.l_len = 1;
    fl
}

/// A mapped shared-memory object with its descriptor kept open.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    fd: i32,
    name: String,
    linked: bool,
}

// SAFETY: the mapping and descriptor are process-wide resources, not tied to a
// thread; all shared contents are accessed through atomics or raw copies whose
// ownership a protocol decides.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` gives only atomic or raw-pointer access.
unsafe impl Sync for Region {}

impl Region {
    /// Create `name` exclusively (EEXIST if taken), lock byte `lock_byte`, size,
    /// reserve and map `len` bytes (zero-filled). The region owns its name
    /// until [`unlink`](Self::unlink).
    pub fn create(name: &str, len: usize, lock_byte: i64) -> io::Result<Region> {
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
        let mut r = Region {
            base: NonNull::dangling(),
            len: 0,
            fd,
            name: name.to_owned(),
            linked: true,
        };
        // Lock first: a sweeper that finds the name before the lock could take
        // it for the leftover of a dead process.
        let _ = r.lock(lock_byte);
        Self::size(fd, len)?;
        r.base = map(fd, len)?;
        r.len = len;
        Ok(r)
    }

    fn size(fd: i32, len: usize) -> io::Result<()> {
        let l = len as libc::off_t;
        // SAFETY: fd is an open shared-memory object we own.
        if unsafe { libc::ftruncate(fd, l) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above; posix_fallocate returns the error number instead of setting errno.
        match unsafe { libc::posix_fallocate(fd, 0, l) } {
            0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
            libc::ENOSPC => Err(io::Error::other(format!(
                "/dev/shm has no room for {len} bytes (enlarge it, e.g. docker --shm-size)"
            ))),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Map an existing object. With `len == None` its whole size; otherwise
    /// fails if it is smaller than `len`.
    pub fn open(name: &str, len: Option<usize>) -> io::Result<Region> {
        let c = c_name(name)?;
        // SAFETY: valid C string.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut r = Region {
            base: NonNull::dangling(),
            len: 0,
            fd,
            name: name.to_owned(),
            linked: false,
        };
        // SAFETY: zeroed `stat` is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is a valid out-pointer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let size = st.st_size.max(0) as usize;
        let want = len.unwrap_or(size);
        if size < want || want == 0 {
            // Mapping past the end would SIGBUS on access.
            return Err(io::Error::other(format!(
                "segment {name} holds {size} bytes, expected {want}"
            )));
        }
        r.base = map(fd, want)?;
        r.len = want;
        Ok(r)
    }

    /// The name in /dev/shm.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Mapped bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
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

    /// Hold the liveness lock on `byte` until this region is dropped.
    pub fn lock(&self, byte: i64) -> io::Result<()> {
        let fl = lock_struct(libc::F_WRLCK, byte);
        // SAFETY: fd is open; `fl` is a valid flock for the call.
        if unsafe { libc::fcntl(self.fd, libc::F_OFD_SETLK, &fl) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether another open of this object holds the lock on `byte`:
    /// `Some(false)` means its holder closed the object or exited; `None`
    /// when the system cannot tell (no OFD locks).
    pub fn lock_held(&self, byte: i64) -> Option<bool> {
        let mut fl = lock_struct(libc::F_WRLCK, byte);
        // SAFETY: fd is open; `fl` is a valid in/out flock.
        if unsafe { libc::fcntl(self.fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
            return None;
        }
        Some(fl.l_type as i32 != libc::F_UNLCK)
    }
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

impl Drop for Region {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: base/len are exactly the mapping made in create/open, unmapped
            // only here; no reference into it outlives `self`.
            unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len) };
        }
        // SAFETY: fd was opened by create/open and is closed only here (this also
        // releases our liveness lock).
        unsafe { libc::close(self.fd) };
        let _ = self.unlink();
    }
}

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

    #[test]
    fn a_killed_process_releases_its_lock() {
        let name = test_name("killed");
        let region = Region::create(&name, 4096, RECEIVER_BYTE).unwrap();
        let c = c_name(&name).unwrap();
        let fl = lock_struct(libc::F_WRLCK, SENDER_BYTE);
        let mut pipe = [0i32; 2];
        // SAFETY: valid out array of two descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: the child only makes async-signal-safe system calls on data
        // prepared before the fork, then waits to be killed.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: as above (child side).
            unsafe {
                let fd = libc::shm_open(c.as_ptr(), libc::O_RDWR, 0);
                let ok = fd >= 0 && libc::fcntl(fd, libc::F_OFD_SETLK, &fl) == 0;
                libc::write(pipe[1], [ok as u8].as_ptr() as *const libc::c_void, 1);
                loop {
                    libc::pause();
                }
            }
        }
        let mut byte = [0u8; 1];
        // SAFETY: reading one byte into a valid buffer from our pipe end.
        let n = unsafe { libc::read(pipe[0], byte.as_mut_ptr() as *mut libc::c_void, 1) };
        assert_eq!((n, byte[0]), (1, 1), "child could not lock");
        assert_eq!(region.lock_held(SENDER_BYTE), Some(true));
        // SAFETY: our own child; reaped right after.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
        assert_eq!(region.lock_held(SENDER_BYTE), Some(false));
    }
}
