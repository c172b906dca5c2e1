//! One end of a net-socket connection: setup and connect (the receiver listens on
//! every rail, the sender dials every socket), then the data path of
//! [`Sender`](crate::send::Sender) or [`Receiver`](crate::recv::Receiver),
//! driven inside `isend`/`irecv`/`test`.
//!
//! The state sits behind an `Arc<Mutex<…>>` shared with the requests, because
//! `test` gets only the request. The core serializes calls per connection, so
//! the lock is uncontended.

use crate::accept::Acceptor;
use crate::blob::{RecvInfo, SendInfo};
use crate::linger::Idle;
use crate::recv::Receiver;
use crate::send::{Params, Rail, Sender, Who};
use crate::{Health, NetSocket};
use ferrocx_sdk::{Blob, ConnReq, ConnectState, Direction, PluginError, PluginResult};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Requests a connection holds before `isend`/`irecv` answer "not now".
const MAX_POSTED: usize = 4096;

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

enum Side {
    /// Sender before `connect`: its rails' local addresses.
    SendSetup {
        locals: Vec<SocketAddr>,
    },
    /// Receiver before `connect`: listening on every rail.
    RecvSetup {
        acceptor: Acceptor,
        token: u64,
        nrails: usize,
    },
    Send(Sender),
    Recv(Receiver),
    /// Failed or freed.
    Closed,
}

struct ConnCore {
    who: Who,
    dir: Direction,
    conn_id: u64,
    deadline: Instant,
    /// This end's knobs (the agreed ones are fixed at connect).
    p: Params,
    health: Arc<Health>,
    side: Side,
    connected: bool,
    broken: Option<PluginError>,
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
    /// Create this end: the receiver listens on every rail and describes them in `out`.
    pub(crate) fn setup(ctx: &NetSocket, req: &ConnReq, out: &mut Blob) -> PluginResult<Self> {
        let (me, peer) = (req.me(), req.peer());
        let conn_id = req.raw.conn_id;
        let locals: Vec<SocketAddr> = ctx.rails().to_vec();
        if locals.is_empty() {
            return Err(PluginError::invalid(
                "net-socket: no usable network interface (see FERROCX_SOCKET_IFNAME)",
            ));
        }
        let cfg = ctx.config();
        let side = match req.direction {
            Direction::Send => {
                out.write(&SendInfo::new(conn_id, locals.len(), cfg.nsocks, cfg.chunk))?;
                Side::SendSetup { locals }
            }
            Direction::Recv => {
                let (acceptor, bound) = Acceptor::listen(&locals)?;
                let token = random_token();
                out.write(&RecvInfo::new(conn_id, token, &bound))?;
                ctx.host().debug(format!(
                    "net-socket: rank {} listens on {bound:?} for messages from rank {}",
                    me.rank, peer.rank
                ));
                Side::RecvSetup {
                    acceptor,
                    token,
                    nrails: bound.len(),
                }
            }
        };
        let arrow = match req.direction {
            Direction::Send => "→",
            Direction::Recv => "←",
        };
        let who = Who {
            host: ctx.host(),
            what: format!(
                "net-socket connection {conn_id:#x} rank {} {arrow} rank {}",
                me.rank, peer.rank
            ),
            peer: peer.rank,
        };
        let core = ConnCore {
            who,
            dir: req.direction,
            conn_id,
            deadline: Instant::now() + ctx.host().timeout(),
            p: Params {
                chunk: cfg.chunk,
                nsocks: cfg.nsocks,
                reliable: false,
                window: cfg.window,
                rail_timeout: cfg.rail_timeout,
            },
            health: ctx.health(),
            side,
            connected: false,
            broken: None,
        };
        let core = Arc::new(Mutex::new(core));
        if req.direction == Direction::Recv {
            let end: Arc<dyn Idle> = core.clone();
            ctx.linger().add(Arc::downgrade(&end));
        }
        Ok(SocketConn { core })
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
        let Side::Send(s) = &mut core.side else {
            return Err(PluginError::internal("net-socket: sender state expected"));
        };
        let Some(seq) = s.post(addr, len, MAX_POSTED) else {
            return Ok(None);
        };
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
        let Side::Recv(r) = &mut core.side else {
            return Err(PluginError::internal("net-socket: receiver state expected"));
        };
        let Some(seq) = r.post(addr, cap, MAX_POSTED) else {
            return Ok(None);
        };
        Ok(Some(SocketRequest {
            core: self.core.clone(),
            seq,
        }))
    }
}

impl Drop for SocketConn {
    fn drop(&mut self) {
        let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        let core = &mut *core;
        if let (Side::Recv(r), None) = (&mut core.side, &core.broken) {
            r.say_goodbye();
        }
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
        if let Some(r) = core.take(self.seq) {
            return r.map(Some);
        }
        core.progress();
        if let Some(r) = core.take(self.seq) {
            return r.map(Some);
        }
        if core.pending(self.seq) {
            return Ok(None);
        }
        Err(core
            .broken
            .clone()
            .unwrap_or_else(|| PluginError::invalid(format!("{}: unknown request", core.who.what))))
    }
}

