//! One connection end: its control region, one QP per rail, and the data path.
//!
//! * **Receiver** (`irecv`): picks where the data goes — a bounce slot of its region
//!   for small unregistered buffers, else the buffer itself (registered through the
//!   cache, or the caller's registration) — and announces it in the sender's FIFO slot
//!   (address, length, remote key per rail) with an RDMA WRITE ([`FifoWriter`]). It
//!   keeps empty receives posted on every rail; a WRITE WITH IMM (the marker) consumes
//!   one, and its immediate (the sequence number) completes the receive after the
//!   record slot says how many bytes came.
//! * **Sender** (`isend`): waits for its FIFO slot (`Ok(None)` = not yet), then hands the
//!   message to its [`SendEngine`], which chunks it into RDMA WRITEs and the marker, and
//!   fails over / recovers as `rails.rs` describes. A message longer than the posted
//!   receive is announced by its marker alone (nothing is written) and fails that
//!   receive, naming both sizes; the send completes.
//!
//! All progress happens in `isend`/`irecv`/`test` under the connection's lock: poll both
//! CQs, follow the mailboxes (re-arm requests and acknowledgements), post what the
//! engines ask for, log failover and recovery.

use crate::blob::{self, ConnBlob, RailWire};
use crate::ctrl::{self, FifoSlot, Rearm, Record, BOUNCE_BYTES, DEPTH, RAILS};
use crate::device::PdRegistrar;
use crate::mr_cache::{Lease, MrCache, Use};
use crate::qp::{Qp, RemoteQp, RQ_DEPTH, SQ_DEPTH, WC_RECV_RDMA_WITH_IMM};
use crate::rails::{
    self, Action, Event, FifoWriter, MsgState, PathKey, RailAction, RailSet, RecvAction,
    SendEngine, WrId, WrKind,
};
use crate::region::Region;
use crate::Shared;
use ferrocx_sdk::failover::PathHealth;
use ferrocx_sdk::{Blob, ConnReq, ConnectState, Direction, PluginError, PluginResult};
use sideway::ibverbs::memory_region::MemoryRegion;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

type MrLease = Lease<Arc<MemoryRegion>>;

/// A registration made with `register`: one lease per device of the context.
pub struct IbMemHandle {
    pub(crate) leases: Vec<MrLease>,
    pub(crate) shared: Arc<Shared>,
}

impl IbMemHandle {
    fn keys(&self) -> ([u32; RAILS], [u32; RAILS]) {
        keys_of(&self.shared, &self.leases)
    }
}

/// (lkey, rkey) per rail from one lease per device.
fn keys_of(shared: &Shared, leases: &[MrLease]) -> ([u32; RAILS], [u32; RAILS]) {
    let (mut l, mut r) = ([0; RAILS], [0; RAILS]);
    for (i, spec) in shared.rails.iter().enumerate().take(RAILS) {
        l[i] = leases[spec.dev].mr.lkey();
        r[i] = leases[spec.dev].mr.rkey();
    }
    (l, r)
}

fn off_hello() -> usize {
    std::mem::offset_of!(ctrl::Ctrl, hello)
}

fn off_hello_src() -> usize {
    std::mem::offset_of!(ctrl::Ctrl, hello_src)
}

fn random_psn() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    (h.finish() & 0xff_ffff) as u32
}

struct RailQp {
    qp: Qp,
    /// Index of the device in the context.
    dev: usize,
    gid_index: u8,
    mtu: u8,
    local: RailWire,
    peer: Option<RailWire>,
    recvs: usize,
}

struct SendMsg {
    laddr: u64,
    len: u64,
    lkeys: [u32; RAILS],
    fifo: FifoSlot,
    leases: Vec<MrLease>,
}

struct RecvMsg {
    addr: u64,
    len: u64,
    bounce: bool,
    leases: Vec<MrLease>,
    done: Option<Result<usize, String>>,
}

enum Side {
    Send {
        engine: SendEngine<PathKey>,
        next: u64,
        msgs: BTreeMap<u64, SendMsg>,
        acked_gen: u64,
    },
    Recv {
        writer: FifoWriter<PathKey>,
        next: u64,
        msgs: BTreeMap<u64, RecvMsg>,
        rearm_gen: u64,
        /// The sender's hello arrived: its QPs accept writes.
        hello: bool,
    },
    /// Before `connect`.
    Unconnected,
}

pub(crate) struct Inner {
    shared: Arc<Shared>,
    dir: Direction,
    me: i32,
    peer: i32,
    conn_id: u64,
    region: Region,
    rails: Vec<RailQp>,
    peer_blob: Option<ConnBlob>,
    side: Side,
    broken: Option<String>,
}

