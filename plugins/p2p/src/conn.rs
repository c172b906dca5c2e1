//! One end of a p2p connection: setup, connect, posting, testing, watching
//! the peer, and teardown.
//!
//! Lifecycle: the receiving end allocates the FIFO in its GPU memory and
//! creates the shared segment at `setup`, and describes both in its blob (the
//! FIFO's IPC handle, the segment's name). The sending end maps the segment,
//! opens the FIFO's handle in its own process at `connect` ("the peer opens
//! the handle") and raises `sender_attached`; the receiving end's `connect`
//! reports `InProgress` until it sees that flag. Both ends then unlink the
//! segment's name (whoever is first), so nothing stays in /dev/shm even if a
//! process is killed afterwards.
//!
//! Every hook binds the connection's device context on the calling thread
//! first (the core's progress thread calls `test`). The state sits behind an
//! `Arc<Mutex<…>>` shared with the requests, because `test` gets only the
//! request; the core serializes calls per connection, so the lock is
//! uncontended (except by `deregister` forwarding revocations).

use crate::backend::{Device, Located};
use crate::blob::{RecvInfo, SendInfo, NAME_PREFIX, RECV_MAGIC, SEND_MAGIC};
use crate::ctx::{sender_gone, Ctx};
use crate::ipc_cache::Mapping;
use crate::layout::{Layout, STATE_CLOSED, STATE_FAILED, STATE_OPEN};
use crate::proc::Peer;
use crate::recv::{Offerer, RecvOp, RecvSide};
use crate::regslot::Target;
use crate::segment::{unlink_name, Segment, RECEIVER_BYTE, SENDER_BYTE};
use crate::send::{SendOp, SendParams, SendSide};
use crate::stats::ConnStats;
use crate::watchdog::Watchdog;
use crate::Direct;
use ferrocx_sdk::{Blob, ConnReq, ConnectState, Direction, PluginError, PluginResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Makes segment names unique within the process (with the pid, across processes).
static SEGMENT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Attempts at finding a free segment name before giving up.
const NAME_ATTEMPTS: usize = 64;

/// One end of a connection (the plugin's `Conn`).
pub struct P2pConn {
    core: Arc<Mutex<ConnCore>>,
}

/// A posted send or receive (the plugin's `Request`).
pub struct P2pRequest {
    core: Arc<Mutex<ConnCore>>,
    seq: u64,
}

enum Side {
    Send(SendSide),
    Recv(RecvSide),
}

/// The state of one end, shared by the connection handle and its requests.
pub struct ConnCore {
    ctx: Arc<Ctx>,
    dir: Direction,
    me_rank: i32,
    me_pid: i32,
    peer: Peer,
    conn_id: u64,
    dev: Arc<dyn Device>,
    seg: Option<Segment>,
    /// Receiver: the FIFO in this process's GPU memory.
    fifo: Option<u64>,
    /// Present once connected.
    side: Option<Side>,
    /// Set when the connection failed or was freed: every later call reports it.
    broken: Option<PluginError>,
    watch: Watchdog,
}

fn lock(core: &Mutex<ConnCore>) -> PluginResult<MutexGuard<'_, ConnCore>> {
    core.lock()
        .map_err(|_| PluginError::internal("p2p connection state was poisoned by an earlier panic"))
}

