//! The sending side's state machine: posted sends, in order, into the
//! receiver's FIFO or straight into its receive buffer.
//!
//! *Issuing* walks the posted messages in order. A message below the direct
//! threshold (or with the direct path off) is cut into FIFO chunks: each
//! reserves the next free slot ([`Producer`]) and queues its copy into that
//! slot (a chunk of at most [`INLINE_BYTES`] on an inline back end is packed
//! into the slot header instead). At or above the threshold the sender waits
//! for the receiver's offer for that message; a target large enough that the
//! back end can open gets a direct write (`copy_started`, the bytes —
//! at most [`Writer::BUDGET`] per round —, `copy_done` once they landed);
//! anything else goes through the FIFO. A write the kernel refuses before
//! any byte landed turns the direct path off for the connection.
//!
//! *Completing* runs the [`Pipeline`] in order: once a chunk's copy completed
//! its slot header is published; once a direct write completed `copy_done`
//! is raised; a send is done once every copy of it completed (its bytes left
//! the caller's buffer). With an asynchronous engine several messages are in
//! flight at once; with a synchronous one each step completes as it is issued.

use super::backend::{Backend, WriteError, Writer};
use super::fifo::{pack_inline, ChunkHeader, InlineWords, Producer};
use super::layout::INLINE_BYTES;
use super::ops::{OpTable, SendOp, MAX_OPS};
use super::pipeline::Pipeline;
use super::regslot::WriteTarget;
use super::revoke::Reader;
use super::segment::Segment;
use super::stats::ConnStats;
use crate::copy::Engine;
use crate::error::{PluginError, PluginResult};
use crate::proc::Peer;

/// Entries the completion queue may hold (each holds at most one mark).
pub const MAX_PIPE: usize = 512;

enum Phase<D> {
    /// The message being issued has not been looked at.
    Start,
    /// Waiting for the receiver to publish its handshake slot for the message.
    AwaitOffer,
    /// Direct write under way: `off` bytes written; `prev` is `copy_started`
    /// before it (restored if the write is refused).
    Direct { dest: D, off: usize, prev: u64 },
    /// FIFO chunks under way, `off` bytes queued.
    Fifo { off: usize },
}

enum Action<D> {
    /// Chunk `chunk` landed in its slot (or rides inline): announce it.
    Publish {
        chunk: u64,
        hdr: ChunkHeader,
        inline: Option<InlineWords>,
    },
    /// The direct write of `seq` landed: raise `copy_done`, finish the send.
    /// The destination is held until then so its mapping cannot be closed
    /// under the copy.
    CopyDone { seq: u64, len: usize, _dest: D },
    /// The last FIFO chunk of the active send was published: finish it.
    Finish { len: usize },
}

type Dest<B> = <<B as Backend>::Writer as Writer>::Dest;

/// The sender's end of one connection.
pub struct SendSide<B: Backend> {
    ops: OpTable<SendOp>,
    engine: B::Engine,
    pipe: Pipeline<Action<Dest<B>>>,
    prod: Producer,
    /// Sequence number of the message being issued.
    issue: u64,
    phase: Phase<Dest<B>>,
    /// The receiver's FIFO, as addressable in this process.
    fifo: u64,
    /// Write directly into receive buffers the receiver offers.
    direct: bool,
    /// Smallest message that waits for an offer.
    direct_min: usize,
    writer: B::Writer,
    revokes: Reader,
    peer: Peer,
    fallback: Option<String>,
    stats: ConnStats,
}

impl<B: Backend> SendSide<B> {
    /// A sender to `peer` writing its FIFO chunks to `fifo` with `engine`.
    pub fn new(
        engine: B::Engine,
        writer: B::Writer,
        fifo: u64,
        peer: Peer,
        direct: bool,
        direct_min: usize,
    ) -> Self {
        SendSide {
            ops: OpTable::new(MAX_OPS),
            engine,
            pipe: Pipeline::with_capacity(64),
            prod: Producer::default(),
            issue: 1,
            phase: Phase::Start,
            fifo,
            direct,
            direct_min,
            writer,
            revokes: Reader::default(),
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
            mappings: self.writer.mappings() as u64,
            ..self.stats
        }
    }