/// One end of a connection (shared with its requests).
pub struct IbConn(Arc<Mutex<Inner>>);

/// An outstanding send or receive.
pub struct IbRequest {
    conn: Arc<Mutex<Inner>>,
    seq: u64,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl IbConn {
    /// Create this end: region, one QP per rail in INIT; describe it in `out`.
    pub fn setup(shared: Arc<Shared>, req: &ConnReq, out: &mut Blob) -> PluginResult<IbConn> {
        let region = Region::new(&shared.devices)?;
        let role = match req.direction {
            Direction::Send => blob::ROLE_SEND,
            Direction::Recv => blob::ROLE_RECV,
        };
        let mut b = ConnBlob::new(role, req.me().rank, req.raw.conn_id, region.addr(0));
        let mut rails = Vec::new();
        for (i, spec) in shared.rails.iter().enumerate() {
            let dev = &shared.devices[spec.dev];
            let attrs = dev.port(spec.port)?;
            let gid = dev.gid(spec.port, spec.gid_index)?;
            let qp = Qp::create(dev, spec.port)?;
            let mut w = RailWire::zeroed();
            w.qpn = qp.qpn();
            w.psn = random_psn();
            w.rkey = region.rkey(spec.dev);
            w.lid = attrs.lid;
            w.port = spec.port;
            w.link_layer = if attrs.ethernet {
                blob::LL_ETH
            } else {
                blob::LL_IB
            };
            w.gid = gid;
            w.mtu = attrs.mtu;
            w.gid_index = spec.gid_index;
            w.set_dev_name(&dev.name);
            b.rails[i] = w;
            rails.push(RailQp {
                qp,
                dev: spec.dev,
                gid_index: spec.gid_index,
                mtu: attrs.mtu,
                local: w,
                peer: None,
                recvs: 0,
            });
        }
        b.nrails = rails.len() as u8;
        b.encode(out)?;
        Ok(IbConn(Arc::new(Mutex::new(Inner {
            shared,
            dir: req.direction,
            me: req.me().rank,
            peer: req.peer().rank,
            conn_id: req.raw.conn_id,
            region,
            rails,
            peer_blob: None,
            side: Side::Unconnected,
            broken: None,
        }))))
    }

    /// Connect the rails to the peer's (rail i to rail i; extra rails on either side
    /// are dropped).
    pub fn connect(&mut self, peer: &Blob) -> PluginResult<ConnectState> {
        let mut g = lock(&self.0);
        g.connect(peer)?;
        Ok(ConnectState::Done)
    }

    /// Post a send of `len` bytes at `data`; `Ok(None)` until the receiver has posted.
    ///
    /// # Safety
    /// `data..data+len` stays valid and unmodified until the request completes.
    pub unsafe fn post_send(
        &mut self,
        data: usize,
        len: usize,
        mh: Option<&IbMemHandle>,
    ) -> PluginResult<Option<IbRequest>> {
        let mut g = lock(&self.0);
        // SAFETY: forwarded caller contract.
        let seq = unsafe { g.post_send(data, len, mh)? };
        Ok(seq.map(|seq| IbRequest {
            conn: self.0.clone(),
            seq,
        }))
    }

    /// Post a receive of at most `len` bytes into `data`; `Ok(None)` when `DEPTH` are
    /// already posted.
    ///
    /// # Safety
    /// `data..data+len` stays valid and untouched by others until the request completes.
    pub unsafe fn post_recv(
        &mut self,
        data: usize,
        len: usize,
        mh: Option<&IbMemHandle>,
    ) -> PluginResult<Option<IbRequest>> {
        let mut g = lock(&self.0);
        // SAFETY: forwarded caller contract.
        let seq = unsafe { g.post_recv(data, len, mh)? };
        Ok(seq.map(|seq| IbRequest {
            conn: self.0.clone(),
            seq,
        }))
    }
}

impl IbRequest {
    /// Progress the connection; `Some(bytes)` once this request is complete.
    pub fn test(&mut self) -> PluginResult<Option<usize>> {
        let mut g = lock(&self.conn);
        g.progress()?;
        g.finished(self.seq)
    }
}

impl Inner {
    fn err(&self, what: impl std::fmt::Display) -> PluginError {
        PluginError::remote(format!(
            "net-ib: rank {} {} rank {}: {what}",
            self.me,
            if self.dir == Direction::Send {
                "→"
            } else {
                "←"
            },
            self.peer
        ))
    }

    fn rail_name(&self, r: usize) -> String {
        let peer = self.rails[r]
            .peer
            .map(|p| format!("{}:{}", p.dev_name(), p.port))
            .unwrap_or_default();
        format!("rail {r} ({} → {peer})", self.rails[r].qp.name)
    }

