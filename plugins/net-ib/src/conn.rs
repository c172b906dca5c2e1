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
//! This file sets the connection up (control region, QPs per rail, the hello
//! handshake), posts sends and receives and reports them finished; all
//! progress — polling both CQs, following the mailboxes, posting what the
//! engines ask for, logging failover and recovery — is `execute`, run in
//! `isend`/`irecv`/`test` under the connection's lock.

use crate::blob::{self, ConnBlob, RailWire};
use crate::ctrl::{self, FifoSlot, BOUNCE_BYTES, DEPTH, RAILS};
use crate::device::PdRegistrar;
use crate::mr_cache::{Lease, MrCache, Use};
use crate::qp::{Qp, RemoteQp, RQ_DEPTH, SQ_DEPTH};
use crate::rails::{FifoWriter, MsgState, PathKey, RailSet, SendEngine, WrId, WrKind};
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
pub(crate) fn keys_of(shared: &Shared, leases: &[MrLease]) -> ([u32; RAILS], [u32; RAILS]) {
    let (mut l, mut r) = ([0; RAILS], [0; RAILS]);
    for (i, spec) in shared.rails.iter().enumerate().take(RAILS) {
        l[i] = leases[spec.dev].mr.lkey();
        r[i] = leases[spec.dev].mr.rkey();
    }
    (l, r)
}

pub(crate) fn off_hello() -> usize {
    std::mem::offset_of!(ctrl::Ctrl, hello)
}

fn off_hello_src() -> usize {
    std::mem::offset_of!(ctrl::Ctrl, hello_src)
}

pub(crate) fn random_psn() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    (h.finish() & 0xff_ffff) as u32
}

pub(crate) struct RailQp {
    pub(crate) qp: Qp,
    /// Index of the device in the context.
    pub(crate) dev: usize,
    pub(crate) gid_index: u8,
    pub(crate) mtu: u8,
    pub(crate) local: RailWire,
    pub(crate) peer: Option<RailWire>,
    pub(crate) recvs: usize,
}

pub(crate) struct SendMsg {
    pub(crate) laddr: u64,
    pub(crate) len: u64,
    pub(crate) lkeys: [u32; RAILS],
    pub(crate) fifo: FifoSlot,
    pub(crate) leases: Vec<MrLease>,
}

pub(crate) struct RecvMsg {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) bounce: bool,
    pub(crate) leases: Vec<MrLease>,
    pub(crate) done: Option<Result<usize, String>>,
}

pub(crate) enum Side {
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
    pub(crate) shared: Arc<Shared>,
    pub(crate) dir: Direction,
    pub(crate) me: i32,
    pub(crate) peer: i32,
    pub(crate) conn_id: u64,
    pub(crate) region: Region,
    pub(crate) rails: Vec<RailQp>,
    pub(crate) peer_blob: Option<ConnBlob>,
    pub(crate) side: Side,
    pub(crate) broken: Option<String>,
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
    pub(crate) fn err(&self, what: impl std::fmt::Display) -> PluginError {
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

    pub(crate) fn rail_name(&self, r: usize) -> String {
        let peer = self.rails[r]
            .peer
            .map(|p| format!("{}:{}", p.dev_name(), p.port))
            .unwrap_or_default();
        format!("rail {r} ({} → {peer})", self.rails[r].qp.name)
    }

    pub(crate) fn connect(&mut self, peer_blob: &Blob) -> PluginResult<()> {
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

    pub(crate) fn fill_recvs(&mut self, r: usize) -> PluginResult<()> {
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

    pub(crate) fn peer_region(&self) -> PluginResult<&ConnBlob> {
        self.peer_blob
            .as_ref()
            .ok_or_else(|| PluginError::invalid("net-ib: connection used before connect"))
    }

    /// Leases covering `[addr, addr+len)` on every device, from the caller's handle or
    /// transient ones.
    ///
    /// # Safety
    /// The range is mapped memory that stays valid while the leases live.
    pub(crate) unsafe fn cover(&self, addr: usize, len: usize) -> PluginResult<Vec<MrLease>> {
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

    pub(crate) fn release(&self, leases: Vec<MrLease>) {
        for (i, l) in leases.into_iter().enumerate() {
            self.shared.caches[i].release(l);
        }
    }

    pub(crate) unsafe fn post_send(
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

    pub(crate) unsafe fn post_recv(
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

    pub(crate) fn finished(&mut self, seq: u64) -> PluginResult<Option<usize>> {
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
