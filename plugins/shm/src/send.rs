//! The sending side's state machine: posted sends, in order, into the ring or
//! straight into the receiver's registered buffer.
//!
//! Per message: below the single-copy threshold (or with single copy off) the
//! chunks go eagerly into the ring. At or above it the sender waits for the
//! receiver's offer for that message (`receiver_ready == seq`); a usable
//! address that is large enough gets a direct copy (`copy_started`, the
//! bytes, `copy_done`), anything else goes through the ring. A send is done
//! once its bytes left the caller's buffer. One call does at most one round:
//! fill the free ring slots, copy up to [`COPY_BUDGET`] bytes directly.

use crate::cma::{self, CmaError, CopyFn};
use crate::ops::{OpTable, MAX_OPS};
use crate::proc::Peer;
use crate::ring::{ChunkHeader, Producer};
use crate::segment::Segment;
use crate::stats::ConnStats;
use crate::userbuf::SendBuf;
use ferrocx_sdk::{PluginError, PluginResult};
use std::sync::atomic::Ordering;

/// Bytes copied directly per progress round, so one huge message does not
/// hold the progress thread for long.
pub const COPY_BUDGET: usize = 16 << 20;

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// The active message has not been looked at.
    Start,
    /// Waiting for the receiver to publish its slot for the active message.
    AwaitOffer,
    /// Direct copy under way; `prev` is `copy_started` before it (for a refusal).
    Copy { remote: u64, off: usize, prev: u64 },
    /// Ring chunks under way, `off` bytes published.
    Ring { off: usize },
}

/// The sender's end of one connection.
#[derive(Debug)]
pub struct SendSide {
    ops: OpTable<SendBuf>,
    prod: Producer,
    phase: Phase,
    single_copy: bool,
    single_copy_min: usize,
    copier: CopyFn,
    peer: Peer,
    /// Whether `peer.pid` proved to be the receiver (checked before the first direct copy).
    verified: Option<bool>,
    fallback: Option<String>,
    stats: ConnStats,
}

impl SendSide {
    /// A sender writing to `peer` (whose pid receives direct copies).
    pub fn new(peer: Peer, single_copy: bool, single_copy_min: usize, copier: CopyFn) -> Self {
        SendSide {
            ops: OpTable::new(MAX_OPS),
            prod: Producer::new(),
            phase: Phase::Start,
            single_copy,
            single_copy_min,
            copier,
            peer,
            verified: None,
            fallback: None,
            stats: ConnStats::default(),
        }
    }