    fn connect(&mut self, peer_blob: &Blob) -> PluginResult<()> {
        if !matches!(self.side, Side::Unconnected) {
            return Ok(());
        }
        let expect = match self.dir {
            Direction::Send => blob::ROLE_RECV,
            Direction::Recv => blob::ROLE_SEND,
        };
        let pb = ConnBlob::decode(peer_blob, expect, self.conn_id, self.peer)?;
        let n = (pb.nrails as usize).min(self.rails.len());
        self.rails.truncate(n);
        let cfg = &self.shared.cfg;
        let mut paths = Vec::new();
        for r in 0..n {
            let pw = pb.rails[r];
            let rq = &mut self.rails[r];
            if (pw.link_layer == blob::LL_ETH) != (rq.local.link_layer == blob::LL_ETH) {
                return Err(PluginError::invalid(format!(
                    "net-ib: rail {r}: {} is {} but rank {}'s {}:{} is {}",
                    rq.qp.name,
                    if rq.local.link_layer == blob::LL_ETH {
                        "RoCE"
                    } else {
                        "InfiniBand"
                    },
                    self.peer,
                    pw.dev_name(),
                    pw.port,
                    if pw.link_layer == blob::LL_ETH {
                        "RoCE"
                    } else {
                        "InfiniBand"
                    },
                )));
            }
            let remote = RemoteQp {
                qpn: pw.qpn,
                psn: pw.psn,
                lid: pw.lid,
                gid: pw.gid,
                ethernet: pw.link_layer == blob::LL_ETH,
                mtu: pw.mtu,
            };
            rq.qp
                .connect(
                    &remote,
                    rq.mtu,
                    rq.gid_index,
                    rq.local.psn,
                    cfg.timeout,
                    cfg.retry_cnt,
                )
                .map_err(|e| {
                    PluginError::new(
                        e.code(),
                        format!(
                            "{} (peer rank {} {}:{})",
                            e.message(),
                            self.peer,
                            pw.dev_name(),
                            pw.port
                        ),
                    )
                })?;
            rq.peer = Some(pw);
            paths.push(PathKey {
                local: rq.qp.name.clone(),
                remote_gid: pw.gid,
                remote_lid: pw.lid,
            });
        }
        let health: Arc<PathHealth<PathKey>> = self.shared.health.clone();
        self.peer_blob = Some(pb);
        self.side = match self.dir {
            Direction::Send => Side::Send {
                engine: SendEngine::new(
                    RailSet::new(paths, health, true),
                    cfg.chunk_bytes,
                    SQ_DEPTH,
                ),
                next: 1,
                msgs: BTreeMap::new(),
                acked_gen: 0,
            },
            Direction::Recv => {
                for r in 0..n {
                    self.fill_recvs(r)?;
                }
                Side::Recv {
                    writer: FifoWriter::new(RailSet::new(paths, health, false), SQ_DEPTH),
                    next: 1,
                    msgs: BTreeMap::new(),
                    rearm_gen: 0,
                    hello: false,
                }
            }
        };
        if self.dir == Direction::Send {
            // Tell the receiver our QPs are ready, on every rail (any one suffices).
            self.region.write(off_hello_src(), !self.conn_id);
            for r in 0..n {
                let wr = WrId {
                    kind: WrKind::Rearm,
                    rail: r,
                    msg: 0,
                    index: 0,
                };
                let rq = &mut self.rails[r];
                rq.qp.write(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region.addr(off_hello_src()),
                    8,
                    pb.rails[r].rkey,
                    pb.region + off_hello() as u64,
                    None,
                )?;
                if let Side::Send { engine, .. } = &mut self.side {
                    engine.reserve(r);
                }
            }
        }
        let names: Vec<String> = (0..n).map(|r| self.rail_name(r)).collect();
        self.shared.host.debug(format!(
            "net-ib: rank {} connected to rank {} over {}",
            self.me,
            self.peer,
            names.join(", ")
        ));
        Ok(())
    }

    fn fill_recvs(&mut self, r: usize) -> PluginResult<()> {
        while self.rails[r].recvs < RQ_DEPTH {
            let wr = WrId {
                kind: WrKind::Recv,
                rail: r,
                msg: 0,
                index: 0,
            };
            self.rails[r].qp.post_recv(wr.encode())?;
            self.rails[r].recvs += 1;
        }
        Ok(())
    }

    fn peer_region(&self) -> PluginResult<&ConnBlob> {
        self.peer_blob
            .as_ref()
            .ok_or_else(|| PluginError::invalid("net-ib: connection used before connect"))
    }