impl P2pConn {
    /// Create this end of the connection described by `req` and its blob for the peer.
    pub(crate) fn setup(ctx: &Arc<Ctx>, req: &ConnReq, out: &mut Blob) -> PluginResult<Self> {
        let (me, peer) = (req.me(), req.peer());
        if me.cuda_device < 0 {
            return Err(PluginError::invalid(format!(
                "p2p setup with rank {}: this rank ({}) has no GPU",
                peer.rank, me.rank
            )));
        }
        ctx.reap(false);
        let dev = ctx.backend.device(me.cuda_device)?;
        let _bound = dev.bind()?;
        let mut core = ConnCore {
            ctx: ctx.clone(),
            dir: req.direction,
            me_rank: me.rank,
            me_pid: me.pid,
            peer: Peer {
                rank: peer.rank,
                pid: peer.pid,
            },
            conn_id: req.raw.conn_id,
            dev: dev.clone(),
            seg: None,
            fifo: None,
            side: None,
            broken: None,
            watch: Watchdog::default(),
        };
        match req.direction {
            Direction::Send => out.write(&SendInfo {
                magic: SEND_MAGIC,
                conn_id: req.raw.conn_id,
                token: ctx.token,
                pid: me.pid,
                pci: me.cuda_pci,
            })?,
            Direction::Recv => {
                let layout = Layout::new(ctx.cfg.nslots, ctx.cfg.chunk_size)?;
                let (fifo, handle) = dev.alloc(layout.fifo_bytes()).map_err(|e| {
                    PluginError::new(
                        e.code(),
                        format!(
                            "p2p setup of the receive FIFO from rank {}: {}",
                            peer.rank,
                            e.message()
                        ),
                    )
                })?;
                let seg = match create_segment(req.raw.conn_id, layout, fifo) {
                    Ok(s) => s,
                    Err(e) => {
                        dev.free(fifo);
                        return Err(e);
                    }
                };
                let info = RecvInfo {
                    magic: RECV_MAGIC,
                    conn_id: req.raw.conn_id,
                    token: ctx.token,
                    seg_bytes: layout.total as u64,
                    chunk: layout.chunk as u64,
                    pid: me.pid,
                    pci: me.cuda_pci,
                    nslots: layout.nslots as u32,
                    nreg: layout.nreg as u32,
                    nrevoke: layout.nrevoke as u32,
                    name_len: 0,
                    name: [0; crate::blob::NAME_BYTES],
                    fifo: handle.0,
                };
                ctx.host.debug(format!(
                    "p2p: rank {} allocated a FIFO of {} × {} B on GPU {} and segment {} for messages from rank {}",
                    me.rank,
                    layout.nslots,
                    layout.chunk,
                    dev.ordinal(),
                    seg.region().name(),
                    peer.rank
                ));
                let name = seg.region().name().to_owned();
                core.seg = Some(seg);
                core.fifo = Some(fifo);
                // From here on, an error drops the connection, which frees the FIFO.
                let conn = P2pConn {
                    core: Arc::new(Mutex::new(core)),
                };
                let mut info = info;
                info.set_name(&name)?;
                out.write(&info)?;
                ctx.add_receiver(&conn.core);
                return Ok(conn);
            }
        }
        Ok(P2pConn {
            core: Arc::new(Mutex::new(core)),
        })
    }

    /// Finish the connection with the peer's blob.
    pub(crate) fn connect(&mut self, peer: &Blob) -> PluginResult<ConnectState> {
        let mut core = lock(&self.core)?;
        core.connect(peer).map_err(|e| core.name_peer(e))
    }

    /// Post a send of `len` bytes at `src`, and start it right away.
    pub(crate) fn post_send(&mut self, op: SendOp) -> PluginResult<Option<P2pRequest>> {
        let mut core = lock(&self.core)?;
        let _bound = core.dev.bind()?;
        let seq = match core.ready() {
            Ok(Side::Send(s)) => s.ops().post(op),
            Ok(Side::Recv(_)) => {
                return Err(core.name_peer(PluginError::invalid(
                    "isend on the receiving end of a p2p connection",
                )))
            }
            Err(e) => return Err(core.name_peer(e)),
        };
        core.progress();
        Ok(seq.map(|seq| P2pRequest {
            core: self.core.clone(),
            seq,
        }))
    }

    /// Post a receive, and publish where its data may go right away: a sender
    /// waiting for this offer can start copying without waiting for our next `test`.
    pub(crate) fn post_recv(&mut self, op: RecvOp) -> PluginResult<Option<P2pRequest>> {
        let mut core = lock(&self.core)?;
        let _bound = core.dev.bind()?;
        let seq = match core.ready() {
            Ok(Side::Recv(r)) => r.ops().post(op),
            Ok(Side::Send(_)) => {
                return Err(core.name_peer(PluginError::invalid(
                    "irecv on the sending end of a p2p connection",
                )))
            }
            Err(e) => return Err(core.name_peer(e)),
        };
        core.progress();
        Ok(seq.map(|seq| P2pRequest {
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
        core.seg.as_ref().map(|s| s.region().name().to_owned())
    }
}

impl Drop for P2pConn {
    /// Freeing and dropping are the same: tell the peer, wait for our copies,
    /// close mappings, release the FIFO (or keep it until the sender let go).
    fn drop(&mut self) {
        self.core
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .close();
    }
}

impl P2pRequest {
    /// One round of progress on the request's connection; `Some(nbytes)` once this request is done.
    pub(crate) fn test(&mut self) -> PluginResult<Option<usize>> {
        let mut core = lock(&self.core)?;
        let _bound = core.dev.bind()?;
        core.progress();
        core.take(self.seq)
    }
}

impl Drop for P2pRequest {
    fn drop(&mut self) {
        let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        if core.abandon(self.seq) {
            // Its buffer may be gone; later messages would break the FIFO's order.
            core.fail(PluginError::invalid(
                "a p2p request was dropped before it completed; the connection is unusable",
            ));
        }
    }
}

fn create_segment(conn_id: u64, layout: Layout, fifo: u64) -> PluginResult<Segment> {
    let pid = std::process::id();
    for _ in 0..NAME_ATTEMPTS {
        let n = SEGMENT_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NAME_PREFIX}{pid}-{conn_id:x}-{n:x}");
        match Segment::create(&name, layout) {
            Ok(seg) => {
                seg.header().init(&layout, pid, fifo);
                return Ok(seg);
            }
            // A leftover of an earlier process with our pid: take the next name.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => {
                return Err(PluginError::io(
                    format!("p2p: cannot create segment {name} ({} bytes)", layout.total),
                    e,
                ))
            }
        }
    }
    Err(PluginError::internal(format!(
        "p2p: no free segment name after {NAME_ATTEMPTS} attempts"
    )))
}

/// Decides direct-write offers for a receiving connection.
struct Offers<'a> {
    ctx: &'a Ctx,
    dev: &'a dyn Device,
}

