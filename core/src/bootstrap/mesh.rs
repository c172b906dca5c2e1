//! The full mesh of peer connections and the reader thread behind each.
//!
//! Each rank connects to every higher rank's listener and accepts one connection from every
//! lower rank (concurrently, so no rank waits for a chain of others). A connection opens
//! with a [`PeerHello`] carrying the communicator nonce, answered by a `PeerAck` (with a
//! job secret, only after the challenge-response of `auth.rs`); anything else on a
//! listener is dropped with a warning. Afterwards one reader thread per
//! connection does blocking reads (it parks in the kernel while idle) and hands frames to
//! the [`Mailbox`].

use super::auth::{self, JobSecret, Link};
use super::mailbox::Mailbox;
use super::net::{
    accept_auth, accept_until, configure, connect_auth, connect_retry, read_frame_by, AuthHello,
};
use super::root::{describe, list};
use super::wire::{self, Kind, PeerHello, WireError, MAX_HELLO, MAX_PAYLOAD};
use super::RankInfo;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::io::BufReader;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// How long an accepted connection may take to identify itself (see root.rs `HELLO_WAIT`).
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// Reader threads only read, queue and run the event hook: a smaller stack than the 2 MiB
/// default keeps thousands of them cheap in address space.
const READER_STACK: usize = 512 << 10;
const READ_BUFFER: usize = 64 << 10;

/// The sending side of one peer connection.
pub(crate) struct Conn {
    /// `None` once a write failed midway: the stream is then out of frame sync.
    writer: Mutex<Option<TcpStream>>,
    /// Clone used to shut the socket down without taking the writer lock.
    ctl: TcpStream,
    timeout: Duration,
}

impl Conn {
    pub fn new(stream: TcpStream, timeout: Duration) -> std::io::Result<Conn> {
        Ok(Conn {
            ctl: stream.try_clone()?,
            writer: Mutex::new(Some(stream)),
            timeout,
        })
    }

    /// Send one frame, waiting for the writer lock and the socket as long as the timeout.
    pub fn send(&self, kind: Kind, tag: u64, payload: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock();
        Self::write_locked(&mut w, kind, tag, payload)
    }

    /// Send one frame only if that is quick (abort, goodbye, status: best effort, never
    /// stuck behind a wedged peer).
    pub fn send_quick(
        &self,
        kind: Kind,
        tag: u64,
        payload: &[u8],
        within: Duration,
    ) -> std::io::Result<()> {
        let mut w = self.writer.try_lock_for(within).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "another send holds the connection",
            )
        })?;
        let Some(s) = w.as_ref() else {
            return Err(broken());
        };
        s.set_write_timeout(Some(within.max(Duration::from_millis(1))))?;
        let r = Self::write_locked(&mut w, kind, tag, payload);
        if let Some(s) = w.as_ref() {
            let _ = s.set_write_timeout(Some(self.timeout.max(Duration::from_millis(1))));
        }
        r
    }

    fn write_locked(
        w: &mut Option<TcpStream>,
        kind: Kind,
        tag: u64,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let Some(s) = w.as_ref() else {
            return Err(broken());
        };
        let mut s = s;
        let r = wire::write_frame(&mut s, kind, tag, payload);
        if r.is_err() {
            *w = None; // a partial frame may be on the wire
        }
        r
    }

    /// Shut both directions: our reader sees EOF at once and the peer sees our FIN.
    pub fn shutdown(&self) {
        let _ = self.ctl.shutdown(Shutdown::Both);
    }
}

fn broken() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the connection broke during an earlier send",
    )
}

/// Connect rank `me` to every other rank. Returns one stream per peer (`None` at `me`).
pub(crate) fn connect_mesh(
    me: usize,
    peers: &[RankInfo],
    nonce: u64,
    listener: Option<TcpListener>,
    timeout: Duration,
    secret: Option<&JobSecret>,
) -> Result<Vec<Option<TcpStream>>> {
    let n = peers.len();
    let deadline = super::net::deadline_after(timeout);
    let stop = AtomicBool::new(false);
    let (lower, higher) = std::thread::scope(|scope| {
        let acceptor = match (&listener, me) {
            (_, 0) => None,
            (Some(l), _) => Some(
                scope.spawn(|| accept_lower(me, peers, nonce, l, secret, deadline, timeout, &stop)),
            ),
            (None, _) => unreachable!("non-root ranks have a peer listener"),
        };
        let higher = connect_higher(me, peers, nonce, secret, deadline, timeout);
        if higher.is_err() {
            stop.store(true, Ordering::Release); // no point waiting for the others
        }
        let lower = match acceptor {
            Some(h) => h.join().unwrap_or_else(|_| {
                Err(Error::Bootstrap("the mesh accept thread panicked".into()))
            }),
            None => Ok(Vec::new()),
        };
        (lower, higher)
    });
    let higher = higher?;
    let lower = lower?;
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for (r, s) in lower.into_iter().chain(higher) {
        streams[r] = Some(s);
    }
    debug!(rank = me, nranks = n, "bootstrap mesh connected");
    Ok(streams)
}