    /// Leases covering `[addr, addr+len)` on every device, from the caller's handle or
    /// transient ones.
    ///
    /// # Safety
    /// The range is mapped memory that stays valid while the leases live.
    unsafe fn cover(&self, addr: usize, len: usize) -> PluginResult<Vec<MrLease>> {
        let mut v = Vec::new();
        for c in &self.shared.caches {
            // SAFETY: forwarded caller contract.
            match unsafe { c.acquire(addr, len, Use::Transfer) } {
                Ok(l) => v.push(l),
                Err(e) => {
                    self.release(v);
                    return Err(e);
                }
            }
        }
        Ok(v)
    }

    fn release(&self, leases: Vec<MrLease>) {
        for (i, l) in leases.into_iter().enumerate() {
            self.shared.caches[i].release(l);
        }
    }

    unsafe fn post_send(
        &mut self,
        data: usize,
        len: usize,
        mh: Option<&IbMemHandle>,
    ) -> PluginResult<Option<u64>> {
        if let Some(e) = &self.broken {
            return Err(self.err(e));
        }
        self.progress()?;
        let Side::Send { next, .. } = &self.side else {
            return Err(PluginError::invalid(
                "net-ib: isend on a receiving or unconnected end",
            ));
        };
        let seq = *next;
        let slot = ctrl::slot(seq);
        let fifo: FifoSlot = self.region.read(ctrl::fifo_at(slot));
        if fifo.seq != seq {
            return Ok(None); // the receiver has not posted yet
        }
        let truncated = len as u64 > fifo.len;
        let (laddr, lkeys, leases) = if truncated || len == 0 {
            (0, [0; RAILS], Vec::new())
        } else if mh.is_none() && len <= BOUNCE_BYTES {
            let off = ctrl::bounce_at(slot);
            // SAFETY: the caller keeps data..data+len readable (isend's contract).
            unsafe { self.region.copy_in(off, data as *const u8, len) };
            let mut lk = [0; RAILS];
            for (r, rq) in self.rails.iter().enumerate() {
                lk[r] = self.region.lkey(rq.dev);
            }
            (self.region.addr(off), lk, Vec::new())
        } else if let Some(h) = mh {
            (data as u64, h.keys().0, Vec::new())
        } else {
            // SAFETY: isend's contract keeps the buffer valid until completion, when the
            // transient leases are released.
            let leases = unsafe { self.cover(data, len)? };
            let (lk, _) = keys_of(&self.shared, &leases);
            (data as u64, lk, leases)
        };
        let Side::Send {
            engine, next, msgs, ..
        } = &mut self.side
        else {
            unreachable!("checked above")
        };
        if let Err(e) = engine.push(seq, len as u64, !truncated) {
            let e = PluginError::invalid(format!("net-ib: {e}"));
            self.release(leases);
            return Err(e);
        }
        *next += 1;
        msgs.insert(
            seq,
            SendMsg {
                laddr,
                len: len as u64,
                lkeys,
                fifo,
                leases,
            },
        );
        self.progress()?;
        Ok(Some(seq))
    }

    unsafe fn post_recv(
        &mut self,
        data: usize,
        len: usize,
        mh: Option<&IbMemHandle>,
    ) -> PluginResult<Option<u64>> {
        if let Some(e) = &self.broken {
            return Err(self.err(e));
        }
        self.progress()?;
        let Side::Recv { next, msgs, .. } = &self.side else {
            return Err(PluginError::invalid(
                "net-ib: irecv on a sending or unconnected end",
            ));
        };
        if msgs.values().filter(|m| m.done.is_none()).count() >= DEPTH {
            return Ok(None);
        }
        let seq = *next;
        let slot = ctrl::slot(seq);
        let (addr, rkeys, bounce, leases) = if mh.is_none() && len <= BOUNCE_BYTES {
            let mut rk = [0; RAILS];
            for (r, rq) in self.rails.iter().enumerate() {
                rk[r] = self.region.rkey(rq.dev);
            }
            (
                self.region.addr(ctrl::bounce_at(slot)),
                rk,
                true,
                Vec::new(),
            )
        } else if let Some(h) = mh {
            (data as u64, h.keys().1, false, Vec::new())
        } else {
            // SAFETY: irecv's contract keeps the buffer valid until completion, when the
            // transient leases are released.
            let leases = unsafe { self.cover(data, len.max(1))? };
            let (_, rk) = keys_of(&self.shared, &leases);
            (data as u64, rk, false, leases)
        };
        self.region.write(
            ctrl::fifo_src_at(slot),
            FifoSlot {
                addr,
                len: len as u64,
                rkey: rkeys,
                seq,
            },
        );
        let Side::Recv {
            writer, next, msgs, ..
        } = &mut self.side
        else {
            unreachable!("checked above")
        };
        *next += 1;
        writer.push(seq);
        msgs.insert(
            seq,
            RecvMsg {
                addr: data as u64,
                len: len as u64,
                bounce,
                leases,
                done: None,
            },
        );
        self.progress()?;
        Ok(Some(seq))
    }

