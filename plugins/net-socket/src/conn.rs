//! One end of a net-socket connection: the listening/accepting receiver, the
//! connecting sender, and the data path (posting, progress inside `test`).
//!
//! The state sits behind an `Arc<Mutex<…>>` shared with the requests, because
//! `test` gets only the request. The core serializes calls per connection, so
//! the lock is uncontended.

use crate::sock::{self, Io};
use crate::wire::{self, RecvInfo, SendInfo, HEADER_BYTES, HELLO_BYTES};
use ferrocx_sdk::{Blob, ConnReq, ConnectState, Direction, Host, PluginError, PluginResult};
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Requests a connection holds before `isend`/`irecv` answer "not now".
const MAX_POSTED: usize = 4096;
/// Bytes of the scratch buffer that swallows a message too large for its receive.
const DISCARD_CHUNK: usize = 64 << 10;

static TOKEN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// One end of a connection (the plugin's `Conn`).
pub struct SocketConn {
    core: Arc<Mutex<ConnCore>>,
}

/// A posted send or receive (the plugin's `Request`).
pub struct SocketRequest {
    core: Arc<Mutex<ConnCore>>,
    seq: u64,
}

/// A pending accepted socket whose hello is not complete yet.
struct Candidate {
    stream: TcpStream,
    from: SocketAddr,
    hello: [u8; HELLO_BYTES],
    got: usize,
}

enum State {
    /// Receiver: waiting for the sender to connect and present the token.
    Listening {
        listener: TcpListener,
        candidates: Vec<Candidate>,
    },
    /// Sender before its first `connect`.
    Idle,
    /// Sender: connect in flight, then the hello being written.
    Connecting {
        stream: TcpStream,
        to: SocketAddr,
        sent: usize,
    },
    /// Data may flow.
    Ready(TcpStream),
    /// Failed or freed.
    Closed,
}

/// Buffer address of a posted request (kept as an integer so the state is `Send`;
/// the poster guarantees validity until completion).
struct SendOp {
    seq: u64,
    addr: usize,
    len: usize,
    header: [u8; HEADER_BYTES],
    done: usize,
}

struct RecvOp {
    seq: u64,
    addr: usize,
    cap: usize,
}

/// Receiver's position in the incoming byte stream.
#[derive(Default)]
struct RxState {
    header: [u8; HEADER_BYTES],
    header_got: usize,
    /// (message length, bytes of it consumed) once the header is complete.
    body: Option<(u64, u64)>,
}

struct ConnCore {
    host: Host,
    dir: Direction,
    me_rank: i32,
    peer_rank: i32,
    conn_id: u64,
    token: u64,
    deadline: Instant,
    state: State,
    broken: Option<PluginError>,
    next_seq: u64,
    sends: VecDeque<SendOp>,
    recvs: VecDeque<RecvOp>,
    rx: RxState,
    done: HashMap<u64, PluginResult<usize>>,
    scratch: Vec<u8>,
}

fn lock(core: &Mutex<ConnCore>) -> PluginResult<MutexGuard<'_, ConnCore>> {
    core.lock().map_err(|_| {
        PluginError::internal("net-socket connection state was poisoned by an earlier panic")
    })
}

/// A value another process cannot guess by accident.
fn random_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map_or(0, |d| d.as_nanos()));
    h.write_u64(TOKEN_COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish() | 1
}

