//! The receiving side: applies each request exactly once, whichever path (or
//! both) it arrives on, and answers a duplicate with the first answer.
//!
//! RDMA alone cannot give this: a WRITE whose completion was lost may have landed,
//! and posting it again on the backup lands it twice. Writes of the same bytes
//! to the same place are harmless twice, but a signal add or a fetch-add is not
//! (note 004's `rdma_recv_count`). So requests carry their sequence number and the
//! receiving side (the proxy handler, or the kernel reading signal slots) keeps,
//! per sender, which numbers it has applied and the fetched value of each atomic
//! until the sender says it no longer needs it.

use super::{Completion, Op, Path, PeerId, Request, Seq};
use std::collections::{BTreeMap, BTreeSet};

/// Where requests are applied: the window memory of this rank.
pub trait Memory {
    /// Applies a write of `len` bytes at `dst` from `from`'s request `seq`.
    fn write(&mut self, from: PeerId, seq: Seq, dst: u64, len: u32);
    /// Applies a fetch-add at `dst`, returning the value before the add.
    fn fetch_add(&mut self, from: PeerId, seq: Seq, dst: u64, add: u64) -> u64;
}

#[derive(Debug, Default)]
struct Source {
    /// Every sequence number below this has been applied.
    applied_below: u64,
    /// Applied numbers at or above `applied_below` (arrived out of order).
    applied_above: BTreeSet<u64>,
    /// Fetched values of applied atomics the sender may still ask about again.
    answers: BTreeMap<u64, u64>,
    /// The highest `completed_below` the sender has told us.
    completed_below: u64,
}

impl Source {
    fn is_applied(&self, seq: u64) -> bool {
        seq < self.applied_below || self.applied_above.contains(&seq)
    }

    fn mark_applied(&mut self, seq: u64) {
        if seq == self.applied_below {
            self.applied_below += 1;
            while self.applied_above.remove(&self.applied_below) {
                self.applied_below += 1;
            }
        } else {
            self.applied_above.insert(seq);
        }
    }

    fn learn_completed_below(&mut self, below: u64) {
        if below > self.completed_below {
            self.completed_below = below;
            self.answers = self.answers.split_off(&below);
        }
    }
}

/// The receiving side of one rank, for every sender.
#[derive(Debug)]
pub struct Receiver {
    me: PeerId,
    sources: BTreeMap<PeerId, Source>,
}

impl Receiver {
    /// The receiver of rank `me`.
    pub fn new(me: PeerId) -> Self {
        Receiver {
            me,
            sources: BTreeMap::new(),
        }
    }

    /// A request arrived on `path`. Applies it to `mem` unless it was applied
    /// before, and returns the completion to send back on that path (`None` when
    /// the sender has already completed this request and waits for nothing).
    pub fn on_request(
        &mut self,
        path: Path,
        req: &Request,
        mem: &mut impl Memory,
    ) -> Option<Completion> {
        let src = self.sources.entry(req.from).or_default();
        src.learn_completed_below(req.completed_below.0);
        let seq = req.seq.0;
        let fetched = if src.is_applied(seq) {
            if seq < src.completed_below {
                return None;
            }
            match req.op {
                // Kept until the sender moved past it (checked just above), so a
                // duplicate atomic always finds its first answer.
                Op::FetchAdd { .. } => Some(*src.answers.get(&seq)?),
                Op::Write { .. } => None,
            }
        } else {
            let fetched = match req.op {
                Op::Write { dst, len } => {
                    mem.write(req.from, req.seq, dst, len);
                    None
                }
                Op::FetchAdd { dst, add } => {
                    let old = mem.fetch_add(req.from, req.seq, dst, add);
                    src.answers.insert(seq, old);
                    Some(old)
                }
            };
            src.mark_applied(seq);
            fetched
        };
        Some(Completion {
            peer: self.me,
            path,
            seq: req.seq,
            fetched,
        })
    }

    /// Whether `from`'s request `seq` (carrying `completed_below`) still needs
    /// its data landed, for a receiver that lands a put's bytes before
    /// [`on_request`](Self::on_request): not when it was applied before (a
    /// copy re-posted on the other path brings the same bytes), nor when the
    /// sender completed it already — a late copy of an old put would land
    /// over newer data the sender wrote since.
    pub fn needs_data(&mut self, from: PeerId, seq: Seq, completed_below: Seq) -> bool {
        let src = self.sources.entry(from).or_default();
        src.learn_completed_below(completed_below.0);
        !src.is_applied(seq.0) && seq.0 >= src.completed_below
    }

    /// Every request of `from` below this number has been applied.
    pub fn applied_below(&self, from: PeerId) -> Seq {
        Seq(self.sources.get(&from).map_or(0, |s| s.applied_below))
    }

    /// How many atomic answers are kept for `from` (bounded by what it has in
    /// flight, once it keeps posting).
    pub fn kept_answers(&self, from: PeerId) -> usize {
        self.sources.get(&from).map_or(0, |s| s.answers.len())
    }
}