    fn finished(&mut self, seq: u64) -> PluginResult<Option<usize>> {
        let mut leases = Vec::new();
        let out = match &mut self.side {
            Side::Send { engine, msgs, .. } => {
                let out = match engine.state(seq).cloned() {
                    Some(MsgState::Done) => Some(Ok(())),
                    Some(MsgState::Failed(why)) => Some(Err(why)),
                    _ => None,
                };
                match out {
                    Some(res) => {
                        engine.reap(seq);
                        msgs.remove(&seq).map(|m| {
                            leases = m.leases;
                            res.map(|()| m.len as usize)
                        })
                    }
                    None => None,
                }
            }
            Side::Recv { msgs, .. } => match msgs.get(&seq).and_then(|m| m.done.clone()) {
                Some(d) => msgs.remove(&seq).map(|_| d),
                None => None,
            },
            Side::Unconnected => None,
        };
        self.release(leases);
        match out {
            Some(Ok(n)) => Ok(Some(n)),
            Some(Err(why)) => Err(self.err(why)),
            None => match &self.broken {
                Some(e) => Err(self.err(e)),
                None => Ok(None),
            },
        }
    }

    /// Poll, follow mailboxes, post, log.
    fn progress(&mut self) -> PluginResult<()> {
        if self.broken.is_some() || matches!(self.side, Side::Unconnected) {
            return Ok(());
        }
        let now = Instant::now();
        let mut wcs = Vec::new();
        for r in 0..self.rails.len() {
            wcs.clear();
            self.rails[r].qp.poll(&mut wcs)?;
            for wc in wcs.clone() {
                self.on_completion(r, wc.wr_id, wc.status, wc.opcode, wc.imm, now)?;
            }
        }
        self.follow_mailbox()?;
        self.post_work(now)?;
        self.log_events();
        if let Some(e) = match &self.side {
            Side::Send { engine, .. } => engine.fatal().map(str::to_owned),
            Side::Recv { writer, .. } => writer.fatal().map(str::to_owned),
            Side::Unconnected => None,
        } {
            self.break_all(e);
        }
        Ok(())
    }

    fn break_all(&mut self, why: String) {
        self.shared.host.warn(format!(
            "net-ib: rank {} / rank {}: connection failed: {why}",
            self.me, self.peer
        ));
        if let Side::Recv { msgs, .. } = &mut self.side {
            for m in msgs.values_mut() {
                m.done.get_or_insert(Err(why.clone()));
            }
        }
        self.broken = Some(why);
    }

    fn on_completion(
        &mut self,
        r: usize,
        wr_id: u64,
        status: u32,
        opcode: u32,
        imm: u32,
        now: Instant,
    ) -> PluginResult<()> {
        let wr = WrId::decode(wr_id);
        if wr.kind == WrKind::Recv {
            self.rails[r].recvs = self.rails[r].recvs.saturating_sub(1);
            if status == rails::wc::SUCCESS && opcode == WC_RECV_RDMA_WITH_IMM {
                self.on_marker(imm);
                self.fill_recvs(r)?;
            } else if let Side::Recv { writer, .. } = &mut self.side {
                // Receives flush when the QP went to error.
                writer.rails.failed(r, status, now);
            }
            return Ok(());
        }
        match &mut self.side {
            Side::Send { engine, .. } => {
                engine.on_completion(r, wr, status, now);
                if wr.kind == WrKind::ReadRecord && status == rails::wc::SUCCESS {
                    let rec: Record = self.region.read(ctrl::record_read_at(ctrl::slot(wr.msg)));
                    if let Side::Send { engine, .. } = &mut self.side {
                        engine.resolved(wr.msg, rec.seq == wr.msg);
                    }
                }
            }
            Side::Recv { writer, .. } => writer.on_completion(r, wr, status, now),
            Side::Unconnected => {}
        }
        Ok(())
    }

