//! The sending side's state machine: posted sends, in order, into the
//! receiver's device FIFO or straight into its receive buffer.
//!
//! *Issuing* walks the posted messages in order. A message below the direct
//! threshold (or with the direct path off) is cut into FIFO chunks: each
//! reserves the next free slot ([`Producer`]), queues `cuMemcpyAsync` from the
//! caller's buffer into that slot of the receiver's FIFO (mapped through its
//! IPC handle) and an event. At or above the threshold the sender waits for
//! the receiver's offer for that message; a target large enough gets one
//! `cuMemcpyAsync` straight into the receiver's buffer (`copy_started`, the
//! copy, `copy_done` once its event completed), anything else goes through
//! the FIFO.
//!
//! *Completing* runs the [`Pipeline`] in order: once a chunk's event completed
//! its slot header is published; once a direct copy's event completed
//! `copy_done` is raised; a send is done once every copy of it completed (its
//! bytes left the caller's buffer and are in the receiver's GPU). Several
//! messages are in flight at once; the FIFO and the event pool bound how many.

use crate::backend::{Device, Engine};
use crate::fifo::{ChunkHeader, Producer};
use crate::ipc_cache::{ConnMappings, Mapping};
use crate::ops::{OpTable, MAX_OPS};
use crate::pipeline::Pipeline;
use crate::proc::Peer;
use crate::regslot::Target;
use crate::revoke::{Reader, Revoked};
use crate::segment::Segment;
use crate::stats::ConnStats;
use ferrocx_sdk::{PluginError, PluginResult};
use std::sync::Arc;

/// Entries the completion queue may hold (each holds at most one event).
pub const MAX_PIPE: usize = 512;

/// One posted send: the caller's bytes (host or device memory of this process).
#[derive(Debug, Clone, Copy)]
pub struct SendOp {
    /// Source address.
    pub src: u64,
    /// Message length.
    pub len: usize,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// The message being issued has not been looked at.
    Start,
    /// Waiting for the receiver to publish its handshake slot for the message.
    AwaitOffer,
    /// FIFO chunks under way, `off` bytes queued.
    Fifo { off: usize },
}

enum Action {
    /// Chunk `chunk` landed in its slot: announce it.
    Publish { chunk: u64, hdr: ChunkHeader },
    /// The direct copy of `seq` landed: raise `copy_done`, finish the send.
    /// The mapping is held until then so it cannot be closed under the copy.
    CopyDone {
        seq: u64,
        len: usize,
        _map: Option<Arc<Mapping>>,
    },
    /// The last FIFO chunk of the active send was published: finish it.
    Finish { len: usize },
}

/// Where the sender writes and how.
pub struct SendParams {
    /// The receiver's FIFO, as addressable in this process.
    pub fifo: u64,
    /// The mapping that makes `fifo` valid (none when the receiver is this process).
    pub fifo_map: Option<Arc<Mapping>>,
    /// Write directly into receive buffers the receiver offers.
    pub direct: bool,
    /// Smallest message that waits for an offer.
    pub direct_min: usize,
    /// The receiver is this process: its addresses are ours, no IPC.
    pub same_process: bool,
    /// Peer allocations kept open.
    pub ipc_cache: usize,
}

/// The sender's end of one connection.
pub struct SendSide {
    ops: OpTable<SendOp>,
    engine: Box<dyn Engine>,
    pipe: Pipeline<Action>,
    prod: Producer,
    /// Sequence number of the message being issued.
    issue: u64,
    phase: Phase,
    p: SendParams,
    maps: ConnMappings,
    revokes: Reader,
    dev: Arc<dyn Device>,
    peer: Peer,
    fallback: Option<String>,
    stats: ConnStats,
}

impl SendSide {
    /// A sender to `peer` on `dev`, copying with `engine`.
    pub fn new(dev: Arc<dyn Device>, engine: Box<dyn Engine>, peer: Peer, p: SendParams) -> Self {
        SendSide {
            ops: OpTable::new(MAX_OPS),
            engine,
            pipe: Pipeline::with_capacity(64),
            prod: Producer::default(),
            issue: 1,
            phase: Phase::Start,
            maps: ConnMappings::new(p.ipc_cache),
            p,
            revokes: Reader::default(),
            dev,
            peer,
            fallback: None,
            stats: ConnStats::default(),
        }
    }