/// Connect to ranks above `me`, each answered by an ack.
fn connect_higher(
    me: usize,
    peers: &[RankInfo],
    nonce: u64,
    secret: Option<&JobSecret>,
    deadline: Instant,
    timeout: Duration,
) -> Result<Vec<(usize, TcpStream)>> {
    let mut out = Vec::new();
    for (to, p) in peers.iter().enumerate().skip(me + 1) {
        let who = describe(p);
        let s = connect_retry(
            &[p.addr],
            deadline,
            timeout,
            &format!("connecting to {who} at {}", p.addr),
            Some(to),
        )?;
        configure(&s, timeout)
            .map_err(|e| Error::Bootstrap(format!("configuring the connection to {who}: {e}")))?;
        let challenge = secret.map(|_| auth::challenge()).transpose()?;
        let hello = PeerHello {
            nonce,
            from: me,
            to,
            challenge,
        }
        .encode();
        wire::write_frame(&mut &s, Kind::PeerHello, 0, &hello).map_err(|e| Error::PeerFailed {
            rank: to,
            detail: format!("{who} dropped our mesh connection: {e}"),
        })?;
        let read = || {
            read_frame_by(&s, deadline, MAX_HELLO).map_err(|e| match e {
                WireError::Timeout => Error::Timeout {
                    what: format!("{who} to acknowledge our mesh connection"),
                    peer: Some(to),
                    after: timeout,
                },
                WireError::Closed => Error::Bootstrap(format!(
                    "{who} at {} refused our mesh connection: another process now owns that address, or it is \
                     not part of this communicator (see its warnings)",
                    p.addr
                )),
                e => Error::PeerFailed {
                    rank: to,
                    detail: format!("{who} failed during the mesh setup: {e}"),
                },
            })
        };
        let signed = AuthHello {
            link: Link::Mesh,
            bytes: &hello,
            challenge: challenge.as_ref(),
        };
        let peer = format!("{who} at {}", p.addr);
        let f = connect_auth(&s, secret, &peer, &signed, read()?, read)?;
        if f.kind != Kind::PeerAck {
            return Err(Error::Bootstrap(format!(
                "{who} answered our mesh hello with a {:?} frame",
                f.kind
            )));
        }
        debug!(rank = me, peer = to, "mesh connection up");
        out.push((to, s));
    }
    Ok(out)
}