    fn on_marker(&mut self, imm: u32) {
        let region = &self.region;
        let Side::Recv { msgs, .. } = &mut self.side else {
            return;
        };
        let Some((&seq, m)) = msgs
            .iter_mut()
            .find(|(&s, m)| s as u32 == imm && m.done.is_none())
        else {
            return; // a duplicate marker: already complete
        };
        let rec: Record = region.read(ctrl::record_at(ctrl::slot(seq)));
        m.done = Some(if rec.seq != seq {
            Err(format!(
                "marker for message {seq} found record of message {} (protocol error)",
                rec.seq
            ))
        } else if rec.size > m.len {
            Err(format!(
                "message of {} bytes exceeds the {}-byte receive",
                rec.size, m.len
            ))
        } else {
            if m.bounce && rec.size > 0 {
                // SAFETY: the receive's buffer is valid for m.len >= rec.size bytes
                // (irecv's contract) and the bounce slot holds rec.size bytes.
                unsafe {
                    region.copy_out(
                        ctrl::bounce_at(ctrl::slot(seq)),
                        m.addr as *mut u8,
                        rec.size as usize,
                    )
                };
            }
            Ok(rec.size as usize)
        });
        let leases = std::mem::take(&mut m.leases);
        self.release(leases);
    }

    fn follow_mailbox(&mut self) -> PluginResult<()> {
        match &mut self.side {
            Side::Send {
                engine, acked_gen, ..
            } => {
                let gen: u64 = self
                    .region
                    .read(std::mem::offset_of!(ctrl::Ctrl, rearm_ack));
                if gen > *acked_gen {
                    *acked_gen = gen;
                    if let Some(r) = engine.rails.rearm_acked(gen) {
                        self.shared.host.info(format!(
                            "net-ib: rank {} → rank {}: {} re-armed; probing it",
                            self.me,
                            self.peer,
                            self.rail_name(r)
                        ));
                    }
                }
            }
            Side::Recv { rearm_gen, .. } => {
                let req: Rearm = self.region.read(std::mem::offset_of!(ctrl::Ctrl, rearm));
                if req.gen > *rearm_gen && (req.rail as usize) < self.rails.len() {
                    *rearm_gen = req.gen;
                    self.rearm_as_receiver(req)?;
                }
            }
            Side::Unconnected => {}
        }
        Ok(())
    }

    /// Process every completion already in rail `r`'s CQ (before its QP is reset).
    fn drain(&mut self, r: usize) -> PluginResult<()> {
        let now = Instant::now();
        let mut wcs = Vec::new();
        self.rails[r].qp.poll(&mut wcs)?;
        for wc in wcs {
            self.on_completion(r, wc.wr_id, wc.status, wc.opcode, wc.imm, now)?;
        }
        Ok(())
    }

    fn rearm_as_receiver(&mut self, req: Rearm) -> PluginResult<()> {
        let r = req.rail as usize;
        self.drain(r)?;
        self.rails[r].qp.reset()?;
        self.rails[r].recvs = 0;
        if let Side::Recv { writer, .. } = &mut self.side {
            writer.rail_reset(r, SQ_DEPTH);
        }
        let pw = self.rails[r].peer.expect("connected");
        let remote = RemoteQp {
            qpn: pw.qpn,
            psn: req.sender_psn,
            lid: pw.lid,
            gid: pw.gid,
            ethernet: pw.link_layer == blob::LL_ETH,
            mtu: pw.mtu,
        };
        let cfg = &self.shared.cfg;
        let rq = &mut self.rails[r];
        rq.qp.connect(
            &remote,
            rq.mtu,
            rq.gid_index,
            req.receiver_psn,
            cfg.timeout,
            cfg.retry_cnt,
        )?;
        self.fill_recvs(r)?;
        let Side::Recv { writer, .. } = &mut self.side else {
            return Ok(());
        };
        writer.rails.rearmed_by_peer(r);
        let via = writer.rails.active().unwrap_or(r);
        writer.reserve(via);
        self.region
            .write(std::mem::offset_of!(ctrl::Ctrl, rearm_ack_src), req.gen);
        let pb = *self.peer_region()?;
        let wr = WrId {
            kind: WrKind::RearmAck,
            rail: via,
            msg: req.gen,
            index: 0,
        };
        let rq = &mut self.rails[via];
        rq.qp.write(
            wr.encode(),
            self.region.lkey(rq.dev),
            self.region
                .addr(std::mem::offset_of!(ctrl::Ctrl, rearm_ack_src)),
            8,
            pb.rails[via].rkey,
            pb.region + std::mem::offset_of!(ctrl::Ctrl, rearm_ack) as u64,
            None,
        )?;
        self.shared.host.info(format!(
            "net-ib: rank {} ← rank {}: {} re-armed at the sender's request",
            self.me,
            self.peer,
            self.rail_name(r)
        ));
        Ok(())
    }

