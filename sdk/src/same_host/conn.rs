//! One end of a same-host connection: setup, connect, posting, testing,
//! watching the peer, and teardown.
//!
//! Lifecycle: the receiving end creates the shared segment at `setup` (and,
//! for a device back end, allocates the FIFO in its GPU memory) and describes
//! both in its blob (the segment's name, the FIFO's IPC handle). The sending
//! end maps the segment and opens the FIFO in its own process at `connect`
//! ("the peer opens the handle") and raises `sender_attached`; the receiving
//! end's `connect` reports `InProgress` until it sees that flag. Both ends
//! then unlink the segment's name (whoever is first), so nothing stays in
//! /dev/shm even if a process is killed afterwards.
//!
//! Every hook binds the connection's device first (the core's progress
//! thread calls `test`). The state sits behind an `Arc<Mutex<…>>` shared with
//! the requests, because `test` gets only the request; the core serializes
//! calls per connection, so the lock is uncontended (except by `deregister`
//! forwarding revocations).
//!
//! A peer that exits or is killed makes pending requests fail with an error
//! naming its rank and pid within about 50 ms of no progress: each end holds
//! a liveness lock on one byte of the segment, which the kernel drops when
//! the process dies (pids where the system has no OFD locks).

use super::backend::{Backend, FifoPlace, SenderEnd};
use super::blob::{magic, RecvInfo, SendInfo, NAME_BYTES};
use super::ctx::{sender_gone, Ctx};
use super::layout::{owner_tag, Creator, Layout, STATE_CLOSED, STATE_FAILED, STATE_OPEN};
use super::ops::{RecvOp, SendOp};
use super::recv::{Offers, RecvSide};
use super::regslot::{RegSlot, NREG};
use super::revoke::{Forwarder, NREVOKE};
use super::segment::Segment;
use super::send::SendSide;
use super::stats::ConnStats;
use super::watchdog::Watchdog;
use crate::blob::Blob;
use crate::device::IpcHandle;
use crate::env::ZeroCopy;
use crate::error::{PluginError, PluginResult};
use crate::proc::Peer;
use crate::region::unlink_name;
use crate::transport::{ConnReq, ConnectState, Direction};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

/// One end of a connection (the transport's `Conn`).
pub struct Conn<B: Backend> {
    core: Arc<Mutex<ConnCore<B>>>,
}

/// A posted send or receive (the transport's `Request`).
pub struct Request<B: Backend> {
    core: Arc<Mutex<ConnCore<B>>>,
    seq: u64,
}

enum Side<B: Backend> {
    Send(SendSide<B>),
    Recv(RecvSide<B>),
}

/// The state of one end, shared by the connection handle and its requests.
pub struct ConnCore<B: Backend> {
    ctx: Arc<Ctx<B>>,
    dir: Direction,
    me_rank: i32,
    me_pid: i32,
    peer: Peer,
    conn_id: u64,
    dev: B::Device,
    seg: Option<Segment<B::Target>>,
    /// Receiver of a device back end: the FIFO in this process's GPU memory.
    fifo: Option<u64>,
    /// Present once connected.
    side: Option<Side<B>>,
    /// Set when the connection failed or was freed: every later call reports it.
    broken: Option<PluginError>,
    watch: Watchdog,
    /// Receiver: the identity token whose address the segment header
    /// publishes (boxed so it never moves while the connection lives).
    probe: Option<Box<u64>>,
}

fn lock<B: Backend>(core: &Mutex<ConnCore<B>>) -> PluginResult<MutexGuard<'_, ConnCore<B>>> {
    core.lock().map_err(|_| {
        PluginError::internal(format!(
            "{} connection state was poisoned by an earlier panic",
            B::NAME
        ))
    })
}

/// A value another process cannot guess by accident.
fn random_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map_or(0, |d| d.as_nanos()));
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish() | 1
}

