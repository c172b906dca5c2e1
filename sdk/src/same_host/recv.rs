//! The receiving side's state machine: posted receives, in order, completed
//! from the FIFO or by the sender's direct write.
//!
//! *Publishing*: every posted receive is published in its handshake slot, at
//! most NREG messages ahead of the oldest unfinished one (slot `seq % NREG`
//! is free again only once message `seq - NREG` finished here), with the
//! target the back end offers for it (large enough, registered or any buffer
//! as configured) or none ("FIFO").
//!
//! *Issuing* walks the posted receives in order. An offered receive completes
//! when `copy_done == seq`; otherwise (or if the sender chose the FIFO anyway)
//! its chunks are taken from the FIFO as they are published: each is copied
//! out of its slot into the receive buffer (inline chunks straight from the
//! slot header). With an asynchronous engine chunks of later messages are
//! issued while earlier copies run. The first chunk's total length is checked
//! against the posted size; a longer message is drained without copying and
//! the receive fails, so the next message still arrives intact.
//!
//! *Completing* runs the [`Pipeline`] in order: a chunk's slot is handed back
//! (`tail`) once its copy-out completed; a receive finishes once all of its
//! copies completed.

use super::backend::Backend;
use super::fifo::{unpack_inline, ChunkHeader, Consumer};
use super::layout::INLINE_BYTES;
use super::ops::{OpTable, RecvOp, MAX_OPS};
use super::pipeline::Pipeline;
use super::revoke::{Pending, Revocations, Writer};
use super::segment::Segment;
use super::send::MAX_PIPE;
use super::stats::ConnStats;
use crate::copy::Engine;
use crate::error::{PluginError, PluginResult};
use crate::proc::Peer;

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

/// What a receiving connection asks of its context while it publishes.
pub struct Offers<'a, B: Backend> {
    /// The back end (decides the targets).
    pub backend: &'a B,
    /// The context's revocations (exporting may revoke).
    pub revocations: &'a Revocations,
    /// The connection's device.
    pub dev: &'a B::Device,
}