impl Offerer for Offers<'_> {
    fn target(&mut self, op: &RecvOp) -> Option<Target> {
        let cfg = &self.ctx.cfg;
        if cfg.direct == Direct::Off || op.len < cfg.direct_min || op.len == 0 {
            return None;
        }
        if let Some(r) = op.reg {
            return Some(Target {
                addr: op.dst,
                handle: r.handle,
                offset: op.dst - r.base,
                alloc_size: r.size,
            });
        }
        if cfg.direct != Direct::Any {
            return None;
        }
        let loc: Located = self.ctx.backend.locate(op.dst)?;
        if !loc.ipc || !loc.covers(op.dst, op.len) || loc.device != self.dev.ordinal() {
            return None;
        }
        match self.ctx.export(self.dev, &loc, false) {
            Ok(handle) => Some(Target {
                addr: op.dst,
                handle,
                offset: op.dst - loc.base,
                alloc_size: loc.size,
            }),
            Err(e) => {
                self.ctx.host.debug(format!(
                    "p2p: receive buffer at {:#x} not offered for direct writes: {}",
                    op.dst,
                    e.message()
                ));
                None
            }
        }
    }

    fn revocations_since(&mut self, cursor: u64) -> crate::revoke::Pending {
        self.ctx.revocations_since(cursor)
    }
}

