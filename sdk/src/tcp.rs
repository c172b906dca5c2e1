//! The non-blocking connect std does not offer, for the transports that
//! open sockets (net-socket's rails, ibgda's TCP carrier): a thread that
//! dials must not wait on the network (a host that is gone would hold it for
//! the whole connect timeout).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};

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
/// is connected once [`connected`] says so.
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

/// Whether a connect begun by [`start_connect`] finished (`Ok(false)`: not yet), or
/// why it failed.
pub fn connected(s: &TcpStream) -> io::Result<bool> {
    // SO_ERROR first: a refused or unreachable connect leaves the stream
    // unconnected too, and only the error tells it from one in progress.
    if let Some(e) = s.take_error()? {
        return Err(e);
    }
    match s.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}
