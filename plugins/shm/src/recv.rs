//! The receiving side's state machine: posted receives, in order, completed
//! from the ring or by the sender's direct copy.
//!
//! Every posted receive is published in its handshake slot (address if the
//! buffer is registered and at least the threshold, else 0), at most NREG
//! messages ahead of the oldest unfinished one, since slot `seq % NREG` is
//! free again only once message `seq - NREG` completed here. The active
//! receive completes when the ring's next chunk carries its sequence number
//! (ring path) or, if it offered an address, when `copy_done == seq`. The
//! first chunk's total length is checked against the posted size; a longer
//! message is drained chunk by chunk and the receive fails, so the next
//! message still arrives intact.

use crate::ops::{OpTable, MAX_OPS};
use crate::proc::Peer;
use crate::ring::{ChunkHeader, Consumer};
use crate::segment::Segment;
use crate::stats::ConnStats;
use crate::userbuf::RecvBuf;
use ferrocx_sdk::{PluginError, PluginResult};

/// One posted receive.
#[derive(Debug)]
pub struct RecvOp {
    buf: RecvBuf,
    registered: bool,
    /// Its handshake slot was published with a non-zero address.
    offered: bool,
}

impl RecvOp {
    /// A receive into `buf`; `registered` when the buffer lies in a registration.
    pub fn new(buf: RecvBuf, registered: bool) -> Self {
        RecvOp {
            buf,
            registered,
            offered: false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No chunk of the active message seen yet.
    Start,
    /// Ring chunks under way: `got` of `total` bytes consumed; `overflow` when
    /// the message does not fit and is being discarded.
    Ring {
        total: u64,
        got: u64,
        overflow: bool,
    },
}

/// The receiver's end of one connection.
#[derive(Debug)]
pub struct RecvSide {
    ops: OpTable<RecvOp>,
    cons: Consumer,
    phase: Phase,
    next_publish: u64,
    single_copy: bool,
    /// Offer unregistered receive buffers too.
    unregistered: bool,
    single_copy_min: usize,
    me_rank: i32,
    peer: Peer,
    stats: ConnStats,
}

impl RecvSide {
    /// A receiver on rank `me_rank` fed by `peer`.
    pub fn new(
        me_rank: i32,
        peer: Peer,
        single_copy: bool,
        unregistered: bool,
        single_copy_min: usize,
    ) -> Self {
        RecvSide {
            ops: OpTable::new(MAX_OPS),
            cons: Consumer::new(),
            phase: Phase::Start,
            next_publish: 1,
            single_copy,
            unregistered,
            single_copy_min,
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

    /// Publish the handshake slots of posted receives that may be published now.
    pub fn publish(&mut self, seg: &Segment) {
        let nreg = seg.layout().nreg as u64;
        let oldest = self.ops.active().unwrap_or(self.ops.next_seq());
        self.next_publish = self.next_publish.max(oldest);
        while self.next_publish < self.ops.next_seq() && self.next_publish < oldest + nreg {
            let seq = self.next_publish;
            let Some(op) = self.ops.get_mut(seq) else {
                break;
            };
            let len = op.buf.len();
            let direct = self.single_copy
                && (op.registered || self.unregistered)
                && len >= self.single_copy_min;
            let addr = if direct { op.buf.addr() } else { 0 };
            op.offered = addr != 0;
            seg.reg(seq)
                .publish(seq, len as u64, (addr != 0).then_some(&addr));
            self.next_publish += 1;
        }
    }

    /// One round of progress; `Ok(true)` when anything moved. An error is fatal
    /// for the connection (a receive that was too small is not: it fails alone).
    pub fn progress(&mut self, seg: &Segment) -> PluginResult<bool> {
        let mut moved = false;
        self.publish(seg);
        while let Some(seq) = self.ops.active() {
            let chunk = self.cons.peek(seg);
            match self.phase {
                Phase::Start => {
                    if let Some(h) = chunk.filter(|h| h.seq == seq) {
                        self.phase = self.first_chunk(seq, h);
                        continue;
                    }
                    // A chunk of a later message implies the sender finished this one
                    // directly; its copy_done was stored before that chunk's head (Release).
                    let Some(op) = self.ops.get(seq) else { break };
                    if op.offered {
                        if let Some(n) = seg.reg(seq).copied(seq) {
                            if n > op.buf.len() as u64 {
                                return Err(protocol(format!(
                                    "direct copy of message #{seq} wrote {n} bytes into a {}-byte receive",
                                    op.buf.len()
                                )));
                            }
                            self.stats.single_copy_messages += 1;
                            self.stats.single_copy_bytes += n;
                            self.finish(seg, Ok(n as usize));
                            moved = true;
                            continue;
                        }
                    }
                    if let Some(h) = chunk {
                        return Err(protocol(format!(
                            "expected message #{seq}, the ring holds #{}",
                            h.seq
                        )));
                    }
                    break;
                }
                Phase::Ring {
                    total,
                    got,
                    overflow,
                } => {
                    let Some(h) = chunk else { break };
                    self.check_next_chunk(seg, seq, h, total, got)?;
                    let n = h.len as usize;
                    if !overflow {
                        let Some(op) = self.ops.get_mut(seq) else {
                            break;
                        };
                        self.cons.read(seg, op.buf.bytes_mut(got as usize, n));
                    }
                    self.cons.pop(seg);
                    self.stats.ring_chunks += 1;
                    moved = true;
                    let got = got + h.len;
                    if got < total {
                        self.phase = Phase::Ring {
                            total,
                            got,
                            overflow,
                        };
                        continue;
                    }
                    let result = if overflow {
                        let posted = self.ops.get(seq).map_or(0, |op| op.buf.len());
                        Err(PluginError::invalid(format!(
                            "rank {} sent {total} bytes but the receive posted on rank {} holds only {posted}",
                            self.peer.rank, self.me_rank
                        )))
                    } else {
                        self.stats.ring_messages += 1;
                        Ok(total as usize)
                    };
                    self.finish(seg, result);
                }
            }
        }
        Ok(moved)
    }

    /// The first chunk of message `seq` (validated with the others by
    /// `check_next_chunk`) tells the total length: does it fit the posted receive?
    fn first_chunk(&self, seq: u64, h: ChunkHeader) -> Phase {
        let posted = self.ops.get(seq).map_or(0, |op| op.buf.len()) as u64;
        Phase::Ring {
            total: h.total,
            got: 0,
            overflow: h.total > posted,
        }
    }

    fn check_next_chunk(
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

    fn finish(&mut self, seg: &Segment, result: PluginResult<usize>) {
        self.ops.finish_active(result);
        self.phase = Phase::Start;
        // The finished message freed a handshake slot NREG messages ahead.
        self.publish(seg);
    }
}

fn protocol(msg: String) -> PluginError {
    PluginError::internal(format!("shm protocol error: {msg}"))
}
