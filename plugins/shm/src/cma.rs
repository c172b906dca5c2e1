//! Cross-memory attach: write straight into another process with
//! `process_vm_writev`, read a word of it with `process_vm_readv` (the
//! identity probe), and shm's direct-write path built on them ([`CmaWriter`]).

use ferrocx_sdk::copy::HostCopy;
use ferrocx_sdk::proc::Peer;
use ferrocx_sdk::same_host::{WriteError, Writer};
use ferrocx_sdk::PluginError;
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

/// Signature of the cross-process write (swappable in tests).
///
/// # Safety
/// `src..src+len` must be readable memory of this process for the call.
pub type CopyFn = unsafe fn(pid: i32, src: u64, len: usize, remote: u64) -> Result<(), CmaError>;

/// Write `len` bytes at `src` to address `remote` in process `pid`, in pieces
/// of at most [`PIECE`] bytes, looping on partial writes.
///
/// This touches no memory of the calling process except reading `src`: the
/// destination belongs to the receiver, which vouched for it by publishing
/// it for this message (the `P2pRegInfo` handshake).
///
/// # Safety
/// `src..src+len` must be readable memory of this process for the call.
pub unsafe fn write_remote(pid: i32, src: u64, len: usize, remote: u64) -> Result<(), CmaError> {
    let mut done = 0usize;
    while done < len {
        let n = (len - done).min(PIECE);
        let local = libc::iovec {
            iov_base: (src as usize + done) as *mut libc::c_void,
            iov_len: n,
        };
        let target = libc::iovec {
            iov_base: (remote + done as u64) as usize as *mut libc::c_void,
            iov_len: n,
        };
        // SAFETY: `local` describes n readable bytes of `src` (this fn's
        // contract); the kernel checks the remote range against the target's
        // address space and never writes our memory (`local` is only read).
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

/// shm's direct-write path on one sending connection: `process_vm_writev`
/// into the receiver, after proving once that its pid is really the receiver.
pub struct CmaWriter {
    /// The receiver.
    pub peer: Peer,
    /// Where the receiver's identity token lies in its process, and its value.
    pub probe: (u64, u64),
    /// Whether `peer.pid` proved to be the receiver (checked before the first write).
    pub verified: Option<bool>,
    /// The write itself ([`write_remote`]; tests swap in a refusing kernel).
    pub copier: CopyFn,
}

impl CmaWriter {
    /// Before writing into process `peer.pid` for the first time, read back the
    /// token the receiver left in its memory: a pid that does not hold it (a
    /// namesake in another pid namespace, a recycled pid) is never written to.
    fn verify(&mut self) -> Result<(), String> {
        if let Some(ok) = self.verified {
            return if ok {
                Ok(())
            } else {
                Err("the receiver's identity was not proven".into())
            };
        }
        let (addr, want) = self.probe;
        let problem = match read_u64(self.peer.pid, addr) {
            Ok(v) if v == want && addr != 0 => None,
            Ok(_) => Some(
                "the process does not hold the receiver's token (separate pid namespaces?)"
                    .to_string(),
            ),
            Err(CmaError::Unsupported(e) | CmaError::Failed(e)) => {
                Some(format!("process_vm_readv refused: {e}"))
            }
        };
        self.verified = Some(problem.is_none());
        problem.map_or(Ok(()), Err)
    }
}

impl Writer for CmaWriter {
    type Target = u64;
    type Engine = HostCopy;
    type Dest = u64;
    /// A write holds the progress thread: at most this much per round.
    const BUDGET: usize = 16 << 20;

    fn open(&mut self, t: &u64) -> Result<u64, String> {
        self.verify()?;
        Ok(*t)
    }

    unsafe fn write(
        &mut self,
        _engine: &mut HostCopy,
        dest: &u64,
        off: u64,
        src: u64,
        n: usize,
    ) -> Result<(), WriteError> {
        // SAFETY: the caller's contract: `src..src+n` is readable for the call.
        match unsafe { (self.copier)(self.peer.pid, src, n, dest + off) } {
            Ok(()) => Ok(()),
            Err(CmaError::Unsupported(e)) => Err(WriteError::Refused(format!(
                "process_vm_writev refused: {e}"
            ))),
            Err(CmaError::Failed(e)) => Err(WriteError::Failed(self.failure(&e))),
        }
    }
}

impl CmaWriter {
    fn failure(&self, e: &io::Error) -> PluginError {
        let Peer { rank, pid } = self.peer;
        if e.raw_os_error() == Some(libc::ESRCH) {
            return PluginError::remote(format!(
                "peer rank {rank} (pid {pid}) exited during the direct copy"
            ));
        }
        PluginError::system(format!(
            "process_vm_writev into rank {rank} (pid {pid}) failed: {e}"
        ))
    }
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

    fn write(src: &[u8], remote: u64) -> Result<(), CmaError> {
        // SAFETY: `src` is a live slice for the call.
        unsafe {
            write_remote(
                std::process::id() as i32,
                src.as_ptr() as u64,
                src.len(),
                remote,
            )
        }
    }

    #[test]
    fn writes_into_own_process_in_pieces() {
        let src: Vec<u8> = (0..(PIECE * 2 + 5)).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        write(&src, dst.as_mut_ptr() as u64).unwrap();
        assert!(src == dst);
        write(&[], 0).unwrap();
    }

    #[test]
    fn bad_address_fails() {
        let err = write(&[1, 2, 3], 8).unwrap_err();
        assert!(matches!(err, CmaError::Failed(_)), "{err:?}");
    }
}