/// Accept one connection from each rank below `me`, rejecting strays.
#[allow(clippy::too_many_arguments)]
fn accept_lower(
    me: usize,
    peers: &[RankInfo],
    nonce: u64,
    listener: &TcpListener,
    secret: Option<&JobSecret>,
    deadline: Instant,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<Vec<(usize, TcpStream)>> {
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Bootstrap(format!("configuring the peer listener: {e}")))?;
    let mut got: Vec<Option<TcpStream>> = (0..me).map(|_| None).collect();
    let mut count = 0;
    while count < me {
        let accepted = accept_until(listener, deadline, stop)
            .map_err(|e| Error::Bootstrap(format!("accepting mesh connections: {e}")))?;
        let Some((s, from_addr)) = accepted else {
            let missing: Vec<usize> = (0..me).filter(|&r| got[r].is_none()).collect();
            return Err(Error::Timeout {
                what: format!(
                    "mesh connections from lower ranks; still missing {}",
                    list(&missing)
                ),
                peer: missing.first().copied(),
                after: timeout,
            });
        };
        let checked = configure(&s, timeout)
            .map_err(|e| e.to_string())
            .and_then(|_| {
                let by = deadline.min(Instant::now() + HELLO_WAIT);
                let f = read_frame_by(&s, by, MAX_HELLO).map_err(|e| e.to_string())?;
                if f.kind != Kind::PeerHello {
                    return Err(format!(
                        "it sent a {:?} frame instead of a mesh hello",
                        f.kind
                    ));
                }
                let h = PeerHello::decode(&f.payload)?;
                // Authenticated before anything it claims is looked at.
                let signed = AuthHello {
                    link: Link::Mesh,
                    bytes: &f.payload,
                    challenge: h.challenge.as_ref(),
                };
                accept_auth(&s, secret, &format!("rank {me}"), &signed, by)
                    .map_err(|why| format!("it claims rank {} but {why}", h.from))?;
                h.check(me, nonce)?;
                if got[h.from].is_some() {
                    return Err(format!("rank {} is already connected", h.from));
                }
                Ok(h.from)
            });
        match checked {
            Ok(from) => {
                if let Err(e) = wire::write_frame(&mut &s, Kind::PeerAck, 0, &[]) {
                    return Err(Error::PeerFailed {
                        rank: from,
                        detail: format!(
                            "{} dropped its mesh connection: {e}",
                            describe(&peers[from])
                        ),
                    });
                }
                debug!(rank = me, peer = from, "mesh connection accepted");
                got[from] = Some(s);
                count += 1;
            }
            Err(why) => {
                warn!(
                    rank = me,
                    "rank {me} refused a bootstrap mesh connection from {from_addr}: {why}"
                )
            }
        }
    }
    Ok(got
        .into_iter()
        .enumerate()
        .map(|(r, s)| (r, s.expect("counted")))
        .collect())
}

/// Start the reader thread for the connection to `peer`.
pub(crate) fn spawn_reader(
    me: usize,
    peer: &RankInfo,
    stream: TcpStream,
    mailbox: Arc<Mailbox>,
) -> std::io::Result<JoinHandle<()>> {
    stream.set_read_timeout(None)?; // rendezvous reads had deadlines; idle readers must park
    let who = describe(peer);
    let rank = peer.rank;
    std::thread::Builder::new()
        .name(format!("fx-boot-{me}<-{rank}"))
        .stack_size(READER_STACK)
        .spawn(move || read_loop(rank, &who, stream, &mailbox))
}

