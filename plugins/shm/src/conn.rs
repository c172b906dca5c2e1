//! One end of an shm connection: setup, connect, posting, testing, watching
//! the peer, and teardown.
//!
//! Lifecycle: the receiving end creates the segment at `setup` and describes
//! it in its blob; the sending end maps it at `connect` and raises
//! `sender_attached`; the receiving end's `connect` reports `InProgress` until
//! it sees that flag. Both ends then unlink the name (whoever is first), so
//! nothing stays in /dev/shm even if a process is killed afterwards.
//!
//! The connection's state sits behind an `Arc<Mutex<…>>` shared with its
//! requests, because `test` gets only the request. The core serializes calls
//! per connection, so the lock is uncontended.

use crate::blobs::{RecvInfo, SendInfo, NAME_PREFIX};
use crate::ctx::Ctx;
use crate::layout::{Layout, STATE_CLOSED, STATE_FAILED, STATE_OPEN};
use crate::proc::Peer;
use crate::recv::{RecvOp, RecvSide};
use crate::segment::{unlink_name, Segment};
use crate::send::SendSide;
use crate::stats::ConnStats;
use crate::userbuf::SendBuf;
use crate::watchdog::Watchdog;
use ferrocx_sdk::{Blob, ConnReq, ConnectState, Direction, PluginError, PluginResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Makes segment names unique within the process (with the pid, across processes).
static SEGMENT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Attempts at finding a free segment name before giving up.
const NAME_ATTEMPTS: usize = 64;

/// One end of a connection (the plugin's `Conn`).
pub struct ShmConn {
    core: Arc<Mutex<ConnCore>>,
}

/// A posted send or receive (the plugin's `Request`).
pub struct ShmRequest {
    core: Arc<Mutex<ConnCore>>,
    seq: u64,
}

enum Side {
    Send(SendSide),
    Recv(RecvSide),
}

struct ConnCore {
    ctx: Arc<Ctx>,
    dir: Direction,
    me_rank: i32,
    me_pid: i32,
    peer: Peer,
    conn_id: u64,
    seg: Option<Segment>,
    /// Present once connected.
    side: Option<Side>,
    /// Set when the connection failed or was freed: every later call reports it.
    broken: Option<PluginError>,
    watch: Watchdog,
    /// Receiver only: the identity token whose address the segment header
    /// publishes (boxed so it never moves while the connection lives).
    probe: Option<Box<u64>>,
}

fn lock(core: &Mutex<ConnCore>) -> PluginResult<MutexGuard<'_, ConnCore>> {
    core.lock()
        .map_err(|_| PluginError::internal("shm connection state was poisoned by an earlier panic"))
}

impl ShmConn {
    /// Create this end of the connection described by `req` and its blob for the peer.
    pub(crate) fn setup(ctx: &Arc<Ctx>, req: &ConnReq, out: &mut Blob) -> PluginResult<Self> {
        let (me, peer) = (req.me(), req.peer());
        let mut core = ConnCore {
            ctx: ctx.clone(),
            dir: req.direction,
            me_rank: me.rank,
            me_pid: me.pid,
            peer: Peer {
                rank: peer.rank,
                pid: 0,
            },
            conn_id: req.raw.conn_id,
            seg: None,
            side: None,
            broken: None,
            watch: Watchdog::default(),
            probe: None,
        };
        match req.direction {
            Direction::Send => out.write(&SendInfo::new(me.pid))?,
            Direction::Recv => {
                let probe = core.probe.insert(Box::new(random_token()));
                let seg = create_segment(ctx, req.raw.conn_id, probe)?;
                let l = *seg.layout();
                let info = RecvInfo::new(
                    seg.name(),
                    l.total as u64,
                    l.chunk as u64,
                    l.nslots as u32,
                    l.nreg as u32,
                    me.pid,
                )?;
                out.write(&info)?;
                ctx.host.debug(format!(
                    "shm: rank {} created segment {} ({} bytes, {} slots × {} B) for messages from rank {}",
                    me.rank,
                    seg.name(),
                    l.total,
                    l.nslots,
                    l.chunk,
                    peer.rank
                ));
                core.seg = Some(seg);
            }
        }
        Ok(ShmConn {
            core: Arc::new(Mutex::new(core)),
        })
    }

