//! The receiving side's state machine: posted receives, in order, completed
//! from the FIFO or by the sender's direct copy.
//!
//! *Publishing*: every posted receive is published in its handshake slot, at
//! most NREG messages ahead of the oldest unfinished one (slot `seq % NREG`
//! is free again only once message `seq - NREG` finished here). A receive is
//! offered for a direct write — its allocation's IPC handle, offset and size
//! — when it is at least `FERROCX_P2P_DIRECT_MIN` bytes of legacy-IPC-capable
//! device memory on this connection's GPU, and registered or
//! `FERROCX_P2P_DIRECT=1`; otherwise the slot says "FIFO".
//!
//! *Issuing* walks the posted receives in order. An offered receive completes
//! when `copy_done == seq`; otherwise (or if the sender chose the FIFO anyway)
//! its chunks are taken from the FIFO as they are published: for each, a
//! `cuMemcpyAsync` from the FIFO slot (local device memory) into the receive
//! buffer and an event. Chunks of later messages are issued too while earlier
//! copies run. The first chunk's total length is checked against the posted
//! size; a longer message is drained without copying and the receive fails,
//! so the next message still arrives intact.
//!
//! *Completing* runs the [`Pipeline`] in order: a chunk's slot is handed back
//! (`tail`) once its copy-out completed; a receive finishes once all of its
//! copies completed.

use crate::backend::{Engine, IpcHandle};
use crate::fifo::{ChunkHeader, Consumer};
use crate::ops::{OpTable, MAX_OPS};
use crate::pipeline::Pipeline;
use crate::proc::Peer;
use crate::regslot::Target;
use crate::revoke::{Pending, Writer};
use crate::segment::Segment;
use crate::send::MAX_PIPE;
use crate::stats::ConnStats;
use ferrocx_sdk::{PluginError, PluginResult};

/// A registration covering a posted receive.
#[derive(Debug, Clone, Copy)]
pub struct RegRef {
    /// The allocation's handle.
    pub handle: IpcHandle,
    /// The allocation's base address.
    pub base: u64,
    /// The allocation's size.
    pub size: u64,
}

/// One posted receive.
#[derive(Debug, Clone, Copy)]
pub struct RecvOp {
    /// Destination address (host or device memory of this process).
    pub dst: u64,
    /// Posted size.
    pub len: usize,
    /// The registration holding the whole buffer, if any.
    pub reg: Option<RegRef>,
    /// Its handshake slot was published with a target.
    offered: bool,
}

