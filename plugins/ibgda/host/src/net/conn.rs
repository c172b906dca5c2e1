//! One path to one peer: a non-blocking TCP connection with the bytes not yet
//! written and a [`Decoder`] for what arrives, plus the blocking steps of
//! setting it up (listen, dial with the hello, accept and check the hello),
//! each bounded by a deadline.
//!
//! A connection that fails (reset, end of stream, bytes that are not
//! messages) stays broken: the carrier replaces it with a new one (`relink`),
//! never revives it, so nothing of the old stream (bytes half written, a
//! message half decoded) can reach the new one.

use super::wire::{self, Decoder, Hello, Msg, HEADER_BYTES};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Unsent bytes kept before the front is compacted away.
const COMPACT_AT: usize = 1 << 20;

/// A connected path.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    /// Encoded messages; `out[sent..]` is not written yet.
    out: Vec<u8>,
    sent: usize,
    dec: Decoder,
    broken: Option<String>,
    /// Requests queued on this connection (tests tell which one carried
    /// the traffic).
    requests: u64,
}

/// A connection whose data goes unacknowledged this long breaks
/// (`TCP_USER_TIMEOUT`): a link that went silent without closing is then
/// redialed like any broken one. The health machine has failed the path
/// over long before (its timeout: 1 s by default); this only decides when
/// the connection itself is given up.
pub const SILENT_LINK: Duration = Duration::from_secs(10);