    /// Finish the connection with the peer's blob.
    pub(crate) fn connect(&mut self, peer: &Blob) -> PluginResult<ConnectState> {
        lock(&self.core)?.connect(peer)
    }

    /// Post a send.
    pub(crate) fn post_send(&mut self, buf: SendBuf) -> PluginResult<Option<ShmRequest>> {
        let mut core = lock(&self.core)?;
        let seq = match core.ready()? {
            Side::Send(s) => s.ops().post(buf),
            Side::Recv(_) => {
                return Err(PluginError::invalid(
                    "isend on the receiving end of an shm connection",
                ))
            }
        };
        Ok(seq.map(|seq| ShmRequest {
            core: self.core.clone(),
            seq,
        }))
    }

    /// Post a receive, and publish where its data may go right away: a sender
    /// waiting for this offer can start copying without waiting for our next `test`.
    pub(crate) fn post_recv(&mut self, op: RecvOp) -> PluginResult<Option<ShmRequest>> {
        let mut guard = lock(&self.core)?;
        guard.ready()?;
        let core = &mut *guard;
        let seq = match (core.side.as_mut(), core.seg.as_ref()) {
            (Some(Side::Recv(r)), Some(seg)) => {
                let seq = r.ops().post(op);
                r.publish(seg);
                seq
            }
            (Some(Side::Recv(r)), None) => r.ops().post(op),
            _ => {
                return Err(PluginError::invalid(
                    "irecv on the sending end of an shm connection",
                ))
            }
        };
        Ok(seq.map(|seq| ShmRequest {
            core: self.core.clone(),
            seq,
        }))
    }

    /// How this end moved its messages so far.
    pub fn stats(&self) -> ConnStats {
        let core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        match &core.side {
            Some(Side::Send(s)) => s.stats(),
            Some(Side::Recv(r)) => r.stats(),
            None => ConnStats::default(),
        }
    }

    /// The segment's name in /dev/shm (also after it was unlinked), while mapped.
    pub fn segment_name(&self) -> Option<String> {
        let core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        core.seg.as_ref().map(|s| s.name().to_owned())
    }
}

impl Drop for ShmConn {
    /// Freeing and dropping are the same: tell the peer, unmap, unlink if still linked.
    fn drop(&mut self) {
        self.core
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .close();
    }
}

impl ShmRequest {
    /// One round of progress on the request's connection; `Some(nbytes)` once this request is done.
    pub(crate) fn test(&mut self) -> PluginResult<Option<usize>> {
        let mut core = lock(&self.core)?;
        core.progress();
        core.take(self.seq)
    }
}

impl Drop for ShmRequest {
    fn drop(&mut self) {
        let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        if core.abandon(self.seq) {
            // Its buffer may be gone; touching later messages would break the ring's order.
            core.fail(PluginError::invalid(
                "an shm request was dropped before it completed; the connection is unusable",
            ));
        }
    }
}

/// A value another process cannot guess by accident.
fn random_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map_or(0, |d| d.as_nanos()));
    h.write_u64(SEGMENT_COUNTER.load(Ordering::Relaxed));
    h.finish() | 1
}

fn create_segment(ctx: &Ctx, conn_id: u64, probe: &u64) -> PluginResult<Segment> {
    let layout = Layout::new(ctx.cfg.nslots, ctx.cfg.chunk_size)?;
    let pid = std::process::id();
    for _ in 0..NAME_ATTEMPTS {
        let n = SEGMENT_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NAME_PREFIX}{pid}-{conn_id:x}-{n:x}");
        match Segment::create(&name, layout) {
            Ok(seg) => {
                seg.header()
                    .init(&layout, pid, probe as *const u64 as u64, *probe);
                return Ok(seg);
            }
            // A leftover of an earlier process with our pid: take the next name.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => {
                return Err(PluginError::io(
                    format!("shm: cannot create segment {name} ({} bytes)", layout.total),
                    e,
                ))
            }
        }
    }
    Err(PluginError::internal(format!(
        "shm: no free segment name after {NAME_ATTEMPTS} attempts"
    )))
}

