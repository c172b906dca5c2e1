//! What an algorithm produces: a per-rank schedule of stages.
//!
//! A stage posts its sends and receives together; when all of them have
//! completed, its local steps (reductions, copies) run in order, then the
//! next stage starts. Within a stage, no receive region overlaps another
//! receive or any send region, and local steps only touch regions the
//! stage's transfers are done with. Messages between a pair of ranks match in
//! the order they are posted (per channel), so the i-th send from `a` to
//! `b` lands in the i-th receive `b` posted from `a`.
//!
//! Regions count **elements**, not bytes: the executor scales by the type size.

/// Which buffer a [`Region`] lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The caller's input (`sendbuff`). Only read. For in-place calls it
    /// aliases part of `Recv` exactly as NCCL defines in-place for the collective.
    Send,
    /// The caller's output (`recvbuff`).
    Recv,
    /// Temporary memory owned by the executor, [`Schedule::scratch`] elements.
    Scratch,
}

/// A range of elements in one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    /// The buffer.
    pub buf: Buf,
    /// First element.
    pub off: usize,
    /// Number of elements.
    pub len: usize,
}

impl Region {
    /// Shorthand constructor.
    pub const fn new(buf: Buf, off: usize, len: usize) -> Self {
        Region { buf, off, len }
    }
    /// One past the last element.
    pub const fn end(&self) -> usize {
        self.off + self.len
    }
    /// The sub-range `[off, off+len)` of this region.
    pub fn sub(&self, off: usize, len: usize) -> Region {
        debug_assert!(off + len <= self.len);
        Region::new(self.buf, self.off + off, len)
    }
}

/// A send to or receive from one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xfer {
    /// The other rank.
    pub peer: usize,
    /// What is sent, or where the received elements go (the message has exactly `region.len` elements).
    pub region: Region,
}

/// A step done by this rank alone, after the stage's transfers completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// `dst[i] = a[i] op b[i]`. `dst` may be exactly `a` or exactly `b`; no partial overlap.
    Reduce {
        /// Output.
        dst: Region,
        /// First operand.
        a: Region,
        /// Second operand.
        b: Region,
    },
    /// `dst = src` (same length; identical regions are a no-op; no partial overlap).
    Copy {
        /// Output.
        dst: Region,
        /// Input.
        src: Region,
    },
    /// The reduction of every rank's contribution is complete in `dst`: apply
    /// the operator's final step (division by nranks for `Avg`; nothing otherwise).
    Finish {
        /// The fully reduced elements.
        dst: Region,
    },
}

impl Local {
    /// The regions the step reads (one or two) and the one it writes.
    pub fn regions(&self) -> ([Option<&Region>; 2], &Region) {
        match self {
            Local::Reduce { dst, a, b } => ([Some(a), Some(b)], dst),
            Local::Copy { dst, src } => ([Some(src), None], dst),
            Local::Finish { dst } => ([Some(dst), None], dst),
        }
    }
}

/// Transfers posted together, then local steps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stage {
    /// Sends, posted in this order.
    pub sends: Vec<Xfer>,
    /// Receives, posted in this order.
    pub recvs: Vec<Xfer>,
    /// Run in order once every transfer of the stage completed.
    pub locals: Vec<Local>,
}

impl Stage {
    /// Whether the stage has no transfers (local steps only).
    pub fn is_local(&self) -> bool {
        self.sends.is_empty() && self.recvs.is_empty()
    }
}

/// The whole schedule of one rank for one channel's part of a collective.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Stages in order.
    pub stages: Vec<Stage>,
    /// Scratch elements the schedule uses (`Buf::Scratch` regions lie below this).
    pub scratch: usize,
}

impl Schedule {
    /// Total elements this rank sends (for plan budgets and channel load).
    pub fn sent_elems(&self) -> usize {
        self.stages
            .iter()
            .flat_map(|s| s.sends.iter())
            .map(|x| x.region.len)
            .sum()
    }

    /// Append a stage unless it is entirely empty.
    pub(crate) fn push(&mut self, s: Stage) {
        if !(s.is_local() && s.locals.is_empty()) {
            self.stages.push(s);
        }
    }
}