    fn post_work(&mut self, now: Instant) -> PluginResult<()> {
        let pb = *self.peer_region()?;
        match &mut self.side {
            Side::Send { engine, .. } => {
                let mut acts = Vec::new();
                engine.poll(now, &mut acts);
                for a in acts {
                    self.post_send_action(&pb, a)?;
                }
            }
            Side::Recv { writer, hello, .. } => {
                if !*hello {
                    if self.region.read::<u64>(off_hello()) != !self.conn_id {
                        return Ok(()); // announce nothing before the sender can take it
                    }
                    *hello = true;
                }
                let mut acts = Vec::new();
                writer.poll(now, &mut acts);
                for a in acts {
                    self.post_recv_action(&pb, a)?;
                }
            }
            Side::Unconnected => {}
        }
        Ok(())
    }

    fn post_send_action(&mut self, pb: &ConnBlob, a: Action) -> PluginResult<()> {
        let Side::Send { msgs, .. } = &mut self.side else {
            return Ok(());
        };
        match a {
            Action::Data {
                rail,
                msg,
                index,
                offset,
                len,
            } => {
                let m = &msgs[&msg];
                let wr = WrId {
                    kind: WrKind::Data,
                    rail,
                    msg,
                    index,
                };
                let (laddr, lkey, rkey, raddr) = (
                    m.laddr + offset,
                    m.lkeys[rail],
                    m.fifo.rkey[rail],
                    m.fifo.addr + offset,
                );
                self.rails[rail]
                    .qp
                    .write(wr.encode(), lkey, laddr, len as u32, rkey, raddr, None)
            }
            Action::Marker { rail, msg, index } => {
                let m = &msgs[&msg];
                let slot = ctrl::slot(msg);
                self.region.write(
                    ctrl::record_src_at(slot),
                    Record {
                        seq: msg,
                        size: m.len,
                    },
                );
                let wr = WrId {
                    kind: WrKind::Marker,
                    rail,
                    msg,
                    index,
                };
                let rq = &mut self.rails[rail];
                rq.qp.write(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region.addr(ctrl::record_src_at(slot)),
                    std::mem::size_of::<Record>() as u32,
                    pb.rails[rail].rkey,
                    pb.region + ctrl::record_at(slot) as u64,
                    Some(msg as u32),
                )
            }
            Action::ReadRecord { rail, msg } => {
                let slot = ctrl::slot(msg);
                let wr = WrId {
                    kind: WrKind::ReadRecord,
                    rail,
                    msg,
                    index: 0,
                };
                let rq = &mut self.rails[rail];
                rq.qp.read(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region.addr(ctrl::record_read_at(slot)),
                    std::mem::size_of::<Record>() as u32,
                    pb.rails[rail].rkey,
                    pb.region + ctrl::record_at(slot) as u64,
                )
            }
            Action::Rail(RailAction::Probe { rail }) => self.post_probe(pb, rail),
            Action::Rail(RailAction::Rearm { rail, via, gen }) => {
                let (sp, rp) = (random_psn(), random_psn());
                // Finish the old incarnation's completions, then RESET → RTS with new PSNs.
                self.drain(rail)?;
                self.rails[rail].qp.reset()?;
                if let Side::Send { engine, .. } = &mut self.side {
                    engine.rail_reset(rail, SQ_DEPTH);
                }
                let pw = self.rails[rail].peer.expect("connected");
                let remote = RemoteQp {
                    qpn: pw.qpn,
                    psn: rp,
                    lid: pw.lid,
                    gid: pw.gid,
                    ethernet: pw.link_layer == blob::LL_ETH,
                    mtu: pw.mtu,
                };
                let cfg = &self.shared.cfg;
                let rq = &mut self.rails[rail];
                rq.qp.connect(
                    &remote,
                    rq.mtu,
                    rq.gid_index,
                    sp,
                    cfg.timeout,
                    cfg.retry_cnt,
                )?;
                self.region.write(
                    std::mem::offset_of!(ctrl::Ctrl, rearm_src),
                    Rearm {
                        gen,
                        rail: rail as u32,
                        sender_psn: sp,
                        receiver_psn: rp,
                        reserved: 0,
                    },
                );
                let wr = WrId {
                    kind: WrKind::Rearm,
                    rail: via,
                    msg: gen,
                    index: 0,
                };
                let rq = &mut self.rails[via];
                rq.qp.write(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region
                        .addr(std::mem::offset_of!(ctrl::Ctrl, rearm_src)),
                    std::mem::size_of::<Rearm>() as u32,
                    pb.rails[via].rkey,
                    pb.region + std::mem::offset_of!(ctrl::Ctrl, rearm) as u64,
                    None,
                )
            }
        }
    }