impl Side {
    fn progress(&mut self, seg: &Segment) -> PluginResult<bool> {
        match self {
            Side::Send(s) => s.progress(seg),
            Side::Recv(r) => r.progress(seg),
        }
    }
    fn pending(&mut self) -> u64 {
        match self {
            Side::Send(s) => s.ops().pending(),
            Side::Recv(r) => r.ops().pending(),
        }
    }
    fn fail_all(&mut self, e: &PluginError) {
        match self {
            Side::Send(s) => s.ops().fail_all(e),
            Side::Recv(r) => r.ops().fail_all(e),
        }
    }
    fn take(&mut self, seq: u64) -> PluginResult<Option<usize>> {
        match self {
            Side::Send(s) => s.ops().take(seq),
            Side::Recv(r) => r.ops().take(seq),
        }
    }
    fn abandon(&mut self, seq: u64) -> bool {
        match self {
            Side::Send(s) => s.ops().abandon(seq),
            Side::Recv(r) => r.ops().abandon(seq),
        }
    }
}

impl ConnCore {
    fn what(&self) -> String {
        match self.dir {
            Direction::Send => format!(
                "shm connection {:#x} rank {} → rank {}",
                self.conn_id, self.me_rank, self.peer.rank
            ),
            Direction::Recv => format!(
                "shm connection {:#x} rank {} ← rank {}",
                self.conn_id, self.me_rank, self.peer.rank
            ),
        }
    }