impl<B: Backend> Conn<B> {
    /// Create this end of the connection described by `req` and its blob for the peer.
    pub(crate) fn setup(ctx: &Arc<Ctx<B>>, req: &ConnReq, out: &mut Blob) -> PluginResult<Self> {
        let (me, peer) = (req.me(), req.peer());
        ctx.reap(false);
        let dev = ctx.backend.device(me, peer)?;
        let _bound = B::bind(&dev)?;
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
            probe: None,
        };
        if req.direction == Direction::Send {
            out.write(&SendInfo {
                magic: magic(B::NAME, b"TX"),
                conn_id: req.raw.conn_id,
                token: ctx.token,
                pid: me.pid,
                pci: me.cuda_pci,
            })?;
            return Ok(Conn {
                core: Arc::new(Mutex::new(core)),
            });
        }
        let cfg = ctx.backend.config();
        let layout = Layout::new(
            cfg.nslots,
            cfg.chunk_size,
            NREG,
            std::mem::size_of::<RegSlot<B::Target>>(),
            if B::REVOCATIONS { NREVOKE } else { 0 },
            B::FIFO == FifoPlace::Segment,
        )?;
        let (fifo, handle) = match B::FIFO {
            FifoPlace::Segment => (None, IpcHandle::NONE),
            FifoPlace::Allocated => {
                let (addr, h) = ctx
                    .backend
                    .alloc_fifo(&dev, layout.fifo_bytes())
                    .map_err(|e| {
                        PluginError::new(
                            e.code(),
                            format!(
                                "{} setup of the receive FIFO from rank {}: {} (lower {} or {})",
                                B::NAME,
                                peer.rank,
                                e.message(),
                                cfg.knobs.var("NSLOTS"),
                                cfg.knobs.var("CHUNK_SIZE")
                            ),
                        )
                    })?;
                (Some(addr), h)
            }
        };
        let hint = format!(
            "lower {} / {}",
            cfg.knobs.var("NSLOTS"),
            cfg.knobs.var("CHUNK_SIZE")
        );
        let seg = match Segment::create_unique(B::NAME, req.raw.conn_id, layout, &hint) {
            Ok(s) => s,
            Err(e) => {
                if let Some(addr) = fifo {
                    B::free_fifo(&dev, addr);
                }
                return Err(e);
            }
        };
        let probe = core.probe.insert(Box::new(random_token()));
        let fifo_addr = fifo.or(seg.data_addr()).unwrap_or(0);
        seg.header().init(
            &layout,
            &Creator {
                owner: owner_tag(B::NAME),
                pid: std::process::id(),
                fifo_addr,
                probe: (&**probe as *const u64 as u64, **probe),
            },
        );
        let mut info = RecvInfo {
            magic: magic(B::NAME, b"RX"),
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
            name: [0; NAME_BYTES],
            fifo: handle.0,
        };
        info.set_name(seg.region().name())?;
        ctx.host.debug(format!(
            "{}: rank {} created segment {} ({} bytes) with a FIFO of {} × {} B {} for messages from rank {}",
            B::NAME,
            me.rank,
            seg.region().name(),
            layout.total,
            layout.nslots,
            layout.chunk,
            if fifo.is_some() { "in device memory" } else { "in the segment" },
            peer.rank
        ));
        core.seg = Some(seg);
        core.fifo = fifo;
        // From here on, an error drops the connection, which frees the FIFO.
        let conn = Conn {
            core: Arc::new(Mutex::new(core)),
        };
        out.write(&info)?;
        let weak: Weak<dyn Forwarder> = Arc::downgrade(&conn.core) as Weak<Mutex<ConnCore<B>>>;
        ctx.add_receiver(weak);
        Ok(conn)
    }

    /// Finish the connection with the peer's blob.
    pub(crate) fn connect(&mut self, peer: &Blob) -> PluginResult<ConnectState> {
        let mut core = lock(&self.core)?;
        core.connect(peer).map_err(|e| core.name_peer(e))
    }

    /// Post a send.
    pub(crate) fn post_send(&mut self, op: SendOp) -> PluginResult<Option<Request<B>>> {
        let mut core = lock(&self.core)?;
        let _bound = B::bind(&core.dev)?;
        let seq = match core.ready() {
            Ok(Side::Send(s)) => s.ops().post(op),
            Ok(Side::Recv(_)) => {
                return Err(core.name_peer(PluginError::invalid(format!(
                    "isend on the receiving end of a {} connection",
                    B::NAME
                ))))
            }
            Err(e) => return Err(core.name_peer(e)),
        };
        if B::PROGRESS_AT_POST {
            core.progress();
        }
        Ok(seq.map(|seq| Request {
            core: self.core.clone(),
            seq,
        }))
    }

    /// Post a receive, and publish where its data may go right away: a sender
    /// waiting for this offer can start copying without waiting for our next `test`.
    pub(crate) fn post_recv(&mut self, op: RecvOp<B::Reg>) -> PluginResult<Option<Request<B>>> {
        let mut core = lock(&self.core)?;
        let _bound = B::bind(&core.dev)?;
        let seq = match core.ready() {
            Ok(Side::Recv(r)) => r.ops().post(op),
            Ok(Side::Send(_)) => {
                return Err(core.name_peer(PluginError::invalid(format!(
                    "irecv on the sending end of a {} connection",
                    B::NAME
                ))))
            }
            Err(e) => return Err(core.name_peer(e)),
        };
        if B::PROGRESS_AT_POST {
            core.progress();
        } else {
            core.publish();
        }
        Ok(seq.map(|seq| Request {
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

impl<B: Backend> Drop for Conn<B> {
    /// Freeing and dropping are the same: tell the peer, wait for our copies,
    /// close mappings, release the FIFO (or keep it until the sender let go).
    fn drop(&mut self) {
        self.core
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .close();
    }
}

impl<B: Backend> Request<B> {
    /// One round of progress on the request's connection; `Some(nbytes)` once this request is done.
    pub(crate) fn test(&mut self) -> PluginResult<Option<usize>> {
        let mut core = lock(&self.core)?;
        let _bound = B::bind(&core.dev)?;
        core.progress();
        core.take(self.seq)
    }
}

impl<B: Backend> Drop for Request<B> {
    fn drop(&mut self) {
        let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
        if core.abandon(self.seq) {
            // Its buffer may be gone; later messages would break the FIFO's order.
            core.fail(PluginError::invalid(format!(
                "a {} request was dropped before it completed; the connection is unusable",
                B::NAME
            )));
        }
    }
}

impl<B: Backend> Forwarder for Mutex<ConnCore<B>> {
    fn forward_revocations(&self) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forward_revocations();
    }
}

impl<B: Backend> ConnCore<B> {
    fn what(&self) -> String {
        let arrow = match self.dir {
            Direction::Send => "→",
            Direction::Recv => "←",
        };
        format!(
            "{} connection {:#x} rank {} {arrow} rank {}",
            B::NAME,
            self.conn_id,
            self.me_rank,
            self.peer.rank
        )
    }

    /// The connected side, or why there is none.
    fn ready(&mut self) -> PluginResult<&mut Side<B>> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        self.side.as_mut().ok_or_else(|| {
            PluginError::invalid(format!("{} connection is not connected yet", B::NAME))
        })
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
        let _bound = B::bind(&dev)?;
        match self.dir {
            Direction::Send => self.connect_sender(blob),
            Direction::Recv => self.connect_receiver(blob),
        }
    }

    fn connect_sender(&mut self, blob: &Blob) -> PluginResult<ConnectState> {
        let info = RecvInfo::parse(B::NAME, blob, self.conn_id)?;
        let name = info.name(B::NAME)?;
        let layout = Layout::new(
            info.nslots as usize,
            info.chunk as usize,
            info.nreg as usize,
            std::mem::size_of::<RegSlot<B::Target>>(),
            info.nrevoke as usize,
            B::FIFO == FifoPlace::Segment,
        )?;
        if layout.total as u64 != info.seg_bytes {
            return Err(PluginError::invalid(format!(
                "{} connect: the receiver's blob announces {} bytes but its geometry needs {}",
                B::NAME,
                info.seg_bytes,
                layout.total
            )));
        }
        let rank = self.peer.rank;
        let seg = Segment::open(name, layout).map_err(|e| {
            PluginError::io(
                format!(
                    "{} connect to rank {rank}: cannot map segment {name}",
                    B::NAME
                ),
                e,
            )
        })?;
        if !seg.header().matches(&layout, owner_tag(B::NAME)) {
            return Err(PluginError::invalid(format!(
                "{} connect: segment {name} does not match the receiver's blob",
                B::NAME
            )));
        }
        self.peer.pid = info.pid;
        let cfg = self.ctx.backend.config();
        let same_process = cfg.same_process_shortcut && info.token == self.ctx.token;
        let end = SenderEnd {
            peer: self.peer,
            same_process,
            info: &info,
            seg: &seg,
        };
        let (fifo, writer) = self.ctx.backend.writer(&self.dev, &end)?;
        let fifo = seg.data_addr().unwrap_or(fifo);
        let engine = B::engine(&self.dev)?;
        seg.header()
            .info
            .0
            .sender_attached
            .store(self.me_pid.max(1) as u64, Ordering::Release);
        // Unlink from this side too: whoever is first wins, so the name is gone
        // even if the receiver never comes back to `connect`.
        let _ = unlink_name(name);
        self.side = Some(Side::Send(SendSide::new(
            engine,
            writer,
            fifo,
            self.peer,
            cfg.direct != ZeroCopy::Off,
            cfg.direct_min,
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
        let info = SendInfo::parse(B::NAME, blob, self.conn_id)?;
        self.peer.pid = info.pid;
        let what = self.what();
        let seg = self.seg.as_mut().ok_or_else(|| {
            PluginError::internal(format!("{} receiver lost its segment", B::NAME))
        })?;
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
        seg.region_mut().unlink().map_err(|e| {
            PluginError::io(format!("{}: cannot unlink segment {name}", B::NAME), e)
        })?;
        let fifo = self
            .fifo
            .or(seg.data_addr())
            .ok_or_else(|| PluginError::internal(format!("{} receiver lost its FIFO", B::NAME)))?;
        let engine = B::engine(&self.dev)?;
        self.side = Some(Side::Recv(RecvSide::new(
            engine,
            fifo,
            self.me_rank,
            self.peer,
            self.ctx.revocations.cursor(),
        )));
        self.watch = Watchdog::default();
        self.ctx.host.debug(format!("{what}: connected"));
        Ok(ConnectState::Done)
    }

    /// Receiver: forward the context's new revocations into the segment.
    fn forward_revocations(&mut self) -> bool {
        if !B::REVOCATIONS {
            return false;
        }
        let (Some(seg), Some(Side::Recv(r))) = (self.seg.as_ref(), self.side.as_mut()) else {
            return false;
        };
        let pending = self.ctx.revocations.since(r.revoke_cursor());
        r.forward(seg, pending)
    }

    /// Receiver: publish the handshake slots of posted receives.
    fn publish(&mut self) {
        if let (Some(seg), Some(Side::Recv(r))) = (self.seg.as_ref(), self.side.as_mut()) {
            let offers = Offers {
                backend: &self.ctx.backend,
                revocations: &self.ctx.revocations,
                dev: &self.dev,
            };
            r.publish(seg, &offers);
        }
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
        let me_sender = self.dir == Direction::Send;
        match self.seg.as_ref().and_then(|s| s.peer_holds(me_sender)) {
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
                let offers = Offers {
                    backend: &self.ctx.backend,
                    revocations: &self.ctx.revocations,
                    dev: &self.dev,
                };
                r.progress(seg, &offers)?
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
            None => Err(self.broken.clone().unwrap_or_else(|| {
                PluginError::invalid(format!("{} connection is not connected", B::NAME))
            })),
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
        let _bound = B::bind(&dev);
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
        if self.dir == Direction::Send {
            if let Some(seg) = seg {
                B::after_unmap(&dev, Box::new(seg));
            }
            return;
        }
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
                _ => B::free_fifo(&dev, fifo),
            }
        }
    }
}