/// The receiver's end of one connection.
pub struct RecvSide<B: Backend> {
    ops: OpTable<RecvOp<B::Reg>>,
    engine: B::Engine,
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

impl<B: Backend> RecvSide<B> {
    /// A receiver on rank `me_rank` fed by `peer`, with its FIFO at `fifo`;
    /// `revoke_cursor` is the context's revocation log position at connect.
    pub fn new(engine: B::Engine, fifo: u64, me_rank: i32, peer: Peer, revoke_cursor: u64) -> Self {
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
    pub fn ops(&mut self) -> &mut OpTable<RecvOp<B::Reg>> {
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
    pub fn forward(&mut self, seg: &Segment<B::Target>, pending: Pending) -> bool {
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
    pub fn publish(&mut self, seg: &Segment<B::Target>, offers: &Offers<'_, B>) {
        let nreg = seg.layout().nreg as u64;
        let oldest = self.ops.active().unwrap_or(self.ops.next_seq());
        self.next_publish = self.next_publish.max(oldest);
        while self.next_publish < self.ops.next_seq() && self.next_publish < oldest + nreg {
            let seq = self.next_publish;
            let Some(op) = self.ops.get_mut(seq) else {
                break;
            };
            let target = offers.backend.offer(offers.revocations, offers.dev, op);
            op.offered = target.is_some();
            let len = op.len as u64;
            if B::REVOCATIONS {
                // A handle revoked while exporting (a freed allocation) must reach
                // the sender before an offer that might carry the same handle bytes.
                let pending = offers.revocations.since(self.revoke_cursor);
                self.forward(seg, pending);
            }
            seg.reg(seq).publish(seq, len, target.as_ref());
            self.next_publish += 1;
        }
    }

    /// One round of progress; `Ok(true)` when anything moved. An error is fatal
    /// for the connection (a receive that was too small is not: it fails alone).
    pub fn progress(
        &mut self,
        seg: &Segment<B::Target>,
        offers: &Offers<'_, B>,
    ) -> PluginResult<bool> {
        let mut moved = self.complete(seg, offers)?;
        self.publish(seg, offers);
        moved |= self.issue(seg, offers)?;
        moved |= self.complete(seg, offers)?;
        Ok(moved)
    }

    fn complete(&mut self, seg: &Segment<B::Target>, offers: &Offers<'_, B>) -> PluginResult<bool> {
        let mut moved = false;
        while let Some(a) = self.pipe.pop_ready(&mut self.engine)? {
            moved = true;
            match a {
                Action::Pop => self.cons.pop(seg),
                Action::Finish(r) => {
                    self.ops.finish_active(r);
                    // The finished message freed a handshake slot NREG messages ahead.
                    self.publish(seg, offers);
                }
            }
        }
        Ok(moved)
    }

    /// Queue `action` behind a mark (when a copy was queued); a synchronous
    /// engine's copies are done, so it runs at once (the slot goes back to
    /// the sender as soon as it was read).
    fn push(
        &mut self,
        seg: &Segment<B::Target>,
        offers: &Offers<'_, B>,
        copied: bool,
        action: Action,
    ) -> PluginResult<()> {
        let mark = if copied { self.engine.mark()? } else { None };
        self.pipe.push(mark, action);
        if <B::Engine as Engine>::SYNC {
            self.complete(seg, offers)?;
        }
        Ok(())
    }

    fn issue(&mut self, seg: &Segment<B::Target>, offers: &Offers<'_, B>) -> PluginResult<bool> {
        let mut moved = false;
        while self.issue < self.ops.next_seq() && self.pipe.len() < MAX_PIPE {
            let seq = self.issue;
            let op = *self.ops.get(seq).ok_or_else(|| {
                PluginError::internal(format!("{} receive #{seq} lost its buffer", B::NAME))
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
                                return Err(self.protocol(format!(
                                    "direct copy of message #{seq} wrote {n} bytes into a {}-byte receive",
                                    op.len
                                )));
                            }
                            self.stats.direct_messages += 1;
                            self.stats.direct_bytes += n;
                            self.issue += 1;
                            self.push(seg, offers, false, Action::Finish(Ok(n as usize)))?;
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
                            return Err(self.protocol(format!(
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
                    let n = h.len as usize;
                    let dst = op.dst + got;
                    let copied = if overflow || n == 0 {
                        false
                    } else if B::INLINE && n <= INLINE_BYTES {
                        let mut bytes = [0u8; INLINE_BYTES];
                        unpack_inline(&Consumer::inline(seg, slot), &mut bytes[..n]);
                        // SAFETY: a synchronous engine (INLINE requires one) copies our
                        // n bytes into the receive buffer, ours until it finishes.
                        unsafe { self.engine.copy(dst, bytes.as_ptr() as u64, n) }
                            .map_err(|e| self.copy_error(seq, e))?;
                        false
                    } else {
                        let src = self.fifo + seg.layout().fifo_off(slot);
                        // SAFETY: the slot holds this chunk until we pop it (after the
                        // mark); the receive buffer is ours until the receive finishes.
                        unsafe { self.engine.copy(dst, src, n) }
                            .map_err(|e| self.copy_error(seq, e))?;
                        true
                    };
                    self.cons.advance();
                    self.stats.fifo_chunks += 1;
                    moved = true;
                    let got = got + h.len;
                    if got < total {
                        self.phase = Phase::Fifo {
                            total,
                            got,
                            overflow,
                        };
                        self.push(seg, offers, copied, Action::Pop)?;
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
                    self.issue += 1;
                    self.phase = Phase::Start;
                    self.push(seg, offers, copied, Action::Pop)?;
                    self.push(seg, offers, false, Action::Finish(result))?;
                }
            }
        }
        Ok(moved)
    }

    fn check_chunk(
        &self,
        seg: &Segment<B::Target>,
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
        Err(self.protocol(format!(
            "bad chunk for message #{seq} at {got}/{total}: seq {} offset {} len {} total {}",
            h.seq, h.offset, h.len, h.total
        )))
    }

    fn protocol(&self, msg: String) -> PluginError {
        PluginError::internal(format!("{} protocol error: {msg}", B::NAME))
    }

    fn copy_error(&self, seq: u64, e: PluginError) -> PluginError {
        PluginError::new(
            e.code(),
            format!(
                "{} receive #{seq} from rank {}: {}",
                B::NAME,
                self.peer.rank,
                e.message()
            ),
        )
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
            self.pipe.clear(&mut self.engine);
        }
        drained
    }
}