impl ConnCore {
    fn what(&self) -> String {
        match self.dir {
            Direction::Send => format!(
                "p2p connection {:#x} rank {} → rank {}",
                self.conn_id, self.me_rank, self.peer.rank
            ),
            Direction::Recv => format!(
                "p2p connection {:#x} rank {} ← rank {}",
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
            .ok_or_else(|| PluginError::invalid("p2p connection is not connected yet"))
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
        let dev = self.dev.clone();
        let _bound = dev.bind()?;
        match self.dir {
            Direction::Send => self.connect_sender(blob),
            Direction::Recv => self.connect_receiver(blob),
        }
    }

    fn connect_sender(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        let info = RecvInfo::parse(blob, self.conn_id)?;
        let name = info.name()?;
        let layout = Layout::with_counts(
            info.nslots as usize,
            info.chunk as usize,
            info.nreg as usize,
            info.nrevoke as usize,
        )?;
        if layout.total as u64 != info.seg_bytes {
            return Err(PluginError::invalid(format!(
                "p2p connect: the receiver's blob announces {} bytes but its geometry needs {}",
                info.seg_bytes, layout.total
            )));
        }
        let rank = self.peer.rank;
        let seg = Segment::open(name, layout).map_err(|e| {
            PluginError::io(
                format!("p2p connect to rank {rank}: cannot map segment {name}"),
                e,
            )
        })?;
        if !seg.header().matches(&layout) {
            return Err(PluginError::invalid(format!(
                "p2p connect: segment {name} does not match the receiver's blob"
            )));
        }
        self.peer.pid = info.pid;
        let cfg = &self.ctx.cfg;
        let same_process = cfg.same_process_shortcut && info.token == self.ctx.token;
        let (fifo, fifo_map) = if same_process {
            (seg.header().info.0.fifo_addr.load(Ordering::Relaxed), None)
        } else {
            let m = Mapping::open(&self.dev, &info.fifo_handle()).map_err(|e| {
                PluginError::new(
                    e.code(),
                    format!(
                        "p2p connect to rank {rank}: cannot open the FIFO in its GPU memory ({} backend, GPU {} → peer GPU at PCI {}): {} (FERROCX_TRANSPORTS=^p2p avoids this transport)",
                        self.ctx.backend.kind(),
                        self.dev.ordinal(),
                        crate::backend::cuda::pci_name(info.pci),
                        e.message()
                    ),
                )
            })?;
            (m.addr(), Some(m))
        };
        let engine = self.dev.engine()?;
        seg.header()
            .info
            .0
            .sender_attached
            .store(self.me_pid.max(1) as u64, Ordering::Release);
        // Unlink from this side too: whoever is first wins, so the name is gone
        // even if the receiver never comes back to `connect`.
        let _ = unlink_name(name);
        self.side = Some(Side::Send(SendSide::new(
            self.dev.clone(),
            engine,
            self.peer,
            SendParams {
                fifo,
                fifo_map,
                direct: cfg.direct != Direct::Off,
                direct_min: cfg.direct_min,
                same_process,
                ipc_cache: cfg.ipc_cache,
            },
        )));
        self.seg = Some(seg);
        self.ctx.host.debug(format!(
            "{}: connected ({} slots × {} B{})",
            self.what(),
            layout.nslots,
            layout.chunk,
            if same_process { ", same process" } else { "" }
        ));
        Ok(ConnectState::Done)
    }

    fn connect_receiver(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        let info = SendInfo::parse(blob, self.conn_id)?;
        self.peer.pid = info.pid;
        let what = self.what();
        let seg = self
            .seg
            .as_mut()
            .ok_or_else(|| PluginError::internal("p2p receiver lost its segment"))?;
        if seg.header().info.0.sender_attached.load(Ordering::Acquire) == 0 {
            if self.watch.check_due() && !self.peer.alive() {
                return Err(PluginError::remote(format!(
                    "peer rank {} (pid {}) exited before attaching to {what}",
                    self.peer.rank, self.peer.pid
                )));
            }
            return Ok(ConnectState::InProgress);
        }
        let name = seg.region().name().to_owned();
        seg.region_mut()
            .unlink()
            .map_err(|e| PluginError::io(format!("p2p: cannot unlink segment {name}"), e))?;
        let engine = self.dev.engine()?;
        let fifo = self
            .fifo
            .ok_or_else(|| PluginError::internal("p2p receiver lost its FIFO"))?;
        self.side = Some(Side::Recv(RecvSide::new(
            engine,
            fifo,
            self.me_rank,
            self.peer,
            self.ctx.revoke_cursor(),
        )));
        self.watch = Watchdog::default();
        self.ctx.host.debug(format!("{what}: connected"));
        Ok(ConnectState::Done)
    }

    /// Receiver: forward the context's new revocations into the segment.
    pub(crate) fn forward_revocations(&mut self) -> bool {
        let (Some(seg), Some(Side::Recv(r))) = (self.seg.as_ref(), self.side.as_mut()) else {
            return false;
        };
        let pending = self.ctx.revocations_since(r.revoke_cursor());
        r.forward(seg, pending)
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

    /// Whether the peer still holds its end: its lock on the segment, or
    /// (without OFD locks) its pid.
    fn peer_alive(&self) -> bool {
        let byte = match self.dir {
            Direction::Send => RECEIVER_BYTE,
            Direction::Recv => SENDER_BYTE,
        };
        match self.seg.as_ref().and_then(|s| s.region().lock_held(byte)) {
            Some(held) => held,
            None => self.peer.alive(),
        }
    }

    /// One round of side progress.
    fn side_progress(&mut self) -> PluginResult<bool> {
        let forwarded = self.forward_revocations();
        let (Some(seg), Some(side)) = (self.seg.as_ref(), self.side.as_mut()) else {
            return Ok(false);
        };
        let moved = match side {
            Side::Send(s) => {
                let r = s.progress(seg);
                if let Some(msg) = s.take_fallback() {
                    self.ctx.log_fallback(&msg);
                }
                r?
            }
            Side::Recv(r) => {
                let mut offers = Offers {
                    ctx: &self.ctx,
                    dev: self.dev.as_ref(),
                };
                r.progress(seg, &mut offers)?
            }
        };
        Ok(moved || forwarded)
    }

    fn pending(&mut self) -> u64 {
        match &mut self.side {
            Some(Side::Send(s)) => s.ops().pending(),
            Some(Side::Recv(r)) => r.ops().pending(),
            None => 0,
        }
    }

    /// One round of progress; failures end up in the requests' results.
    fn progress(&mut self) {
        if self.broken.is_some() || self.side.is_none() {
            return;
        }
        if self.ctx.host.aborted() {
            let e = PluginError::remote(format!("{}: communicator aborted", self.what()));
            self.fail(e);
            return;
        }
        let result = self.side_progress();
        let pending = self.pending();
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
        if state == STATE_OPEN && self.peer_alive() {
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
        match self.side_progress() {
            Ok(true) => self.watch.progressed(),
            Ok(false) => self.fail(PluginError::remote(reason)),
            Err(e) => self.fail(e),
        }
    }

    /// The connection is unusable: fail what is pending and tell the peer.
    fn fail(&mut self, e: PluginError) {
        match &mut self.side {
            Some(Side::Send(s)) => s.fail_all(&e),
            Some(Side::Recv(r)) => r.fail_all(&e),
            None => {}
        }
        if let Some(state) = self.own_state() {
            state.store(STATE_FAILED, Ordering::Release);
        }
        self.broken = Some(e);
    }

    fn take(&mut self, seq: u64) -> PluginResult<Option<usize>> {
        let r = match &mut self.side {
            Some(Side::Send(s)) => s.ops().take(seq),
            Some(Side::Recv(r)) => r.ops().take(seq),
            None => Err(self
                .broken
                .clone()
                .unwrap_or_else(|| PluginError::invalid("p2p connection is not connected"))),
        };
        r.map_err(|e| self.name_peer(e))
    }

    /// Make sure an error says which peer it is about.
    fn name_peer(&self, e: PluginError) -> PluginError {
        if e.message().contains(&format!("rank {}", self.peer.rank)) {
            return e;
        }
        PluginError::new(
            e.code(),
            format!("{} (peer rank {})", e.message(), self.peer.rank),
        )
    }

    fn abandon(&mut self, seq: u64) -> bool {
        match &mut self.side {
            Some(Side::Send(s)) => s.ops().abandon(seq),
            Some(Side::Recv(r)) => r.ops().abandon(seq),
            None => false,
        }
    }

    /// Free: wait (bounded) for our copies, close mappings, report to the peer,
    /// release the FIFO or keep it until the sender let go, unmap, unlink.
    fn close(&mut self) {
        let dev = self.dev.clone();
        let _bound = dev.bind();
        let pending = self.pending();
        let state = if pending > 0 || self.broken.is_some() {
            STATE_FAILED
        } else {
            STATE_CLOSED
        };
        let freed = PluginError::invalid(format!(
            "{} was freed with the request outstanding",
            self.what()
        ));
        let host = self.ctx.host;
        let deadline = Instant::now() + host.timeout();
        let stop = move || host.aborted();
        let mut fifo_safe = true;
        match self.side.take() {
            Some(Side::Send(mut s)) => {
                s.fail_all(&freed);
                if !s.shutdown(deadline, &stop) {
                    host.warn(format!(
                        "{}: copies still running after {:?}; their mappings stay open",
                        self.what(),
                        host.timeout()
                    ));
                }
                // Mappings are closed (dropping `s`) before the state word says so.
                drop(s);
            }
            Some(Side::Recv(mut r)) => {
                r.fail_all(&freed);
                fifo_safe = r.shutdown(deadline, &stop);
                if !fifo_safe {
                    host.warn(format!(
                        "{}: copies out of the FIFO still running after {:?}; the FIFO is leaked",
                        self.what(),
                        host.timeout()
                    ));
                }
            }
            None => {}
        }
        if let Some(own) = self.own_state() {
            own.store(state, Ordering::Release);
        }
        if self.broken.is_none() {
            self.broken = Some(PluginError::invalid(format!("{} was freed", self.what())));
        }
        let seg = self.seg.take();
        if let Some(fifo) = self.fifo.take() {
            match seg {
                _ if !fifo_safe => {}
                Some(seg) if !sender_gone(&seg, self.peer.pid) => {
                    self.ctx.host.debug(format!(
                        "{}: the sender still maps the FIFO; freeing it once it lets go",
                        self.what()
                    ));
                    self.ctx.bury(dev.clone(), fifo, seg, self.peer.pid);
                }
                _ => dev.free(fifo),
            }
        }
    }
}