    /// The connected side, or why there is none.
    fn ready(&mut self) -> PluginResult<&mut Side> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        self.side
            .as_mut()
            .ok_or_else(|| PluginError::invalid("shm connection is not connected yet"))
    }

    fn connect(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if self.side.is_some() {
            return Ok(ConnectState::Done);
        }
        if self.ctx.host.aborted() {
            return Err(PluginError::remote(format!(
                "{}: communicator aborted during connect",
                self.what()
            )));
        }
        match self.dir {
            Direction::Send => self.connect_sender(blob),
            Direction::Recv => self.connect_receiver(blob),
        }
    }

    fn connect_sender(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        let info = RecvInfo::parse(blob)?;
        let name = info.name()?;
        let layout = Layout::with_nreg(
            info.nslots as usize,
            info.chunk as usize,
            info.nreg as usize,
        )?;
        if layout.total as u64 != info.seg_bytes {
            return Err(PluginError::invalid(format!(
                "shm connect: the receiver's blob announces {} bytes but its geometry needs {}",
                info.seg_bytes, layout.total
            )));
        }
        let seg = Segment::open(name, layout).map_err(|e| {
            PluginError::io(
                format!(
                    "shm connect to rank {}: cannot map segment {name}",
                    self.peer.rank
                ),
                e,
            )
        })?;
        if !seg.header().matches(&layout) {
            return Err(PluginError::invalid(format!(
                "shm connect: segment {name} does not match the receiver's blob"
            )));
        }
        seg.header()
            .info
            .0
            .sender_attached
            .store(self.me_pid.max(1) as u64, Ordering::Release);
        // Unlink from this side too: whoever is first wins, so the name is gone
        // even if the receiver never comes back to `connect`.
        let _ = unlink_name(name);
        self.peer.pid = info.pid;
        let cfg = &self.ctx.cfg;
        self.side = Some(Side::Send(SendSide::new(
            self.peer,
            cfg.single_copy,
            cfg.single_copy_min,
            self.ctx.copier,
        )));
        self.seg = Some(seg);
        self.ctx.host.debug(format!(
            "{}: connected ({} slots × {} B)",
            self.what(),
            layout.nslots,
            layout.chunk
        ));
        Ok(ConnectState::Done)
    }

    fn connect_receiver(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        let info = SendInfo::parse(blob)?;
        self.peer.pid = info.pid;
        let what = self.what();
        let seg = self
            .seg
            .as_mut()
            .ok_or_else(|| PluginError::internal("shm receiver lost its segment"))?;
        if seg.header().info.0.sender_attached.load(Ordering::Acquire) == 0 {
            if self.watch.check_due() && !self.peer.alive() {
                return Err(PluginError::remote(format!(
                    "peer rank {} (pid {}) exited before attaching to {what}",
                    self.peer.rank, self.peer.pid
                )));
            }
            return Ok(ConnectState::InProgress);
        }
        seg.unlink().map_err(|e| {
            PluginError::io(format!("shm: cannot unlink segment {}", seg.name()), e)
        })?;
        let cfg = &self.ctx.cfg;
        self.side = Some(Side::Recv(RecvSide::new(
            self.me_rank,
            self.peer,
            cfg.single_copy,
            cfg.single_copy_unregistered,
            cfg.single_copy_min,
        )));
        self.watch = Watchdog::default();
        self.ctx.host.debug(format!("{what}: connected"));
        Ok(ConnectState::Done)
    }

    /// The header word in which this end reports its state to the peer.
    fn own_state(&self) -> Option<&AtomicU64> {
        let info = &self.seg.as_ref()?.header().info.0;
        Some(match self.dir {
            Direction::Send => &info.sender_state,
            Direction::Recv => &info.receiver_state,
        })
    }

    fn peer_state(&self) -> u64 {
        let Some(seg) = &self.seg else {
            return STATE_CLOSED;
        };
        let info = &seg.header().info.0;
        match self.dir {
            Direction::Send => info.receiver_state.load(Ordering::Acquire),
            Direction::Recv => info.sender_state.load(Ordering::Acquire),
        }
    }

    /// One round of progress; failures end up in the requests' results.
    fn progress(&mut self) {
        if self.broken.is_some() {
            return;
        }
        if self.ctx.host.aborted() {
            let e = PluginError::remote(format!("{}: communicator aborted", self.what()));
            self.fail(e);
            return;
        }
        let (Some(seg), Some(side)) = (self.seg.as_ref(), self.side.as_mut()) else {
            return;
        };
        let result = side.progress(seg);
        if let Side::Send(s) = side {
            if let Some(msg) = s.take_fallback() {
                self.ctx.log_fallback(&msg);
            }
        }
        let pending = side.pending();
        match result {
            Err(e) => self.fail(e),
            Ok(true) => self.watch.progressed(),
            Ok(false) if pending == 0 => self.watch.progressed(),
            Ok(false) => {
                if self.watch.check_due() {
                    self.check_peer(pending);
                }
            }
        }
    }

    /// Idle with requests pending: fail them if the peer is gone.
    fn check_peer(&mut self, pending: u64) {
        let state = self.peer_state();
        if state == STATE_OPEN && self.peer.alive() {
            return;
        }
        let (rank, pid, what) = (self.peer.rank, self.peer.pid, self.what());
        let reason = match state {
            STATE_OPEN => format!(
                "peer rank {rank} (pid {pid}) exited while {pending} request(s) were pending on {what}"
            ),
            STATE_CLOSED => {
                format!("peer rank {rank} closed {what} while {pending} request(s) were pending here")
            }
            _ => format!("peer rank {rank} reported a failure on {what}"),
        };
        // The peer may have published its last bytes right before leaving.
        let (Some(seg), Some(side)) = (self.seg.as_ref(), self.side.as_mut()) else {
            return;
        };
        match side.progress(seg) {
            Ok(true) => self.watch.progressed(),
            Ok(false) => self.fail(PluginError::remote(reason)),
            Err(e) => self.fail(e),
        }
    }

    /// The connection is unusable: fail what is pending and tell the peer.
    fn fail(&mut self, e: PluginError) {
        if let Some(side) = &mut self.side {
            side.fail_all(&e);
        }
        if let Some(state) = self.own_state() {
            state.store(STATE_FAILED, Ordering::Release);
        }
        self.broken = Some(e);
    }

    fn take(&mut self, seq: u64) -> PluginResult<Option<usize>> {
        match &mut self.side {
            Some(side) => side.take(seq),
            None => Err(self
                .broken
                .clone()
                .unwrap_or_else(|| PluginError::invalid("shm connection is not connected"))),
        }
    }

    fn abandon(&mut self, seq: u64) -> bool {
        self.side.as_mut().is_some_and(|s| s.abandon(seq))
    }

    /// Free: report to the peer, cancel what is pending, unmap and unlink.
    fn close(&mut self) {
        let pending = self.side.as_mut().map_or(0, |s| s.pending());
        let state = if pending > 0 || self.broken.is_some() {
            STATE_FAILED
        } else {
            STATE_CLOSED
        };
        if let Some(own) = self.own_state() {
            own.store(state, Ordering::Release);
        }
        if let Some(side) = &mut self.side {
            side.fail_all(&PluginError::invalid(
                "shm connection freed with the request outstanding",
            ));
        }
        self.broken
            .get_or_insert_with(|| PluginError::invalid("shm connection was freed"));
        self.side = None;
        if let Some(seg) = self.seg.take() {
            self.ctx
                .host
                .debug(format!("{}: freed segment {}", self.what(), seg.name()));
            drop(seg);
        }
    }
}