/// Dispatch frames from `peer` until goodbye, death, or our own close.
fn read_loop(peer: usize, who: &str, stream: TcpStream, mailbox: &Mailbox) {
    let mut r = BufReader::with_capacity(READ_BUFFER, stream);
    loop {
        let err = match wire::read_frame(&mut r, MAX_PAYLOAD) {
            Ok(f) => match f.kind {
                Kind::Data => {
                    mailbox.deliver(peer, f.tag, f.payload);
                    continue;
                }
                Kind::Abort => {
                    let reason = String::from_utf8_lossy(&f.payload).into_owned();
                    warn!(peer, "{who} aborted the communicator: {reason}");
                    mailbox.abort_from(peer, reason);
                    continue;
                }
                Kind::Goodbye => {
                    debug!(peer, "{who} said goodbye");
                    mailbox.peer_left(peer);
                    return;
                }
                k => format!("{who} sent an unexpected {k:?} frame (protocol error)"),
            },
            Err(_) if mailbox.is_closing() => return, // our own shutdown
            Err(WireError::Closed) => {
                format!("{who} closed its connection without saying goodbye: the process died")
            }
            Err(WireError::Io(e)) => {
                format!("{who} lost its connection without saying goodbye ({e}): the process or its host died")
            }
            Err(e) => format!("{who} sent garbage on its bootstrap connection ({e})"),
        };
        if mailbox.is_closing() {
            return;
        }
        warn!(peer, "{err}");
        mailbox.peer_dead(peer, err);
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(addr: std::net::SocketAddr) -> [RankInfo; 2] {
        let info = |rank| RankInfo {
            rank,
            pid: 1,
            host_name: "h".into(),
            host_hash: 1,
            local_rank: rank,
            cuda_device: 0,
            addr,
        };
        [info(0), info(1)]
    }

    fn hello(s: &TcpStream, h: PeerHello) -> Result<wire::Frame, WireError> {
        wire::write_frame(&mut &*s, Kind::PeerHello, 0, &h.encode()).unwrap();
        read_frame_by(s, Instant::now() + Duration::from_secs(10), MAX_HELLO)
    }

    #[test]
    fn strays_are_rejected_and_the_real_peer_accepted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peers = table(addr);
        let nonce = 0x1234;
        let client = std::thread::spawn(move || {
            // Another communicator's rank 0 (stale job on a reused port): dropped.
            let stale = TcpStream::connect(addr).unwrap();
            assert!(matches!(
                hello(
                    &stale,
                    PeerHello {
                        nonce: 99,
                        from: 0,
                        to: 1,
                        challenge: None,
                    }
                ),
                Err(WireError::Closed)
            ));
            // Not ferrocx at all: dropped.
            let mut junk = TcpStream::connect(addr).unwrap();
            std::io::Write::write_all(&mut junk, b"SSH-2.0-OpenSSH_9.6\r\n\r\n").unwrap();
            // The real rank 0: acknowledged.
            let good = TcpStream::connect(addr).unwrap();
            let ack = hello(
                &good,
                PeerHello {
                    nonce,
                    from: 0,
                    to: 1,
                    challenge: None,
                },
            )
            .unwrap();
            assert_eq!(ack.kind, Kind::PeerAck);
            good
        });
        let stop = AtomicBool::new(false);
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = accept_lower(
            1,
            &peers,
            nonce,
            &listener,
            None,
            deadline,
            Duration::from_secs(10),
            &stop,
        )
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 0);
        client.join().unwrap();
    }

    /// A mesh listener of a job with a secret: strays without it, with another, or
    /// with a made-up answer are refused (each told why), even when they know the nonce;
    /// the real rank 0 then gets in.
    #[test]
    fn mesh_strays_without_the_secret_are_refused_and_the_real_peer_accepted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peers = table(addr);
        let nonce = 0x1234;
        let job = JobSecret::new("job").unwrap();
        let timeout = Duration::from_secs(10);
        let client = {
            let (peers, job) = (peers.clone(), job.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + timeout;
                // Without a secret (it learnt the nonce by watching the network).
                let bare = TcpStream::connect(addr).unwrap();
                let f = hello(
                    &bare,
                    PeerHello {
                        nonce,
                        from: 0,
                        to: 1,
                        challenge: None,
                    },
                )
                .unwrap();
                assert_eq!(f.kind, Kind::AuthFail);
                let why = String::from_utf8_lossy(&f.payload).into_owned();
                assert!(
                    why.starts_with("rank 1 has a job secret and this process has none"),
                    "{why}"
                );
                // With another job's secret: the connector sees the listener's answer fail.
                let other = JobSecret::new("other job").unwrap();
                let e = connect_higher(0, &peers, nonce, Some(&other), deadline, timeout)
                    .expect_err("refused");
                assert!(
                    matches!(&e, Error::Auth(m) if m.contains("does not know this rank's job secret")),
                    "{e}"
                );
                // A made-up answer to the listener's challenge.
                let forger = TcpStream::connect(addr).unwrap();
                let f = hello(
                    &forger,
                    PeerHello {
                        nonce,
                        from: 0,
                        to: 1,
                        challenge: Some([1; auth::CHALLENGE_LEN]),
                    },
                )
                .unwrap();
                assert_eq!(f.kind, Kind::AuthChallenge);
                wire::write_frame(&mut &forger, Kind::AuthAnswer, 0, &[9; auth::ANSWER_LEN])
                    .unwrap();
                let f = read_frame_by(&forger, deadline, MAX_HELLO).unwrap();
                assert_eq!(f.kind, Kind::AuthFail);
                // The real rank 0.
                let mut up = connect_higher(0, &peers, nonce, Some(&job), deadline, timeout)
                    .expect("the real rank gets in");
                assert_eq!(up.len(), 1);
                up.pop().unwrap()
            })
        };
        let stop = AtomicBool::new(false);
        let got = accept_lower(
            1,
            &peers,
            nonce,
            &listener,
            Some(&job),
            Instant::now() + timeout,
            timeout,
            &stop,
        )
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 0);
        let (to, stream) = client.join().unwrap();
        assert_eq!(to, 1);
        // The accepted pair is one connection: a frame crosses it.
        wire::write_frame(&mut &stream, Kind::Data, 5, b"x").unwrap();
        let f = read_frame_by(&got[0].1, Instant::now() + timeout, MAX_HELLO).unwrap();
        assert_eq!((f.kind, f.tag), (Kind::Data, 5));
    }
}
