//! # ferrocx-algo — sans-IO collective algorithms
//!
//! Pure functions from a collective's arguments to one rank's [`Schedule`],
//! the element [`types`] and operators they compute with, and the CPU
//! [`reduce`] kernels. No sockets, no threads, no CUDA, no dynamic loading —
//! the build enforces it (this crate depends on nothing): the core's plan
//! executor runs schedules over transports, and [`sim`] runs them for every
//! rank in one process to check them exhaustively, at thousands of ranks
//! (quinn-proto is the model: protocol state machines apart from the I/O
//! that drives them).
//!
//! Every algorithm handles any `nranks ≥ 1`, any count (0 included), any root,
//! and, where [`in_place_safe`] says so, NCCL's in-place buffer layouts.

mod barrier;
pub mod error;
pub mod fingerprint;
pub mod fp8;
pub mod half;
mod pairwise;
mod rd;
pub mod reduce;
mod ring;
mod schedule;
pub mod sim;
mod simple;
pub mod status;
pub mod survivors;
#[cfg(test)]
mod tests;
mod tree;
pub mod types;

pub use error::{Invalid, Result};
pub use fingerprint::{CallKind, Fingerprint, Pairing};
pub use pairwise::quadratic_deltas;
pub use schedule::{Buf, Local, Region, Schedule, Stage, Xfer};
pub use types::{Bf16, DataType, Element, RedOp, F16, F8E4M3, F8E5M2};

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollKind {
    /// Every rank gets the reduction of every rank's `count` elements.
    AllReduce,
    /// Every rank gets every rank's `count` elements, in rank order.
    AllGather,
    /// Rank `r` gets the reduction of block `r` (of `count` elements) of every rank's input.
    ReduceScatter,
    /// Every rank gets the root's `count` elements.
    Broadcast,
    /// The root gets the reduction of every rank's `count` elements.
    Reduce,
    /// Block `p` of rank `r`'s input becomes block `r` of rank `p`'s output (`count` each).
    AllToAll,
    /// [`AllToAll`](Self::AllToAll) with per-peer counts and displacements ([`VCounts`]).
    AllToAllV,
    /// The root gets every rank's `count` elements, in rank order.
    Gather,
    /// Rank `r` gets block `r` of the root's input (`count` elements each).
    Scatter,
    /// No data: returns once every rank entered.
    Barrier,
}

impl CollKind {
    /// Every collective.
    pub const ALL: [CollKind; 10] = [
        CollKind::AllReduce,
        CollKind::AllGather,
        CollKind::ReduceScatter,
        CollKind::Broadcast,
        CollKind::Reduce,
        CollKind::AllToAll,
        CollKind::AllToAllV,
        CollKind::Gather,
        CollKind::Scatter,
        CollKind::Barrier,
    ];

    /// Name as used by fxperf and logs.
    pub const fn name(self) -> &'static str {
        match self {
            CollKind::AllReduce => "all_reduce",
            CollKind::AllGather => "all_gather",
            CollKind::ReduceScatter => "reduce_scatter",
            CollKind::Broadcast => "broadcast",
            CollKind::Reduce => "reduce",
            CollKind::AllToAll => "alltoall",
            CollKind::AllToAllV => "alltoallv",
            CollKind::Gather => "gather",
            CollKind::Scatter => "scatter",
            CollKind::Barrier => "barrier",
        }
    }

    /// Whether the collective reduces (takes a [`RedOp`]).
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            CollKind::AllReduce | CollKind::ReduceScatter | CollKind::Reduce
        )
    }

    /// Whether the collective has a root.
    pub const fn rooted(self) -> bool {
        matches!(
            self,
            CollKind::Broadcast | CollKind::Reduce | CollKind::Gather | CollKind::Scatter
        )
    }

    /// Elements of (send, recv) buffer this rank needs, per NCCL's definition of
    /// `count`. Non-root ranks of rooted collectives need 0 where NCCL ignores the
    /// buffer. `None` on overflow.
    pub fn buffer_elems(
        self,
        count: usize,
        nranks: usize,
        rank: usize,
        root: usize,
    ) -> Option<(usize, usize)> {
        let all = count.checked_mul(nranks)?;
        let at_root = |n: usize| if rank == root { n } else { 0 };
        Some(match self {
            CollKind::AllReduce => (count, count),
            CollKind::AllGather => (count, all),
            CollKind::ReduceScatter => (all, count),
            CollKind::Broadcast => (at_root(count), count),
            CollKind::Reduce => (count, at_root(count)),
            CollKind::AllToAll => (all, all),
            CollKind::AllToAllV => (0, 0), // from the VCounts
            CollKind::Gather => (count, at_root(all)),
            CollKind::Scatter => (at_root(all), count),
            CollKind::Barrier => (0, 0),
        })
    }

    /// Where NCCL puts this rank's input inside its output for an in-place call,
    /// in elements from the start of the receive buffer (`None`: in-place is
    /// not defined as an offset, e.g. all-to-all, or this rank has no input).
    pub fn in_place_offset(self, count: usize, rank: usize, root: usize) -> Option<usize> {
        match self {
            CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce => Some(0),
            CollKind::AllGather => Some(rank * count),
            CollKind::Gather => (rank == root).then_some(rank * count),
            _ => None,
        }
    }
}