impl Drop for SocketRequest {
    fn drop(&mut self) {
        let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        if core.forget(self.seq) {
            return;
        }
        if core.pending(self.seq) {
            // Its buffer may be gone while bytes are still on their way into it.
            core.fail(PluginError::invalid(
                "a net-socket request was dropped before it completed; the connection is unusable",
            ));
        }
    }
}

impl Idle for Mutex<ConnCore> {
    fn idle_turn(&self, now: Instant) {
        let Ok(mut core) = self.try_lock() else {
            return;
        };
        if core.broken.is_some() || core.who.host.aborted() {
            return;
        }
        let r = match &mut core.side {
            Side::Recv(r) if r.lingering() => r.progress(now),
            _ => return,
        };
        if let Err(e) = r {
            core.fail(e);
        }
    }
}

impl ConnCore {
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
                self.who.what
            )));
        }
        if !self.connected {
            return Err(PluginError::invalid(format!(
                "{} is not connected yet",
                self.who.what
            )));
        }
        Ok(())
    }

    fn connect(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if self.connected {
            return Ok(ConnectState::Done);
        }
        if self.who.host.aborted() {
            return Err(PluginError::remote(format!(
                "{}: communicator aborted during connect",
                self.who.what
            )));
        }
        let r = self.connect_step(blob);
        match r {
            Ok(ConnectState::InProgress) if Instant::now() > self.deadline => {
                let waiting = match &self.side {
                    Side::Send(s) => format!(" (still connecting to {})", s.dialing().join(", ")),
                    _ => String::new(),
                };
                let e = PluginError::timeout(format!(
                    "{}: not connected after {:?} (FERROCX_TIMEOUT){waiting}",
                    self.who.what,
                    self.who.host.timeout()
                ));
                self.fail(e.clone());
                Err(e)
            }
            Err(e) => {
                self.fail(e.clone());
                Err(e)
            }
            other => other,
        }
    }

    fn connect_step(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        match std::mem::replace(&mut self.side, Side::Closed) {
            Side::SendSetup { locals } => {
                let info = RecvInfo::parse(blob, self.conn_id)?;
                let remotes = info.addrs()?;
                let n = locals.len().min(remotes.len());
                self.p.reliable = n >= 2;
                let rails = (0..n)
                    .map(|i| Rail {
                        local: Some(locals[i]),
                        remote: remotes[i],
                    })
                    .collect();
                let s = Sender::dial(
                    self.who.clone(),
                    self.p,
                    info.token,
                    rails,
                    self.health.clone(),
                )?;
                self.side = Side::Send(s);
            }
            Side::RecvSetup {
                acceptor,
                token,
                nrails,
            } => {
                let info = SendInfo::parse(blob, self.conn_id)?;
                let n = nrails.min(info.nrails as usize);
                self.p.reliable = n >= 2;
                self.p.nsocks = info.nsocks as usize;
                self.p.chunk = info.chunk as usize;
                let r = Receiver::new(self.who.clone(), self.p, token, acceptor, n * self.p.nsocks);
                self.side = Side::Recv(r);
            }
            other => self.side = other,
        }
        let done = match &mut self.side {
            Side::Send(s) => s.connect_step()?,
            Side::Recv(r) => r.connect_step()?,
            _ => {
                return Err(PluginError::internal(format!(
                    "{}: unexpected connect state",
                    self.who.what
                )))
            }
        };
        if !done {
            return Ok(ConnectState::InProgress);
        }
        self.connected = true;
        self.who.host.debug(format!(
            "{}: connected ({} socket(s) per rail, {} mode)",
            self.who.what,
            self.p.nsocks,
            if self.p.reliable {
                "multi-rail acknowledged"
            } else {
                "single-rail"
            }
        ));
        Ok(ConnectState::Done)
    }

    /// One round of non-blocking progress; failures end up in the requests' results.
    fn progress(&mut self) {
        if self.broken.is_some() {
            return;
        }
        if self.who.host.aborted() {
            let e = PluginError::remote(format!("{}: communicator aborted", self.who.what));
            self.fail(e);
            return;
        }
        let now = Instant::now();
        let r = match &mut self.side {
            Side::Send(s) => s.progress(now),
            Side::Recv(r) => r.progress(now),
            _ => Ok(()),
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    /// The connection is unusable: fail what is pending and close the sockets
    /// (so the peer sees it at once).
    fn fail(&mut self, e: PluginError) {
        match &mut self.side {
            Side::Send(s) => s.fail_all(&e),
            Side::Recv(r) => r.fail_all(&e),
            _ => {}
        }
        if self.broken.is_none() {
            self.broken = Some(e);
        }
    }

    fn take(&mut self, seq: u64) -> Option<PluginResult<usize>> {
        match &mut self.side {
            Side::Send(s) => s.take(seq),
            Side::Recv(r) => r.take(seq),
            _ => None,
        }
    }

    fn forget(&mut self, seq: u64) -> bool {
        match &mut self.side {
            Side::Send(s) => s.forget(seq),
            Side::Recv(r) => r.forget(seq),
            _ => false,
        }
    }

    fn pending(&self, seq: u64) -> bool {
        match &self.side {
            Side::Send(s) => s.pending(seq),
            Side::Recv(r) => r.pending(seq),
            _ => false,
        }
    }
}
