//! What std does not offer the transports that open sockets (net-socket's
//! rails, ibgda's TCP carrier): a non-blocking connect — a thread that dials
//! must not wait on the network (a host that is gone would hold it for the
//! whole connect timeout) — and `TCP_USER_TIMEOUT`, which turns a link that
//! went silent into an error.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

/// The `TCP_USER_TIMEOUT` of `s` (zero: the kernel's default, none).
pub fn user_timeout(s: &TcpStream) -> io::Result<std::time::Duration> {
    let mut v: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and describe a c_int.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            &mut v as *mut i32 as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(std::time::Duration::from_millis(v.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    /// A loopback connect finishes, and the timeout set is the one read back.
    #[test]
    fn a_nonblocking_connect_completes_and_keeps_its_user_timeout() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = start_connect(&l.local_addr().unwrap(), None).unwrap();
        let (_peer, _) = l.accept().unwrap();
        let t0 = std::time::Instant::now();
        while !connected(&s).unwrap() {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "loopback connect hangs"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        set_user_timeout(&s, Duration::from_millis(2500)).unwrap();
        assert_eq!(user_timeout(&s).unwrap(), Duration::from_millis(2500));
        // A refused connect is an error, not "not yet".
        let gone = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        let s = start_connect(&addr, None).unwrap();
        let t0 = std::time::Instant::now();
        loop {
            match connected(&s) {
                Err(_) => break,
                Ok(true) => panic!("connected to a closed port"),
                Ok(false) => {
                    assert!(t0.elapsed() < Duration::from_secs(5), "refusal never seen");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}
