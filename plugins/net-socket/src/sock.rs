//! The few socket calls std does not offer: non-blocking send/receive on raw
//! buffers without SIGPIPE (the non-blocking connect is the SDK's `tcp`).

pub use ferrocx_sdk::tcp::{set_user_timeout, start_connect};
use std::io;
use std::net::TcpStream;
use std::os::unix::io::AsRawFd;

/// Outcome of one non-blocking transfer call.
pub enum Io {
    /// Moved this many bytes (0 on receive: end of stream).
    Moved(usize),
    /// Nothing now (EAGAIN).
    Again,
}

/// Send `a` then `b` with one `sendmsg`, never blocking, never raising SIGPIPE.
///
/// # Safety
/// `a` and `b` must be readable for their lengths.
pub unsafe fn send2(s: &TcpStream, a: (*const u8, usize), b: (*const u8, usize)) -> io::Result<Io> {
    let mut iov = [
        libc::iovec {
            iov_base: a.0 as *mut libc::c_void,
            iov_len: a.1,
        },
        libc::iovec {
            iov_base: b.0 as *mut libc::c_void,
            iov_len: b.1,
        },
    ];
    let n_iov = if b.1 == 0 { 1 } else { 2 };
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n_iov as _;
    loop {
        // SAFETY: the iovecs point at caller-guaranteed readable memory; `msg` lives across the call.
        let n =
            unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(Io::Moved(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(Io::Again),
            _ => return Err(e),
        }
    }
}

/// Receive at most `len` bytes into `buf`, never blocking.
///
/// # Safety
/// `buf..buf+len` must be writable and not aliased for the call.
pub unsafe fn recv(s: &TcpStream, buf: *mut u8, len: usize) -> io::Result<Io> {
    loop {
        // SAFETY: caller-guaranteed writable buffer of `len` bytes.
        let n = unsafe {
            libc::recv(
                s.as_raw_fd(),
                buf as *mut libc::c_void,
                len,
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(Io::Moved(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(Io::Again),
            _ => return Err(e),
        }
    }
}

/// Close `s` with a reset: whatever it still had to send is dropped, so a rail taken
/// out of service never delivers stale bytes later.
pub fn abort(s: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` is a live struct of the length passed; failure only means a
    // graceful close instead of a reset, which the receiver tolerates.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}
