//! The few socket calls std does not offer: non-blocking connect, and
//! non-blocking send/receive on raw buffers without SIGPIPE.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;

/// `addr` as the C socket address it is, and its length.
fn raw_addr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) address.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { std::ptr::write(&mut st as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
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
            // SAFETY: as above.
            unsafe { std::ptr::write(&mut st as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (st, len as libc::socklen_t)
}

/// Start a non-blocking connect to `addr`, from the local address `from` when given
/// (port 0: any), so the connection leaves through that rail's interface. The stream
/// is connected once `peer_addr()` succeeds (`take_error()` tells a failure).
pub fn start_connect(addr: &SocketAddr, from: Option<&SocketAddr>) -> io::Result<TcpStream> {
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
    if let Some(from) = from {
        let (st, len) = raw_addr(from);
        // SAFETY: `st` holds a valid socket address of `len` bytes, alive across the call.
        if unsafe { libc::bind(fd, &st as *const _ as *const libc::sockaddr, len) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let (st, len) = raw_addr(addr);
    // SAFETY: as above.
    let rc = unsafe { libc::connect(fd, &st as *const _ as *const libc::sockaddr, len) };
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

fn set_int_opt(s: &TcpStream, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int of the length passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            &value as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `TCP_USER_TIMEOUT`: data unacknowledged by the peer's kernel this long fails the
/// socket with `ETIMEDOUT` (the kernel acknowledges whether or not the peer's process
/// reads, so a busy peer does not trip it; a dead link does).
pub fn set_user_timeout(s: &TcpStream, t: std::time::Duration) -> io::Result<()> {
    let ms = t.as_millis().clamp(1, i32::MAX as u128) as i32;
    set_int_opt(s, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)
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
