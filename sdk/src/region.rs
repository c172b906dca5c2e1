//! A named POSIX shared-memory object, mapped, with its descriptor kept open
//! for liveness locks: the mapping both same-host transports (shm, p2p) build
//! their connection segments on.
//!
//! **Liveness.** Each end can hold an open-file-description lock
//! (`F_OFD_SETLK`) on one byte of the object ([`Region::lock`]); the kernel
//! drops it when the process exits or closes the object, however it dies, so
//! a free lock ([`Region::lock_held`]) means "that end is gone" — also across
//! pid namespaces and without pid reuse races, which `kill(pid, 0)` cannot
//! promise. Where OFD locks are not supported, callers fall back to pids.
//!
//! The creator reserves the pages with `posix_fallocate`, so a full /dev/shm is
//! an error at setup ([`io::ErrorKind::StorageFull`]) instead of a SIGBUS on
//! first touch.

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

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
        // O_EXCL makes us the only creator.
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC;
        let mut r = Self::shm_open(name, flags, 0o600, true)?;
        // Lock first: a sweeper that finds the name before the lock could take
        // it for the leftover of a dead process.
        let _ = r.lock(lock_byte);
        Self::size(r.fd, len)?;
        r.base = map(r.fd, len)?;
        r.len = len;
        Ok(r)
    }

    /// `shm_open(name, flags, mode)`, as a region that owns the descriptor (and,
    /// if `linked`, the name) but maps nothing yet: dropping it on an error path
    /// closes (and unlinks) what was opened.
    fn shm_open(name: &str, flags: i32, mode: libc::mode_t, linked: bool) -> io::Result<Region> {
        let c = c_name(name)?;
        // SAFETY: valid C string.
        let fd = unsafe { libc::shm_open(c.as_ptr(), flags, mode) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            base: NonNull::dangling(),
            len: 0,
            fd,
            name: name.to_owned(),
            linked,
        })
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
            libc::ENOSPC => Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "/dev/shm has no room for {len} bytes (enlarge it, e.g. docker --shm-size)"
                ),
            )),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Map an existing object. With `len == None` its whole size; otherwise
    /// fails if it is smaller than `len`.
    pub fn open(name: &str, len: Option<usize>) -> io::Result<Region> {
        let mut r = Self::shm_open(name, libc::O_RDWR | libc::O_CLOEXEC, 0, false)?;
        let fd = r.fd;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_process_releases_its_lock() {
        let name = format!("/ferrocx-test-{}-region-killed", std::process::id());
        let region = Region::create(&name, 4096, 0).unwrap();
        let c = c_name(&name).unwrap();
        let fl = lock_struct(libc::F_WRLCK, 1);
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
        assert_eq!(region.lock_held(1), Some(true));
        // SAFETY: our own child; reaped right after.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
        assert_eq!(region.lock_held(1), Some(false));
    }
}