    /// Why the direct path was just turned off (once), for the log.
    pub fn take_fallback(&mut self) -> Option<String> {
        self.fallback.take()
    }

    /// One round of progress; `Ok(true)` when anything moved. An error is fatal for the connection.
    pub fn progress(&mut self, seg: &Segment<B::Target>) -> PluginResult<bool> {
        let mut moved = self.take_revocations(seg);
        moved |= self.complete(seg)?;
        moved |= self.issue(seg)?;
        // Fast copies may be done already.
        moved |= self.complete(seg)?;
        Ok(moved)
    }

    fn take_revocations(&mut self, seg: &Segment<B::Target>) -> bool {
        if !B::REVOCATIONS {
            return false;
        }
        let (writer, stats) = (&mut self.writer, &mut self.stats);
        self.revokes.poll(seg, |r| {
            stats.revocations += 1;
            writer.revoke(r);
        })
    }

    fn complete(&mut self, seg: &Segment<B::Target>) -> PluginResult<bool> {
        let mut moved = false;
        while let Some(a) = self.pipe.pop_ready(&mut self.engine)? {
            moved = true;
            match a {
                Action::Publish { chunk, hdr, inline } => {
                    Producer::publish(seg, chunk, hdr, inline.as_ref())
                }
                Action::CopyDone { seq, len, _dest } => {
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

    /// Queue `action` behind a mark of everything copied so far; a
    /// synchronous engine's copies are done, so it runs at once (the receiver
    /// sees each chunk as soon as it is in its slot).
    fn push(
        &mut self,
        seg: &Segment<B::Target>,
        copied: bool,
        action: Action<Dest<B>>,
    ) -> PluginResult<()> {
        let mark = if copied { self.engine.mark()? } else { None };
        self.pipe.push(mark, action);
        if <B::Engine as Engine>::SYNC {
            self.complete(seg)?;
        }
        Ok(())
    }

    fn issue(&mut self, seg: &Segment<B::Target>) -> PluginResult<bool> {
        let mut moved = false;
        let mut budget = <B::Writer as Writer>::BUDGET;
        while self.issue < self.ops.next_seq() && self.pipe.len() < MAX_PIPE {
            let seq = self.issue;
            let op = *self.ops.get(seq).ok_or_else(|| {
                PluginError::internal(format!("{} send #{seq} lost its buffer", B::NAME))
            })?;
            match std::mem::replace(&mut self.phase, Phase::Start) {
                Phase::Start => {
                    let direct = self.direct && op.len >= self.direct_min;
                    self.phase = if direct {
                        Phase::AwaitOffer
                    } else {
                        Phase::Fifo { off: 0 }
                    };
                }
                Phase::AwaitOffer => {
                    let Some(offer) = seg.reg(seq).offer(seq) else {
                        self.phase = Phase::AwaitOffer;
                        break;
                    };
                    moved = true;
                    // Revocations the receiver wrote before this offer are visible
                    // now (Acquire): drop those mappings before using any.
                    self.take_revocations(seg);
                    let usable = offer.target.filter(|t| {
                        self.direct && offer.bytes >= op.len as u64 && t.fits(op.len as u64)
                    });
                    let dest = match usable.map(|t| self.writer.open(&t)) {
                        None => None,
                        Some(Ok(d)) => Some(d),
                        Some(Err(why)) => {
                            self.disable_direct(why);
                            None
                        }
                    };
                    self.phase = match dest {
                        Some(dest) => Phase::Direct {
                            dest,
                            off: 0,
                            prev: seg.reg(seq).begin_copy(seq),
                        },
                        None => Phase::Fifo { off: 0 },
                    };
                }
                Phase::Direct { dest, off, prev } => {
                    if budget == 0 {
                        self.phase = Phase::Direct { dest, off, prev };
                        break;
                    }
                    let n = (op.len - off).min(budget);
                    // SAFETY: the caller keeps `src` valid until this send completes,
                    // which is after the mark below; the destination is the posted
                    // receive the receiver offered (valid until copy_done).
                    let written = unsafe {
                        self.writer.write(
                            &mut self.engine,
                            &dest,
                            off as u64,
                            op.src + off as u64,
                            n,
                        )
                    };
                    match written {
                        Ok(()) => {
                            moved = true;
                            budget -= n;
                            if off + n < op.len {
                                self.phase = Phase::Direct {
                                    dest,
                                    off: off + n,
                                    prev,
                                };
                                continue;
                            }
                            let done = Action::CopyDone {
                                seq,
                                len: op.len,
                                _dest: dest,
                            };
                            self.issue += 1;
                            self.push(seg, true, done)?;
                        }
                        Err(WriteError::Refused(why)) if off == 0 => {
                            // Nothing landed: undo the start marker, the FIFO from now on.
                            seg.reg(seq).cancel_copy(prev);
                            self.disable_direct(why);
                            self.phase = Phase::Fifo { off: 0 };
                        }
                        Err(WriteError::Refused(why)) => {
                            return Err(self.copy_error(seq, "direct", PluginError::system(why)))
                        }
                        Err(WriteError::Failed(e)) => {
                            if off == 0 {
                                seg.reg(seq).cancel_copy(prev);
                            }
                            return Err(self.copy_error(seq, "direct", e));
                        }
                    }
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
                        let src = op.src + off as u64;
                        let inline = if B::INLINE && n <= INLINE_BYTES {
                            let mut bytes = [0u8; INLINE_BYTES];
                            // SAFETY: a synchronous engine (INLINE requires one) reads
                            // the caller's n bytes into our array before returning.
                            unsafe { self.engine.copy(bytes.as_mut_ptr() as u64, src, n) }
                                .map_err(|e| self.copy_error(seq, "FIFO", e))?;
                            Some(pack_inline(&bytes[..n]))
                        } else {
                            if n > 0 {
                                let dst = self.fifo + seg.layout().fifo_off(slot);
                                // SAFETY: the slot is ours until we publish it and the
                                // receiver copies it out; `src` stays valid until this
                                // send completes, after the mark.
                                unsafe { self.engine.copy(dst, src, n) }
                                    .map_err(|e| self.copy_error(seq, "FIFO", e))?;
                            }
                            None
                        };
                        let hdr = ChunkHeader {
                            seq,
                            total: op.len as u64,
                            offset: off as u64,
                            len: n as u64,
                        };
                        let copied = inline.is_none() && n > 0;
                        self.push(seg, copied, Action::Publish { chunk, hdr, inline })?;
                        self.stats.fifo_chunks += 1;
                        moved = true;
                        off += n;
                        if off >= op.len {
                            break;
                        }
                    }
                    self.issue += 1;
                    self.push(seg, false, Action::Finish { len: op.len })?;
                }
            }
        }
        Ok(moved)
    }

    fn disable_direct(&mut self, why: String) {
        self.direct = false;
        self.fallback = Some(format!(
            "{}: direct writes into rank {} (pid {}) are not possible: {why}; using the FIFO for this connection",
            B::NAME,
            self.peer.rank,
            self.peer.pid
        ));
    }

    fn copy_error(&self, seq: u64, path: &str, e: PluginError) -> PluginError {
        PluginError::new(
            e.code(),
            format!(
                "{} send #{seq} to rank {} ({path} copy): {}",
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

    /// Wait (bounded) for queued copies, then forget them and every mapping:
    /// afterwards nothing of the receiver's memory is mapped here by this end.
    /// Returns false if the copies did not finish in time (then mappings a
    /// copy may still use are kept alive forever rather than closed under it).
    pub fn shutdown(&mut self, deadline: std::time::Instant, stop: &dyn Fn() -> bool) -> bool {
        let drained = self.engine.drain(deadline, stop).unwrap_or(false);
        if drained {
            self.pipe.clear(&mut self.engine);
        } else {
            // Copies in flight hold their destinations inside the queue: keep them.
            std::mem::forget(std::mem::replace(
                &mut self.pipe,
                Pipeline::with_capacity(0),
            ));
            if let Phase::Direct { dest, .. } = std::mem::replace(&mut self.phase, Phase::Start) {
                std::mem::forget(dest);
            }
        }
        self.writer.shutdown(drained);
        drained
    }
}