/// Whether every algorithm for `kind` stays correct when the send buffer
/// aliases the receive buffer in NCCL's in-place layout (send = recv +
/// in_place_offset; for reduce-scatter and scatter recv = send + rank*count).
/// For the others the executor stages the input in scratch first.
pub const fn in_place_safe(kind: CollKind) -> bool {
    !matches!(kind, CollKind::AllToAll | CollKind::AllToAllV)
}

/// Per-peer element counts and displacements of an all-to-all-v.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VCounts {
    /// Elements sent to each peer.
    pub send_counts: Vec<usize>,
    /// Where each peer's elements start in the send buffer.
    pub send_displs: Vec<usize>,
    /// Elements received from each peer.
    pub recv_counts: Vec<usize>,
    /// Where each peer's elements go in the receive buffer.
    pub recv_displs: Vec<usize>,
}

impl VCounts {
    /// Check lengths and overflow; return (send, recv) buffer sizes in elements.
    pub fn extents(&self, nranks: usize) -> Result<(usize, usize)> {
        let side = |what: &str, counts: &[usize], displs: &[usize]| -> Result<usize> {
            if counts.len() != nranks || displs.len() != nranks {
                return Err(Invalid(format!(
                    "alltoallv: {what} counts and displacements need {nranks} entries each (got {} and {})",
                    counts.len(),
                    displs.len()
                )));
            }
            let mut end = 0usize;
            for (p, (&c, &d)) in counts.iter().zip(displs).enumerate() {
                let e = d.checked_add(c).ok_or_else(|| {
                    Invalid(format!(
                        "alltoallv: {what} displacement {d} + count {c} for peer {p} overflows"
                    ))
                })?;
                end = end.max(e);
            }
            Ok(end)
        };
        Ok((
            side("send", &self.send_counts, &self.send_displs)?,
            side("receive", &self.recv_counts, &self.recv_displs)?,
        ))
    }
}

/// One channel's share of a collective: `index` of `of` equal parts of every block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// This part.
    pub index: usize,
    /// Number of parts (channels).
    pub of: usize,
}

impl Part {
    /// The whole thing.
    pub const WHOLE: Part = Part { index: 0, of: 1 };

    /// This part's `(offset, len)` of a block of `len` elements.
    pub fn range(&self, len: usize) -> (usize, usize) {
        let at = |i: usize| ((len as u128 * i as u128) / self.of as u128) as usize;
        let (a, b) = (at(self.index), at(self.index + 1));
        (a, b - a)
    }
}

/// Algorithms. Not every one applies to every collective: [`Algo::applies`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Ring: reduce-scatter then all-gather for all-reduce; ring all-gather and reduce-scatter.
    Ring,
    /// Recursive doubling (all-reduce), folding non-powers of two.
    RecursiveDoubling,
    /// Everyone exchanges with everyone in one stage (small messages, few ranks).
    Direct,
    /// Pipelined chain rooted at the root (broadcast, reduce).
    Chain,
    /// Pipelined binomial tree (broadcast, reduce at large rank counts).
    Tree,
    /// One peer pair per stage on the quadratic schedule (all-to-all(v), gather, scatter).
    Pairwise,
    /// Dissemination (barrier).
    Dissemination,
}

impl Algo {
    /// Every algorithm.
    pub const ALL: [Algo; 7] = [
        Algo::Ring,
        Algo::RecursiveDoubling,
        Algo::Direct,
        Algo::Chain,
        Algo::Tree,
        Algo::Pairwise,
        Algo::Dissemination,
    ];

    /// Short name (`FERROCX_ALGO`, logs).
    pub const fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::RecursiveDoubling => "rd",
            Algo::Direct => "direct",
            Algo::Chain => "chain",
            Algo::Tree => "tree",
            Algo::Pairwise => "pairwise",
            Algo::Dissemination => "dissemination",
        }
    }

    /// Parse a name.
    pub fn parse(s: &str) -> Option<Algo> {
        Self::ALL.iter().copied().find(|a| a.name() == s)
    }

    /// Whether this algorithm implements `kind`.
    pub const fn applies(self, kind: CollKind) -> bool {
        use CollKind::*;
        match self {
            Algo::Ring => matches!(kind, AllReduce | AllGather | ReduceScatter),
            Algo::RecursiveDoubling => matches!(kind, AllReduce),
            Algo::Direct => matches!(
                kind,
                AllGather
                    | ReduceScatter
                    | Broadcast
                    | Reduce
                    | AllToAll
                    | AllToAllV
                    | Gather
                    | Scatter
            ),
            Algo::Chain | Algo::Tree => matches!(kind, Broadcast | Reduce),
            Algo::Pairwise => matches!(kind, AllToAll | AllToAllV | Gather | Scatter),
            Algo::Dissemination => matches!(kind, Barrier),
        }
    }

    /// Every algorithm that implements `kind`.
    pub fn for_kind(kind: CollKind) -> Vec<Algo> {
        Self::ALL
            .iter()
            .copied()
            .filter(|a| a.applies(kind))
            .collect()
    }
}