impl Conn {
    /// Wraps a connected stream (made non-blocking, without Nagle's delay:
    /// acknowledgements are small and latency-bound; silent for
    /// [`SILENT_LINK`] with data outstanding, it fails).
    pub fn new(stream: TcpStream, max_payload: u32) -> std::io::Result<Conn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        ferrocx_sdk::tcp::set_user_timeout(&stream, SILENT_LINK)?;
        Ok(Conn {
            stream,
            out: Vec::new(),
            sent: 0,
            dec: Decoder::new(max_payload),
            broken: None,
            requests: 0,
        })
    }

    /// Refuses puts longer than `max_payload` bytes from now on
    /// ([`Decoder::set_max_payload`]).
    pub fn set_max_payload(&mut self, max_payload: u32) {
        self.dec.set_max_payload(max_payload);
    }

    /// Why the connection is unusable, if it is.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Marks it unusable (and shuts the socket, so the peer notices too).
    pub fn fail(&mut self, why: String) {
        if self.broken.is_none() {
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
            self.broken = Some(why);
        }
    }

    /// Queues `m` for sending (written by [`flush`](Self::flush)).
    pub fn send(&mut self, m: &Msg) {
        if self.broken.is_none() {
            wire::encode(m, &mut self.out);
            self.requests += u64::from(matches!(m, Msg::Request(_)));
        }
    }

    /// Requests queued on this connection so far.
    #[cfg(test)]
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Shuts the socket down under the connection without marking it
    /// broken: both ends find out as from a reset (the tests' broken link).
    #[cfg(test)]
    pub fn sever(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Bytes queued and not yet written.
    pub fn backlog(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Writes what the socket takes now; the bytes written.
    pub fn flush(&mut self) -> usize {
        let mut n = 0;
        while self.broken.is_none() && self.sent < self.out.len() {
            // std writes sockets with MSG_NOSIGNAL: a peer gone is an error,
            // never SIGPIPE.
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => self.fail("the connection wrote 0 bytes".into()),
                Ok(k) => {
                    self.sent += k;
                    n += k;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => self.fail(format!("send failed: {e}")),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent >= COMPACT_AT {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        n
    }

    /// Reads what arrived into `msgs`; the bytes read. An end of stream, an
    /// error or bytes that are not messages break the connection.
    pub fn receive(&mut self, buf: &mut [u8], msgs: &mut Vec<Msg>) -> usize {
        let mut n = 0;
        while self.broken.is_none() {
            match self.stream.read(buf) {
                Ok(0) => {
                    let mid = if self.dec.partial() {
                        " in the middle of a message"
                    } else {
                        ""
                    };
                    self.fail(format!("the peer closed the connection{mid}"))
                }
                Ok(k) => {
                    n += k;
                    self.dec.feed(&buf[..k]);
                    loop {
                        match self.dec.next() {
                            Ok(Some(m)) => msgs.push(m),
                            Ok(None) => break,
                            Err(e) => {
                                self.fail(format!("received bytes that are not a message: {e}"));
                                break;
                            }
                        }
                    }
                    if k < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => self.fail(format!("receive failed: {e}")),
            }
        }
        n
    }
}

/// A listener on `local` (port 0: the kernel picks) and the address it got.
pub fn listen(local: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(local)?;
    let at = l.local_addr()?;
    l.set_nonblocking(true)?;
    Ok((l, at))
}

fn left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// Connects to `to` and writes `hello`, both by `deadline`.
pub fn dial(to: SocketAddr, hello: Hello, deadline: Instant) -> Result<TcpStream, String> {
    let t = left(deadline).ok_or("no time left")?;
    let s = TcpStream::connect_timeout(&to, t).map_err(|e| format!("connect to {to}: {e}"))?;
    let mut b = Vec::with_capacity(HEADER_BYTES);
    wire::encode(&Msg::Hello(hello), &mut b);
    let t = left(deadline).ok_or("no time left")?;
    s.set_write_timeout(Some(t))
        .and_then(|_| (&s).write_all(&b))
        .map_err(|e| format!("hello to {to}: {e}"))?;
    Ok(s)
}

/// Accepts connections on `l` until every rank in `expect` has one (or
/// `deadline` passes: an error naming the ranks missing). Each connection's
/// hello must carry `token` and `path`; one from a rank not expected, or a
/// second from one, is an error.
pub fn accept(
    l: &TcpListener,
    token: u64,
    path: u8,
    deadline: Instant,
    expect: &mut BTreeMap<u32, Option<TcpStream>>,
) -> Result<(), String> {
    let missing = |e: &BTreeMap<u32, Option<TcpStream>>| -> Vec<u32> {
        e.iter()
            .filter(|(_, s)| s.is_none())
            .map(|(r, _)| *r)
            .collect()
    };
    loop {
        let m = missing(expect);
        if m.is_empty() {
            return Ok(());
        }
        let (s, from) = match l.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if left(deadline).is_none() {
                    return Err(format!(
                        "no connection on path {path} from rank(s) {m:?} by the deadline"
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(format!("accept on path {path}: {e}")),
        };
        // A peer writes its hello right after connecting; a silent stray
        // connection holds the accept loop up for 5 s at most.
        let t = left(deadline)
            .ok_or_else(|| format!("no hello on path {path} from rank(s) {m:?} by the deadline"))?
            .min(Duration::from_secs(5));
        s.set_nonblocking(false)
            .and_then(|_| s.set_read_timeout(Some(t)))
            .map_err(|e| format!("socket from {from}: {e}"))?;
        let mut b = [0u8; HEADER_BYTES];
        // A stray connection (a port scan, another job's process) that sends
        // no hello is not ours to fail on.
        if (&s).read_exact(&mut b).is_err() {
            continue;
        }
        let mut d = Decoder::new(0);
        d.feed(&b);
        match d.next() {
            Ok(Some(Msg::Hello(h))) if h.token == token && h.path == path => {
                match expect.get_mut(&h.rank) {
                    Some(slot @ None) => *slot = Some(s),
                    _ => {
                        return Err(format!(
                            "rank {} connected on path {path} but was not expected (or twice)",
                            h.rank
                        ))
                    }
                }
            }
            // Another communicator's or another program's connection.
            _ => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection the carrier makes (setup's, a reconnect's) breaks
    /// when its link goes silent, rather than waiting forever.
    #[test]
    fn a_connection_gives_up_a_silent_link() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let c = Conn::new(s, 0).unwrap();
        assert_eq!(
            ferrocx_sdk::tcp::user_timeout(&c.stream).unwrap(),
            SILENT_LINK
        );
    }
}