impl SocketConn {
    /// Create this end: the receiver listens on `local` and describes it in `out`.
    pub(crate) fn setup(
        host: Host,
        local: Option<SocketAddr>,
        req: &ConnReq,
        out: &mut Blob,
    ) -> PluginResult<Self> {
        let (me, peer) = (req.me(), req.peer());
        let conn_id = req.raw.conn_id;
        let mut token = 0;
        let state = match req.direction {
            Direction::Send => {
                out.write(&SendInfo::new(conn_id))?;
                State::Idle
            }
            Direction::Recv => {
                let local = local.ok_or_else(|| {
                    PluginError::invalid(
                        "net-socket: no usable network interface (see FERROCX_SOCKET_IFNAME)",
                    )
                })?;
                let listener = TcpListener::bind(local).map_err(|e| {
                    PluginError::io(format!("net-socket: cannot listen on {local}"), e)
                })?;
                listener
                    .set_nonblocking(true)
                    .map_err(|e| PluginError::io("net-socket: set_nonblocking", e))?;
                let addr = listener
                    .local_addr()
                    .map_err(|e| PluginError::io("net-socket: local_addr", e))?;
                token = random_token();
                out.write(&RecvInfo::new(conn_id, token, addr))?;
                host.debug(format!(
                    "net-socket: rank {} listens on {addr} for messages from rank {}",
                    me.rank, peer.rank
                ));
                State::Listening {
                    listener,
                    candidates: Vec::new(),
                }
            }
        };
        let core = ConnCore {
            host,
            dir: req.direction,
            me_rank: me.rank,
            peer_rank: peer.rank,
            conn_id,
            token,
            deadline: Instant::now() + host.timeout(),
            state,
            broken: None,
            next_seq: 0,
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
            rx: RxState::default(),
            done: HashMap::new(),
            scratch: Vec::new(),
        };
        Ok(SocketConn {
            core: Arc::new(Mutex::new(core)),
        })
    }

    /// Finish the connection with the peer's blob.
    pub(crate) fn connect(&mut self, peer: &Blob) -> PluginResult<ConnectState> {
        lock(&self.core)?.connect(peer)
    }

    /// Post a send of `len` bytes at `addr`.
    pub(crate) fn post_send(
        &mut self,
        addr: usize,
        len: usize,
    ) -> PluginResult<Option<SocketRequest>> {
        let mut core = lock(&self.core)?;
        core.ready(Direction::Send)?;
        if core.sends.len() >= MAX_POSTED {
            return Ok(None);
        }
        let seq = core.next_seq;
        core.next_seq += 1;
        core.sends.push_back(SendOp {
            seq,
            addr,
            len,
            header: wire::encode_header(seq, len as u64),
            done: 0,
        });
        // Start moving right away: the peer may be waiting for these bytes.
        core.progress();
        Ok(Some(SocketRequest {
            core: self.core.clone(),
            seq,
        }))
    }

    /// Post a receive of at most `cap` bytes at `addr`.
    pub(crate) fn post_recv(
        &mut self,
        addr: usize,
        cap: usize,
    ) -> PluginResult<Option<SocketRequest>> {
        let mut core = lock(&self.core)?;
        core.ready(Direction::Recv)?;
        if core.recvs.len() >= MAX_POSTED {
            return Ok(None);
        }
        let seq = core.next_seq;
        core.next_seq += 1;
        core.recvs.push_back(RecvOp { seq, addr, cap });
        Ok(Some(SocketRequest {
            core: self.core.clone(),
            seq,
        }))
    }
}

impl Drop for SocketConn {
    fn drop(&mut self) {
        let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        core.fail(PluginError::invalid(
            "net-socket connection freed with the request outstanding",
        ));
        core.broken = Some(PluginError::invalid("net-socket connection was freed"));
    }
}

impl SocketRequest {
    /// One round of progress on the connection; `Some(nbytes)` once this request is done.
    pub(crate) fn test(&mut self) -> PluginResult<Option<usize>> {
        let mut core = lock(&self.core)?;
        if let Some(r) = core.done.remove(&self.seq) {
            return r.map(Some);
        }
        core.progress();
        core.take(self.seq)
    }
}

impl Drop for SocketRequest {
    fn drop(&mut self) {
        let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        if core.done.remove(&self.seq).is_some() {
            return;
        }
        let pending = core.sends.iter().any(|o| o.seq == self.seq)
            || core.recvs.iter().any(|o| o.seq == self.seq);
        if pending {
            // Its buffer may be gone; the byte stream cannot skip it.
            core.fail(PluginError::invalid(
                "a net-socket request was dropped before it completed; the connection is unusable",
            ));
        }
    }
}