impl RecvOp {
    /// A receive of at most `len` bytes into `dst`.
    pub fn new(dst: u64, len: usize, reg: Option<RegRef>) -> Self {
        RecvOp {
            dst,
            len,
            reg,
            offered: false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No chunk of the message being issued seen yet.
    Start,
    /// FIFO chunks under way: `got` of `total` bytes issued; `overflow` when
    /// the message does not fit and is being discarded.
    Fifo {
        total: u64,
        got: u64,
        overflow: bool,
    },
}

enum Action {
    /// The oldest issued chunk was copied out: hand its slot back.
    Pop,
    /// The active receive is complete.
    Finish(PluginResult<usize>),
}

/// Decides, per posted receive, whether to offer it for a direct write.
pub trait Offerer {
    /// The target for `op`, or `None` to use the FIFO.
    fn target(&mut self, op: &RecvOp) -> Option<Target>;
    /// Revocations recorded after `cursor` (exporting may have revoked some).
    fn revocations_since(&mut self, cursor: u64) -> Pending;
}

/// The receiver's end of one connection.
pub struct RecvSide {
    ops: OpTable<RecvOp>,
    engine: Box<dyn Engine>,
    pipe: Pipeline<Action>,
    cons: Consumer,
    issue: u64,
    phase: Phase,
    /// The FIFO in this process.
    fifo: u64,
    next_publish: u64,
    revokes: Writer,
    revoke_cursor: u64,
    me_rank: i32,
    peer: Peer,
    stats: ConnStats,
}

impl RecvSide {
    /// A receiver on rank `me_rank` fed by `peer`, with its FIFO at `fifo`;
    /// `revoke_cursor` is the context's revocation log position at connect.
    pub fn new(
        engine: Box<dyn Engine>,
        fifo: u64,
        me_rank: i32,
        peer: Peer,
        revoke_cursor: u64,
    ) -> Self {
        RecvSide {
            ops: OpTable::new(MAX_OPS),
            engine,
            pipe: Pipeline::with_capacity(64),
            cons: Consumer::default(),
            issue: 1,
            phase: Phase::Start,
            fifo,
            next_publish: 1,
            revokes: Writer::default(),
            revoke_cursor,
            me_rank,
            peer,
            stats: ConnStats::default(),
        }
    }

    /// The request table.
    pub fn ops(&mut self) -> &mut OpTable<RecvOp> {
        &mut self.ops
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// The revocation log position this end has forwarded up to.
    pub fn revoke_cursor(&self) -> u64 {
        self.revoke_cursor
    }

    /// Write what the context's revocation log holds beyond our cursor into the segment.
    pub fn forward(&mut self, seg: &Segment, pending: Pending) -> bool {
        match pending {
            Pending::Nothing => false,
            Pending::Some(handles, cursor) => {
                for h in &handles {
                    self.revokes.push(seg, h);
                }
                self.stats.revocations += handles.len() as u64;
                self.revoke_cursor = cursor;
                true
            }
            Pending::Flush(cursor) => {
                self.revokes.flush_all(seg);
                self.stats.revocations += 1;
                self.revoke_cursor = cursor;
                true
            }
        }
    }

    /// Publish the handshake slots of posted receives that may be published now.
    pub fn publish(&mut self, seg: &Segment, offerer: &mut dyn Offerer) {
        let nreg = seg.layout().nreg as u64;
        let oldest = self.ops.active().unwrap_or(self.ops.next_seq());
        self.next_publish = self.next_publish.max(oldest);
        while self.next_publish < self.ops.next_seq() && self.next_publish < oldest + nreg {
            let seq = self.next_publish;
            let Some(op) = self.ops.get_mut(seq) else {
                break;
            };
            let target = offerer.target(op);
            op.offered = target.is_some();
            let len = op.len as u64;
            // A handle revoked while exporting (a freed allocation) must reach the
            // sender before an offer that might carry the same handle bytes again.
            let pending = offerer.revocations_since(self.revoke_cursor);
            self.forward(seg, pending);
            seg.reg(seq).publish(seq, len, target.as_ref());
            self.next_publish += 1;
        }
    }

    /// One round of progress; `Ok(true)` when anything moved. An error is fatal
    /// for the connection (a receive that was too small is not: it fails alone).
    pub fn progress(&mut self, seg: &Segment, offerer: &mut dyn Offerer) -> PluginResult<bool> {
        let mut moved = self.complete(seg, offerer)?;
        self.publish(seg, offerer);
        moved |= self.issue(seg)?;
        moved |= self.complete(seg, offerer)?;
        Ok(moved)
    }

    fn complete(&mut self, seg: &Segment, offerer: &mut dyn Offerer) -> PluginResult<bool> {
        let mut moved = false;
        while let Some(a) = self.pipe.pop_ready(self.engine.as_mut())? {
            moved = true;
            match a {
                Action::Pop => self.cons.pop(seg),
                Action::Finish(r) => {
                    self.ops.finish_active(r);
                    // The finished message freed a handshake slot NREG messages ahead.
                    self.publish(seg, offerer);
                }
            }
        }
        Ok(moved)
    }

    fn issue(&mut self, seg: &Segment) -> PluginResult<bool> {
        let mut moved = false;
        while self.issue < self.ops.next_seq() && self.pipe.len() < MAX_PIPE {
            let seq = self.issue;
            let op = *self.ops.get(seq).ok_or_else(|| {
                PluginError::internal(format!("p2p receive #{seq} lost its buffer"))
            })?;
            // Look at the FIFO first: a chunk of a later message there implies the
            // sender finished this one directly, and its copy_done was stored
            // before that chunk's stamp (Release), so the check below sees it.
            let chunk = self.cons.peek(seg);
            match self.phase {
                Phase::Start => {
                    if op.offered {
                        if let Some(n) = seg.reg(seq).copied(seq) {
                            if n > op.len as u64 {
                                return Err(protocol(format!(
                                    "direct copy of message #{seq} wrote {n} bytes into a {}-byte receive",
                                    op.len
                                )));
                            }
                            self.stats.direct_messages += 1;
                            self.stats.direct_bytes += n;
                            self.pipe.push(None, Action::Finish(Ok(n as usize)));
                            self.issue += 1;
                            moved = true;
                            continue;
                        }
                    }
                    match chunk {
                        Some((_, _, h)) if h.seq == seq => {
                            self.phase = Phase::Fifo {
                                total: h.total,
                                got: 0,
                                overflow: h.total > op.len as u64,
                            };
                        }
                        Some((_, _, h)) => {
                            return Err(protocol(format!(
                                "expected message #{seq}, the FIFO holds #{}",
                                h.seq
                            )))
                        }
                        None => break,
                    }
                }
                Phase::Fifo {
                    total,
                    got,
                    overflow,
                } => {
                    let Some((_, slot, h)) = chunk else { break };
                    self.check_chunk(seg, seq, h, total, got)?;
                    let mark = if !overflow && h.len > 0 {
                        let src = self.fifo + seg.layout().fifo_off(slot);
                        // SAFETY: the slot holds this chunk until we pop it (after the
                        // mark); the receive buffer is ours until the receive finishes.
                        let m = unsafe { self.engine.copy(op.dst + got, src, h.len as usize) }
                            .and_then(|()| self.engine.mark())
                            .map_err(|e| {
                                PluginError::new(
                                    e.code(),
                                    format!(
                                        "p2p receive #{seq} from rank {}: {}",
                                        self.peer.rank,
                                        e.message()
                                    ),
                                )
                            })?;
                        if m.is_none() {
                            return Err(PluginError::internal("p2p: out of CUDA events"));
                        }
                        m
                    } else {
                        None
                    };
                    self.cons.advance();
                    self.pipe.push(mark, Action::Pop);
                    self.stats.fifo_chunks += 1;
                    moved = true;
                    let got = got + h.len;
                    if got < total {
                        self.phase = Phase::Fifo {
                            total,
                            got,
                            overflow,
                        };
                        continue;
                    }
                    let result = if overflow {
                        Err(PluginError::invalid(format!(
                            "rank {} sent {total} bytes but the receive posted on rank {} holds only {}",
                            self.peer.rank, self.me_rank, op.len
                        )))
                    } else {
                        self.stats.fifo_messages += 1;
                        Ok(total as usize)
                    };
                    self.pipe.push(None, Action::Finish(result));
                    self.issue += 1;
                    self.phase = Phase::Start;
                }
            }
        }
        Ok(moved)
    }

    fn check_chunk(
        &self,
        seg: &Segment,
        seq: u64,
        h: ChunkHeader,
        total: u64,
        got: u64,
    ) -> PluginResult<()> {
        let chunk = seg.layout().chunk as u64;
        let ok = h.seq == seq
            && h.total == total
            && h.offset == got
            && h.len <= chunk
            && (h.len > 0 || total == 0)
            && got + h.len <= total;
        if ok {
            return Ok(());
        }
        Err(protocol(format!(
            "bad chunk for message #{seq} at {got}/{total}: seq {} offset {} len {} total {}",
            h.seq, h.offset, h.len, h.total
        )))
    }

    /// Fail everything still pending.
    pub fn fail_all(&mut self, e: &PluginError) {
        self.ops.fail_all(e);
    }

    /// Wait (bounded) for queued copies out of the FIFO; false if they did not
    /// finish in time (then the FIFO must never be freed).
    pub fn shutdown(&mut self, deadline: std::time::Instant, stop: &dyn Fn() -> bool) -> bool {
        let drained = self.engine.drain(deadline, stop).unwrap_or(false);
        if drained {
            self.pipe.clear(self.engine.as_mut());
        }
        drained
    }
}

fn protocol(msg: String) -> PluginError {
    PluginError::internal(format!("p2p protocol error: {msg}"))
}