    /// The request table.
    pub fn ops(&mut self) -> &mut OpTable<SendOp> {
        &mut self.ops
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        ConnStats {
            mappings: self.maps.len() as u64,
            ..self.stats
        }
    }

    /// Why the direct path was just turned off (once), for the log.
    pub fn take_fallback(&mut self) -> Option<String> {
        self.fallback.take()
    }

    /// One round of progress; `Ok(true)` when anything moved. An error is fatal for the connection.
    pub fn progress(&mut self, seg: &Segment) -> PluginResult<bool> {
        let mut moved = self.take_revocations(seg);
        moved |= self.complete(seg)?;
        moved |= self.issue(seg)?;
        // Fast copies (and the stand-in's) may be done already.
        moved |= self.complete(seg)?;
        Ok(moved)
    }

    fn take_revocations(&mut self, seg: &Segment) -> bool {
        let (maps, stats) = (&mut self.maps, &mut self.stats);
        self.revokes.poll(seg, |r| {
            stats.revocations += 1;
            match r {
                Revoked::One(h) => {
                    maps.revoke(&h);
                }
                Revoked::All => maps.clear(),
            }
        })
    }

    fn complete(&mut self, seg: &Segment) -> PluginResult<bool> {
        let mut moved = false;
        while let Some(a) = self.pipe.pop_ready(self.engine.as_mut())? {
            moved = true;
            match a {
                Action::Publish { chunk, hdr } => Producer::publish(seg, chunk, hdr),
                Action::CopyDone { seq, len, _map } => {
                    seg.reg(seq).finish_copy(seq, len as u64);
                    self.stats.direct_messages += 1;
                    self.stats.direct_bytes += len as u64;
                    self.ops.finish_active(Ok(len));
                }
                Action::Finish { len } => {
                    self.stats.fifo_messages += 1;
                    self.ops.finish_active(Ok(len));
                }
            }
        }
        Ok(moved)
    }