/// Why the stream ended: `err` is None for an orderly end of stream.
fn gone(peer_rank: i32, pending: usize, what: &str, err: Option<&std::io::Error>) -> PluginError {
    let why = match err.and_then(|e| e.raw_os_error()) {
        None if err.is_none() => "closed the connection (end of stream)".to_string(),
        Some(libc::ECONNRESET) => "reset the connection".to_string(),
        Some(libc::EPIPE) => "closed the connection".to_string(),
        _ => format!(
            "is unreachable ({})",
            err.map_or(String::new(), |e| e.to_string())
        ),
    };
    PluginError::remote(format!(
        "peer rank {peer_rank} {why} while {pending} request(s) were pending on {what}"
    ))
}

fn stream_setup(s: &TcpStream) -> PluginResult<()> {
    s.set_nonblocking(true)
        .and_then(|_| s.set_nodelay(true))
        .map_err(|e| PluginError::io("net-socket: socket options", e))
}

impl ConnCore {
    fn what(&self) -> String {
        let arrow = match self.dir {
            Direction::Send => "→",
            Direction::Recv => "←",
        };
        format!(
            "net-socket connection {:#x} rank {} {arrow} rank {}",
            self.conn_id, self.me_rank, self.peer_rank
        )
    }

    fn ready(&self, want: Direction) -> PluginResult<()> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if want != self.dir {
            return Err(PluginError::invalid(format!(
                "{} on the {} end of {}",
                if want == Direction::Send {
                    "isend"
                } else {
                    "irecv"
                },
                if self.dir == Direction::Send {
                    "sending"
                } else {
                    "receiving"
                },
                self.what()
            )));
        }
        match self.state {
            State::Ready(_) => Ok(()),
            _ => Err(PluginError::invalid(format!(
                "{} is not connected yet",
                self.what()
            ))),
        }
    }

    fn connect(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if matches!(self.state, State::Ready(_)) {
            return Ok(ConnectState::Done);
        }
        if self.host.aborted() {
            return Err(PluginError::remote(format!(
                "{}: communicator aborted during connect",
                self.what()
            )));
        }
        let r = match self.dir {
            Direction::Send => self.connect_sender(blob),
            Direction::Recv => self.connect_receiver(blob),
        };
        match r {
            Ok(ConnectState::InProgress) if Instant::now() > self.deadline => {
                Err(PluginError::timeout(format!(
                    "{}: not connected after {:?} (FERROCX_TIMEOUT)",
                    self.what(),
                    self.host.timeout()
                )))
            }
            other => other,
        }
    }

    fn connect_sender(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        if matches!(self.state, State::Idle) {
            let info = RecvInfo::parse(blob, self.conn_id)?;
            let to = info.socket_addr()?;
            self.token = info.token;
            let stream = sock::start_connect(&to).map_err(|e| {
                PluginError::io(
                    format!(
                        "net-socket: rank {} cannot connect to rank {} at {to}",
                        self.me_rank, self.peer_rank
                    ),
                    e,
                )
            })?;
            self.state = State::Connecting {
                stream,
                to,
                sent: 0,
            };
        }
        let what = self.what();
        let (me, peer) = (self.me_rank, self.peer_rank);
        let State::Connecting { stream, to, sent } = &mut self.state else {
            return Err(PluginError::internal(format!(
                "{what}: unexpected connect state"
            )));
        };
        let fail = |e: std::io::Error| {
            PluginError::remote(format!(
                "net-socket: rank {me} cannot connect to rank {peer} at {to}: {e}"
            ))
        };
        if let Some(e) = stream.take_error().map_err(fail)? {
            return Err(fail(e));
        }
        match stream.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotConnected => return Ok(ConnectState::InProgress),
            Err(e) => return Err(fail(e)),
        }
        let hello = wire::encode_hello(self.token);
        while *sent < HELLO_BYTES {
            let rest = &hello[*sent..];
            // SAFETY: `rest` is a live local slice.
            match unsafe { sock::send2(stream, (rest.as_ptr(), rest.len()), (std::ptr::null(), 0)) }
            {
                Ok(Io::Moved(n)) => *sent += n,
                Ok(Io::Again) => return Ok(ConnectState::InProgress),
                Err(e) => return Err(fail(e)),
            }
        }
        stream.set_nodelay(true).map_err(fail)?;
        let State::Connecting { stream, to, .. } =
            std::mem::replace(&mut self.state, State::Closed)
        else {
            return Err(PluginError::internal(format!(
                "{what}: unexpected connect state"
            )));
        };
        self.host.debug(format!("{what}: connected to {to}"));
        self.state = State::Ready(stream);
        Ok(ConnectState::Done)
    }

    fn connect_receiver(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        SendInfo::parse(blob, self.conn_id)?;
        let (token, what, host) = (self.token, self.what(), self.host);
        let State::Listening {
            listener,
            candidates,
        } = &mut self.state
        else {
            return Err(PluginError::internal(format!(
                "{what}: unexpected connect state"
            )));
        };
        loop {
            match listener.accept() {
                Ok((stream, from)) => {
                    stream_setup(&stream)?;
                    candidates.push(Candidate {
                        stream,
                        from,
                        hello: [0; HELLO_BYTES],
                        got: 0,
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(PluginError::io(format!("{what}: accept"), e)),
            }
        }
        let mut chosen = None;
        let mut i = 0;
        while i < candidates.len() {
            let c = &mut candidates[i];
            let verdict = loop {
                if c.got == HELLO_BYTES {
                    break Some(wire::hello_matches(&c.hello, token));
                }
                match c.stream.read(&mut c.hello[c.got..]) {
                    Ok(0) => break Some(false),
                    Ok(n) => c.got += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break Some(false),
                }
            };
            match verdict {
                None => i += 1,
                Some(true) => {
                    chosen = Some(candidates.swap_remove(i));
                    break;
                }
                Some(false) => {
                    let c = candidates.swap_remove(i);
                    host.warn(format!(
                        "{what}: rejected a connection from {} (no or wrong token)",
                        c.from
                    ));
                }
            }
        }
        let Some(c) = chosen else {
            return Ok(ConnectState::InProgress);
        };
        host.debug(format!("{what}: accepted {}", c.from));
        // Dropping the listener and other candidates closes them.
        self.state = State::Ready(c.stream);
        Ok(ConnectState::Done)
    }

    /// One round of non-blocking progress; failures end up in the requests' results.
    fn progress(&mut self) {
        if self.broken.is_some() {
            return;
        }
        if self.host.aborted() {
            let e = PluginError::remote(format!("{}: communicator aborted", self.what()));
            self.fail(e);
            return;
        }
        let r = match self.dir {
            Direction::Send => self.progress_send(),
            Direction::Recv => self.progress_recv(),
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    fn progress_send(&mut self) -> PluginResult<()> {
        let (peer, pending, what) = (self.peer_rank, self.sends.len(), self.what());
        let State::Ready(stream) = &self.state else {
            return Ok(());
        };
        while let Some(op) = self.sends.front_mut() {
            let total = HEADER_BYTES + op.len;
            while op.done < total {
                let (a, b) = if op.done < HEADER_BYTES {
                    (
                        (op.header[op.done..].as_ptr(), HEADER_BYTES - op.done),
                        (op.addr as *const u8, op.len),
                    )
                } else {
                    let off = op.done - HEADER_BYTES;
                    (
                        ((op.addr + off) as *const u8, op.len - off),
                        (std::ptr::null(), 0),
                    )
                };
                // SAFETY: the header is ours; the payload is the poster's buffer, valid
                // and unmodified until this request completes (isend's contract).
                match unsafe { sock::send2(stream, a, b) } {
                    Ok(Io::Moved(n)) => op.done += n,
                    Ok(Io::Again) => return Ok(()),
                    Err(e) => return Err(gone(peer, pending, &what, Some(&e))),
                }
            }
            let (seq, len) = (op.seq, op.len);
            self.sends.pop_front();
            self.done.insert(seq, Ok(len));
        }
        Ok(())
    }

    fn progress_recv(&mut self) -> PluginResult<()> {
        let (peer, pending, what) = (self.peer_rank, self.recvs.len(), self.what());
        let State::Ready(stream) = &self.state else {
            return Ok(());
        };
        while let Some(op) = self.recvs.front() {
            let rx = &mut self.rx;
            while rx.header_got < HEADER_BYTES {
                let n = HEADER_BYTES - rx.header_got;
                // SAFETY: writable local header bytes.
                match unsafe { sock::recv(stream, rx.header[rx.header_got..].as_mut_ptr(), n) } {
                    Ok(Io::Moved(0)) => return Err(gone(peer, pending, &what, None)),
                    Ok(Io::Moved(k)) => rx.header_got += k,
                    Ok(Io::Again) => return Ok(()),
                    Err(e) => return Err(gone(peer, pending, &what, Some(&e))),
                }
            }
            let (len, mut got) = match rx.body {
                Some(b) => b,
                None => {
                    let (seq32, len) = wire::decode_header(&rx.header)?;
                    if seq32 != op.seq as u32 {
                        return Err(PluginError::internal(format!(
                            "net-socket protocol error on {what}: message #{seq32} arrived, #{} expected",
                            op.seq as u32
                        )));
                    }
                    (len, 0)
                }
            };
            let overflow = len > op.cap as u64;
            while got < len {
                let want = (len - got).min(usize::MAX as u64) as usize;
                let r = if overflow {
                    if self.scratch.is_empty() {
                        self.scratch = vec![0; DISCARD_CHUNK];
                    }
                    let n = want.min(DISCARD_CHUNK);
                    // SAFETY: our own scratch buffer of at least `n` bytes.
                    unsafe { sock::recv(stream, self.scratch.as_mut_ptr(), n) }
                } else {
                    // SAFETY: `got + want <= len <= cap`: inside the poster's buffer, which
                    // stays valid and ours until this request completes (irecv's contract).
                    unsafe { sock::recv(stream, (op.addr + got as usize) as *mut u8, want) }
                };
                match r {
                    Ok(Io::Moved(0)) => return Err(gone(peer, pending, &what, None)),
                    Ok(Io::Moved(k)) => {
                        got += k as u64;
                        self.rx.body = Some((len, got));
                    }
                    Ok(Io::Again) => {
                        self.rx.body = Some((len, got));
                        return Ok(());
                    }
                    Err(e) => return Err(gone(peer, pending, &what, Some(&e))),
                }
            }
            let result = if overflow {
                Err(PluginError::invalid(format!(
                    "rank {} sent {len} bytes but the receive posted on rank {} holds only {}",
                    self.peer_rank, self.me_rank, op.cap
                )))
            } else {
                Ok(len as usize)
            };
            let seq = op.seq;
            self.recvs.pop_front();
            self.rx = RxState::default();
            self.done.insert(seq, result);
        }
        Ok(())
    }

    /// The connection is unusable: fail what is pending and close the socket
    /// (so the peer sees it at once).
    fn fail(&mut self, e: PluginError) {
        for op in self.sends.drain(..) {
            self.done.insert(op.seq, Err(e.clone()));
        }
        for op in self.recvs.drain(..) {
            self.done.insert(op.seq, Err(e.clone()));
        }
        if self.broken.is_none() {
            self.broken = Some(e);
        }
        self.state = State::Closed;
    }

    fn take(&mut self, seq: u64) -> PluginResult<Option<usize>> {
        if let Some(r) = self.done.remove(&seq) {
            return r.map(Some);
        }
        if self.sends.iter().any(|o| o.seq == seq) || self.recvs.iter().any(|o| o.seq == seq) {
            return Ok(None);
        }
        Err(self
            .broken
            .clone()
            .unwrap_or_else(|| PluginError::invalid(format!("{}: unknown request", self.what()))))
    }
}
