//! Cross-memory attach: write straight into another process with `process_vm_writev`.

use std::io;

/// Largest piece handed to one `process_vm_writev` call.
pub const PIECE: usize = 4 << 20;

/// Why a direct write did not complete.
#[derive(Debug)]
pub enum CmaError {
    /// The kernel refuses cross-process writes here (EPERM, EACCES, ENOSYS:
    /// ptrace policy, seccomp, old kernel) and nothing was written: use the ring.
    Unsupported(io::Error),
    /// Any other failure (peer gone, bad address, or a refusal after some bytes landed).
    Failed(io::Error),
}

/// Signature of the copy back end (swappable in tests).
pub type CopyFn = fn(pid: i32, src: &[u8], remote: u64) -> Result<(), CmaError>;

/// Write all of `src` to address `remote` in process `pid`, in pieces of at
/// most [`PIECE`] bytes, looping on partial writes.
///
/// This touches no memory of the calling process except reading `src`: the
/// destination belongs to the receiver, which vouched for it by registering
/// the buffer and publishing it for this message (see `regslot`).
pub fn write_remote(pid: i32, src: &[u8], remote: u64) -> Result<(), CmaError> {
    let mut done = 0usize;
    while done < src.len() {
        let n = (src.len() - done).min(PIECE);
        let local = libc::iovec {
            iov_base: src[done..].as_ptr() as *mut libc::c_void,
            iov_len: n,
        };
        let target = libc::iovec {
            iov_base: (remote + done as u64) as usize as *mut libc::c_void,
            iov_len: n,
        };
        // SAFETY: `local` describes n readable bytes of `src`; the kernel checks
        // the remote range against the target's address space and never writes
        // our memory (`local` is only read).
        let rc = unsafe { libc::process_vm_writev(pid, &local, 1, &target, 1, 0) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            let refused = matches!(
                err.raw_os_error(),
                Some(libc::EPERM | libc::EACCES | libc::ENOSYS)
            );
            return Err(if refused && done == 0 {
                CmaError::Unsupported(err)
            } else {
                CmaError::Failed(err)
            });
        }
        if rc == 0 {
            // No progress on a non-empty request: the remote range ends early.
            return Err(CmaError::Failed(io::Error::from_raw_os_error(libc::EFAULT)));
        }
        done += rc as usize;
    }
    Ok(())
}

/// Read 8 bytes at address `remote` of process `pid` (the identity probe).
pub fn read_u64(pid: i32, remote: u64) -> Result<u64, CmaError> {
    let mut out = [0u8; 8];
    let local = libc::iovec {
        iov_base: out.as_mut_ptr() as *mut libc::c_void,
        iov_len: 8,
    };
    let target = libc::iovec {
        iov_base: remote as usize as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: `local` describes the 8 writable bytes of `out`; the remote side is
    // only read, with the kernel checking the range against the target's mappings.
    let rc = unsafe { libc::process_vm_readv(pid, &local, 1, &target, 1, 0) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        let refused = matches!(
            err.raw_os_error(),
            Some(libc::EPERM | libc::EACCES | libc::ENOSYS)
        );
        return Err(if refused {
            CmaError::Unsupported(err)
        } else {
            CmaError::Failed(err)
        });
    }
    if rc != 8 {
        return Err(CmaError::Failed(io::Error::from_raw_os_error(libc::EFAULT)));
    }
    Ok(u64::from_ne_bytes(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_word_of_own_process() {
        let token = Box::new(0x0123_4567_89ab_cdefu64);
        let addr = &*token as *const u64 as u64;
        assert_eq!(read_u64(std::process::id() as i32, addr).unwrap(), *token);
        assert!(read_u64(std::process::id() as i32, 16).is_err());
    }

    #[test]
    fn writes_into_own_process_in_pieces() {
        let src: Vec<u8> = (0..(PIECE * 2 + 5)).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        write_remote(std::process::id() as i32, &src, dst.as_mut_ptr() as u64).unwrap();
        assert!(src == dst);
        write_remote(std::process::id() as i32, &[], 0).unwrap();
    }

    #[test]
    fn bad_address_fails() {
        let err = write_remote(std::process::id() as i32, &[1, 2, 3], 8).unwrap_err();
        assert!(matches!(err, CmaError::Failed(_)), "{err:?}");
    }
}