    fn issue(&mut self, seg: &Segment) -> PluginResult<bool> {
        let mut moved = false;
        while self.issue < self.ops.next_seq() && self.pipe.len() < MAX_PIPE {
            let seq = self.issue;
            let op = *self
                .ops
                .get(seq)
                .ok_or_else(|| PluginError::internal(format!("p2p send #{seq} lost its buffer")))?;
            match self.phase {
                Phase::Start => {
                    let direct = self.p.direct && op.len >= self.p.direct_min;
                    self.phase = if direct {
                        Phase::AwaitOffer
                    } else {
                        Phase::Fifo { off: 0 }
                    };
                }
                Phase::AwaitOffer => {
                    let Some(offer) = seg.reg(seq).offer(seq) else {
                        break;
                    };
                    moved = true;
                    // Revocations the receiver wrote before this offer are visible
                    // now (Acquire): drop those mappings before using any.
                    self.take_revocations(seg);
                    let usable = offer.target.filter(|t| {
                        self.p.direct
                            && offer.bytes >= op.len as u64
                            && t.offset
                                .checked_add(op.len as u64)
                                .is_some_and(|end| end <= t.alloc_size)
                    });
                    let dest = match usable {
                        None => None,
                        Some(t) => match self.destination(&t) {
                            Ok(d) => Some(d),
                            Err(e) => {
                                self.disable_direct(format!(
                                    "cannot open the receiver's buffer: {}",
                                    e.message()
                                ));
                                None
                            }
                        },
                    };
                    let Some((dst, map)) = dest else {
                        self.phase = Phase::Fifo { off: 0 };
                        continue;
                    };
                    let prev = seg.reg(seq).begin_copy(seq);
                    // SAFETY: the caller keeps `src` valid until this send completes,
                    // which is after the mark below; `dst` is the posted receive the
                    // receiver offered (valid until copy_done), mapped by `map`.
                    let queued = unsafe { self.engine.copy(dst, op.src, op.len) }
                        .and_then(|()| self.engine.mark());
                    let mark = match queued {
                        Ok(Some(m)) => m,
                        Ok(None) => return Err(PluginError::internal("p2p: out of CUDA events")),
                        Err(e) => {
                            seg.reg(seq).cancel_copy(prev);
                            return Err(self.copy_error(seq, "direct", e));
                        }
                    };
                    self.pipe.push(
                        Some(mark),
                        Action::CopyDone {
                            seq,
                            len: op.len,
                            _map: map,
                        },
                    );
                    self.issue += 1;
                    self.phase = Phase::Start;
                }
                Phase::Fifo { mut off } => {
                    let chunk_size = seg.layout().chunk;
                    loop {
                        if self.pipe.len() >= MAX_PIPE {
                            self.phase = Phase::Fifo { off };
                            return Ok(moved);
                        }
                        let Some((chunk, slot)) = self.prod.reserve(seg) else {
                            self.phase = Phase::Fifo { off };
                            return Ok(moved);
                        };
                        let n = (op.len - off).min(chunk_size);
                        let mark = if n > 0 {
                            let dst = self.p.fifo + seg.layout().fifo_off(slot);
                            // SAFETY: the slot is ours until we publish it and the
                            // receiver copies it out; `src` stays valid until this
                            // send completes, after the mark.
                            unsafe { self.engine.copy(dst, op.src + off as u64, n) }
                                .and_then(|()| self.engine.mark())
                                .map_err(|e| self.copy_error(seq, "FIFO", e))?
                        } else {
                            None
                        };
                        if n > 0 && mark.is_none() {
                            return Err(PluginError::internal("p2p: out of CUDA events"));
                        }
                        let hdr = ChunkHeader {
                            seq,
                            total: op.len as u64,
                            offset: off as u64,
                            len: n as u64,
                        };
                        self.pipe.push(mark, Action::Publish { chunk, hdr });
                        self.stats.fifo_chunks += 1;
                        moved = true;
                        off += n;
                        if off >= op.len {
                            break;
                        }
                    }
                    self.pipe.push(None, Action::Finish { len: op.len });
                    self.issue += 1;
                    self.phase = Phase::Start;
                }
            }
        }
        Ok(moved)
    }

    /// Where to write for target `t`, and the mapping that keeps it valid.
    fn destination(&mut self, t: &Target) -> PluginResult<(u64, Option<Arc<Mapping>>)> {
        if self.p.same_process {
            return Ok((t.addr, None));
        }
        let dev = self.dev.clone();
        let h = t.handle;
        let m = self.maps.get(&h, || Mapping::open(&dev, &h))?;
        Ok((m.addr() + t.offset, Some(m)))
    }

    fn disable_direct(&mut self, why: String) {
        self.p.direct = false;
        self.fallback = Some(format!(
            "p2p: direct writes into rank {} (pid {}) are not possible: {why}; using the FIFO for this connection",
            self.peer.rank, self.peer.pid
        ));
    }

    fn copy_error(&self, seq: u64, path: &str, e: PluginError) -> PluginError {
        PluginError::new(
            e.code(),
            format!(
                "p2p send #{seq} to rank {} ({path} copy): {}",
                self.peer.rank,
                e.message()
            ),
        )
    }

    /// Fail everything still pending.
    pub fn fail_all(&mut self, e: &PluginError) {
        self.ops.fail_all(e);
    }

    /// Wait (bounded) for queued copies, then forget them and every mapping:
    /// afterwards nothing of the receiver's memory is mapped here by this end.
    /// Returns false if the copies did not finish in time (then the mappings
    /// are kept alive forever rather than closed under a running copy).
    pub fn shutdown(&mut self, deadline: std::time::Instant, stop: &dyn Fn() -> bool) -> bool {
        let drained = self.engine.drain(deadline, stop).unwrap_or(false);
        if drained {
            self.pipe.clear(self.engine.as_mut());
            self.p.fifo_map = None;
        } else {
            // Copies in flight hold their mappings inside the queue: keep those open.
            std::mem::forget(std::mem::replace(
                &mut self.pipe,
                Pipeline::with_capacity(0),
            ));
            std::mem::forget(self.p.fifo_map.take());
        }
        self.maps.clear();
        drained
    }
}