    fn post_probe(&mut self, pb: &ConnBlob, rail: usize) -> PluginResult<()> {
        let wr = WrId {
            kind: WrKind::Probe,
            rail,
            msg: 0,
            index: 0,
        };
        let rq = &mut self.rails[rail];
        rq.qp.write(
            wr.encode(),
            self.region.lkey(rq.dev),
            self.region
                .addr(std::mem::offset_of!(ctrl::Ctrl, probe_src)),
            8,
            pb.rails[rail].rkey,
            pb.region + std::mem::offset_of!(ctrl::Ctrl, probe) as u64,
            None,
        )
    }

    fn post_recv_action(&mut self, pb: &ConnBlob, a: RecvAction) -> PluginResult<()> {
        match a {
            RecvAction::Fifo { rail, seq } => {
                let slot = ctrl::slot(seq);
                let wr = WrId {
                    kind: WrKind::Fifo,
                    rail,
                    msg: seq,
                    index: 0,
                };
                let rq = &mut self.rails[rail];
                rq.qp.write(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region.addr(ctrl::fifo_src_at(slot)),
                    std::mem::size_of::<FifoSlot>() as u32,
                    pb.rails[rail].rkey,
                    pb.region + ctrl::fifo_at(slot) as u64,
                    None,
                )
            }
            RecvAction::Rail(RailAction::Probe { rail }) => self.post_probe(pb, rail),
            RecvAction::Rail(RailAction::Rearm { .. }) => Ok(()),
        }
    }

    fn log_events(&mut self) {
        let events = match &mut self.side {
            Side::Send { engine, .. } => engine.rails.take_events(),
            Side::Recv { writer, .. } => writer.rails.take_events(),
            Side::Unconnected => return,
        };
        let arrow = if self.dir == Direction::Send {
            "→"
        } else {
            "←"
        };
        for e in events {
            let host = self.shared.host;
            match e {
                Event::Failover { rail, status, to, newly } => {
                    let to = match to {
                        Some(t) => format!("unacknowledged work moves to {}", self.rail_name(t)),
                        None => "no rail left".into(),
                    };
                    let seen = if newly { "" } else { " (path already known down)" };
                    host.warn(format!(
                        "net-ib: rank {} {arrow} rank {}: {} failed: {}{seen}; {to}",
                        self.me,
                        self.peer,
                        self.rail_name(rail),
                        rails::status_name(status)
                    ));
                }
                Event::Recovered { rail, down_for } => host.info(format!(
                    "net-ib: rank {} {arrow} rank {}: {} recovered after {:.1} s; traffic returns to it",
                    self.me,
                    self.peer,
                    self.rail_name(rail),
                    down_for.as_secs_f64()
                )),
                Event::ProbeFailed { rail } => host.info(format!(
                    "net-ib: rank {} {arrow} rank {}: probe of {} failed; next try after a longer window",
                    self.me,
                    self.peer,
                    self.rail_name(rail)
                )),
                Event::RearmTimedOut { rail } => host.info(format!(
                    "net-ib: rank {} {arrow} rank {}: peer did not re-arm {} in time; will retry",
                    self.me,
                    self.peer,
                    self.rail_name(rail)
                )),
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let mut leases = Vec::new();
        match &mut self.side {
            Side::Send { msgs, .. } => {
                for m in msgs.values_mut() {
                    leases.push(std::mem::take(&mut m.leases));
                }
            }
            Side::Recv { msgs, .. } => {
                for m in msgs.values_mut() {
                    leases.push(std::mem::take(&mut m.leases));
                }
            }
            Side::Unconnected => {}
        }
        for l in leases {
            self.release(l);
        }
    }
}

/// Make a registration for `register`: one lease per device.
///
/// # Safety
/// `ptr..ptr+len` stays mapped until the handle is deregistered.
pub unsafe fn register(shared: &Arc<Shared>, ptr: usize, len: usize) -> PluginResult<IbMemHandle> {
    let mut leases = Vec::new();
    for c in &shared.caches {
        // SAFETY: forwarded caller contract.
        match unsafe { c.acquire(ptr, len, Use::Explicit) } {
            Ok(l) => leases.push(l),
            Err(e) => {
                for (i, l) in leases.into_iter().enumerate() {
                    shared.caches[i].release(l);
                }
                return Err(e);
            }
        }
    }
    Ok(IbMemHandle {
        leases,
        shared: shared.clone(),
    })
}

/// Release a registration.
pub fn deregister(h: IbMemHandle) {
    let IbMemHandle { leases, shared } = h;
    for (i, l) in leases.into_iter().enumerate() {
        shared.caches[i].release(l);
    }
}

/// The caches' registrar type, for `lib.rs`.
pub type Cache = MrCache<PdRegistrar>;