/// Everything an algorithm needs.
#[derive(Debug, Clone, Copy)]
pub struct CollArgs<'a> {
    /// The collective.
    pub kind: CollKind,
    /// The algorithm ([`Algo::applies`] must hold).
    pub algo: Algo,
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
    /// NCCL's `count` for the collective (ignored for all-to-all-v).
    pub count: usize,
    /// Root of rooted collectives.
    pub root: usize,
    /// The channel's share.
    pub part: Part,
    /// Largest message in elements (≥ 1): long transfers are cut into
    /// segments of this size and pipelined; also bounds scratch use.
    pub chunk: usize,
    /// Counts of all-to-all-v.
    pub v: Option<&'a VCounts>,
}

/// The algorithm to use for `kind` at this size (`bytes`: the largest buffer
/// of the call on one rank), unless the caller forces one.
pub fn choose(kind: CollKind, nranks: usize, bytes: usize) -> Algo {
    match kind {
        // Recursive doubling sends the whole vector log2(n) times, the ring
        // 2(n-1)/n of it in 2(n-1) steps: fewer steps win up to 64 KiB, and at
        // 4+ ranks (powers of two: no folding) up to 512 KiB (measured on the
        // 2-vCPU VM: 0.6-1.4 vs 0.4-1.0 GB/s at 32-512 KiB, 4 ranks).
        CollKind::AllReduce
            if bytes <= 64 * 1024
                || nranks <= 1
                || (nranks >= 4 && nranks.is_power_of_two() && bytes <= 512 * 1024) =>
        {
            Algo::RecursiveDoubling
        }
        CollKind::AllReduce => Algo::Ring,
        CollKind::AllGather | CollKind::ReduceScatter if bytes <= 64 * 1024 && nranks <= 16 => {
            Algo::Direct
        }
        CollKind::AllGather | CollKind::ReduceScatter => Algo::Ring,
        CollKind::Broadcast | CollKind::Reduce
            if nranks <= 3 || (bytes <= 16 * 1024 && nranks <= 8) =>
        {
            Algo::Direct
        }
        CollKind::Broadcast | CollKind::Reduce if nranks >= 16 && bytes <= 1 << 20 => Algo::Tree,
        CollKind::Broadcast | CollKind::Reduce => Algo::Chain,
        CollKind::AllToAll | CollKind::AllToAllV | CollKind::Gather | CollKind::Scatter
            if bytes <= 256 * 1024 && nranks <= 64 =>
        {
            Algo::Direct
        }
        CollKind::AllToAll | CollKind::AllToAllV | CollKind::Gather | CollKind::Scatter => {
            Algo::Pairwise
        }
        CollKind::Barrier => Algo::Dissemination,
    }
}

/// This rank's schedule. Panics only on arguments that violate the
/// documented preconditions (the executor validates user input first).
pub fn schedule(a: &CollArgs<'_>) -> Schedule {
    assert!(a.nranks >= 1 && a.rank < a.nranks && a.chunk >= 1 && a.part.index < a.part.of);
    assert!(
        a.algo.applies(a.kind),
        "{:?} does not implement {:?}",
        a.algo,
        a.kind
    );
    match (a.kind, a.algo) {
        (CollKind::AllReduce, Algo::Ring) => ring::all_reduce(a),
        (CollKind::AllReduce, _) => rd::all_reduce(a),
        (CollKind::AllGather, Algo::Ring) => ring::all_gather(a),
        (CollKind::AllGather, _) => simple::all_gather(a),
        (CollKind::ReduceScatter, Algo::Ring) => ring::reduce_scatter(a),
        (CollKind::ReduceScatter, _) => simple::reduce_scatter(a),
        (CollKind::Broadcast, _) => tree::broadcast(a),
        (CollKind::Reduce, _) => tree::reduce(a),
        (CollKind::AllToAll | CollKind::AllToAllV, _) => pairwise::all_to_all(a),
        (CollKind::Gather, _) => pairwise::gather(a),
        (CollKind::Scatter, _) => pairwise::scatter(a),
        (CollKind::Barrier, _) => barrier::dissemination(a),
    }
}
