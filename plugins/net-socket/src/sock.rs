//! The few socket calls std does not offer: non-blocking connect, and
//! non-blocking send/receive on raw buffers without SIGPIPE.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;

/// Start a non-blocking connect to `addr`: the stream is connected once
/// `peer_addr()` succeeds (`take_error()` tells a failure).
pub fn start_connect(addr: &SocketAddr) -> io::Result<TcpStream> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let rc = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sin` is a valid sockaddr_in of the given length, living across the call.
            unsafe {
                libc::connect(
                    fd,
                    &sin as *const libc::sockaddr_in as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: `sin6` is a valid sockaddr_in6 of the given length, living across the call.
            unsafe {
                libc::connect(
                    fd,
                    &sin6 as *const libc::sockaddr_in6 as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        }
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(TcpStream::from(owned))
}

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