    /// The request table.
    pub fn ops(&mut self) -> &mut OpTable<SendBuf> {
        &mut self.ops
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// Why the direct path was just turned off (once), for the log.
    pub fn take_fallback(&mut self) -> Option<String> {
        self.fallback.take()
    }

    /// One round of progress; `Ok(true)` when anything moved. An error is fatal for the connection.
    pub fn progress(&mut self, seg: &Segment) -> PluginResult<bool> {
        let mut moved = false;
        let mut budget = COPY_BUDGET;
        while let Some(seq) = self.ops.active() {
            let Some(buf) = self.ops.get(seq) else {
                return Err(PluginError::internal(format!(
                    "shm send #{seq} lost its buffer"
                )));
            };
            let len = buf.len();
            match self.phase {
                Phase::Start => {
                    let direct = self.single_copy && len >= self.single_copy_min;
                    self.phase = if direct {
                        Phase::AwaitOffer
                    } else {
                        Phase::Ring { off: 0 }
                    };
                }
                Phase::AwaitOffer => {
                    let Some(offer) = seg.reg(seq).offer(seq) else {
                        break;
                    };
                    moved = true;
                    let remote = offer
                        .target
                        .filter(|_| self.single_copy && offer.bytes >= len as u64);
                    self.phase = match remote {
                        Some(remote) if self.peer_verified(seg) => {
                            let prev = seg.reg(seq).begin_copy(seq);
                            Phase::Copy {
                                remote,
                                off: 0,
                                prev,
                            }
                        }
                        _ => Phase::Ring { off: 0 },
                    };
                }
                Phase::Copy { remote, off, prev } => {
                    if budget == 0 {
                        break;
                    }
                    let n = (len - off).min(budget);
                    match (self.copier)(self.peer.pid, buf.bytes(off, n), remote + off as u64) {
                        Ok(()) => {
                            moved = true;
                            budget -= n;
                            if off + n < len {
                                self.phase = Phase::Copy {
                                    remote,
                                    off: off + n,
                                    prev,
                                };
                                continue;
                            }
                            seg.reg(seq).finish_copy(seq, len as u64);
                            self.stats.single_copy_messages += 1;
                            self.stats.single_copy_bytes += len as u64;
                            self.finish(Ok(len));
                        }
                        Err(CmaError::Unsupported(e)) if off == 0 => {
                            // Nothing landed: undo the start marker and use the ring from now on.
                            seg.reg(seq).cancel_copy(prev);
                            self.disable_single_copy(format!("process_vm_writev refused: {e}"));
                            self.phase = Phase::Ring { off: 0 };
                        }
                        Err(CmaError::Unsupported(e) | CmaError::Failed(e)) => {
                            return Err(copy_error(self.peer, seq, &e));
                        }
                    }
                }
                Phase::Ring { mut off } => {
                    let chunk = seg.layout().chunk;
                    loop {
                        let n = (len - off).min(chunk);
                        let hdr = ChunkHeader {
                            seq,
                            total: len as u64,
                            offset: off as u64,
                            len: n as u64,
                        };
                        if !self.prod.push(seg, hdr, buf.bytes(off, n)) {
                            self.phase = Phase::Ring { off };
                            return Ok(moved);
                        }
                        moved = true;
                        self.stats.ring_chunks += 1;
                        off += n;
                        if off >= len {
                            break;
                        }
                    }
                    self.stats.ring_messages += 1;
                    self.finish(Ok(len));
                }
            }
        }
        Ok(moved)
    }

    /// Before writing into process `peer.pid` for the first time, read back the
    /// token the receiver left in its memory: a pid that does not hold it (a
    /// namesake in another pid namespace, a recycled pid) is never written to.
    fn peer_verified(&mut self, seg: &Segment) -> bool {
        if let Some(ok) = self.verified {
            return ok;
        }
        let info = &seg.header().info.0;
        let (addr, want) = (
            info.probe_addr.load(Ordering::Relaxed),
            info.probe_value.load(Ordering::Relaxed),
        );
        let problem = match cma::read_u64(self.peer.pid, addr) {
            Ok(v) if v == want && addr != 0 => None,
            Ok(_) => Some(
                "the process does not hold the receiver's token (separate pid namespaces?)"
                    .to_string(),
            ),
            Err(CmaError::Unsupported(e) | CmaError::Failed(e)) => {
                Some(format!("process_vm_readv refused: {e}"))
            }
        };
        let ok = problem.is_none();
        if let Some(p) = problem {
            self.disable_single_copy(p);
        }
        self.verified = Some(ok);
        ok
    }

    fn disable_single_copy(&mut self, why: String) {
        self.single_copy = false;
        self.fallback = Some(format!(
            "shm: single copy into rank {} (pid {}) is not possible: {why}; using the ring for this connection",
            self.peer.rank, self.peer.pid
        ));
    }

    fn finish(&mut self, result: PluginResult<usize>) {
        self.ops.finish_active(result);
        self.phase = Phase::Start;
    }
}

fn copy_error(peer: Peer, seq: u64, e: &std::io::Error) -> PluginError {
    if e.raw_os_error() == Some(libc::ESRCH) {
        return PluginError::remote(format!(
            "peer rank {} (pid {}) exited during the direct copy of message #{seq}",
            peer.rank, peer.pid
        ));
    }
    PluginError::new(
        ferrocx_sdk::abi::FX_SYSTEM,
        format!(
            "process_vm_writev of message #{seq} into rank {} (pid {}) failed: {e}",
            peer.rank, peer.pid
        ),
    )
}
