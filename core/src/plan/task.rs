//! Tasks: validated collective calls and point-to-point operations, as a
//! group collects them before planning.

use super::spec::{check_buffer, CollSpec};
use crate::algo::{in_place_safe, Algo, CollKind, VCounts};
use crate::error::{Error, Result};
use crate::plugin::Dir;
use crate::types::{DataType, RedOp};
use ferrocx_algo::Fingerprint;
use std::fmt;
use std::sync::Arc;

/// A validated collective call: pointers checked against counts, in-place
/// layout resolved into separate send and receive addresses.
#[derive(Debug, Clone)]
pub(crate) struct CollTask {
    pub kind: CollKind,
    pub algo: Option<Algo>,
    pub dtype: DataType,
    pub op: RedOp,
    pub count: usize,
    pub root: usize,
    pub send: usize,
    pub recv: usize,
    /// Elements of the send buffer (0 when unused on this rank).
    pub send_elems: usize,
    /// The send buffer aliases the receive buffer in a way the algorithms
    /// cannot handle: the executor copies the input aside first.
    pub stage_send: bool,
    pub v: Option<Arc<VCounts>>,
    /// The buffers are CUDA device memory (stream-ordered device API).
    pub device: bool,
    /// The communicator's sequence number of the call (its fingerprint's).
    pub seq: u64,
}

/// A point-to-point operation of a group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct P2pTask {
    pub dir: Dir,
    pub peer: usize,
    pub ptr: usize,
    pub len: usize,
    /// The buffer is CUDA device memory.
    pub device: bool,
    /// Its number among this rank's sends to (receives from) `peer`: what its
    /// call check compares (set when the operation is launched).
    pub seq: u64,
}

/// A call's operations: a group's handful inline (a small send or receive
/// allocates nothing on its way to a plugin).
pub(crate) type Tasks = smallvec::SmallVec<[Task; 2]>;

/// What a group holds.
#[derive(Debug, Clone)]
pub(crate) enum Task {
    Coll(CollTask),
    P2p(P2pTask),
}

impl From<CollTask> for Task {
    fn from(t: CollTask) -> Self {
        Task::Coll(t)
    }
}

impl CollTask {
    /// What every rank must agree on about this call (its call check, its status label).
    pub fn fingerprint(&self) -> ferrocx_algo::Fingerprint {
        ferrocx_algo::Fingerprint::of(
            self.seq,
            self.kind,
            self.dtype,
            self.op,
            self.count,
            self.root,
            self.v.is_some(),
        )
    }
}

impl Task {
    /// What every rank must agree on about this operation (its status label).
    pub fn fingerprint(&self) -> ferrocx_algo::Fingerprint {
        match self {
            Task::Coll(c) => c.fingerprint(),
            Task::P2p(p) if p.dir == Dir::Send => {
                ferrocx_algo::Fingerprint::send(p.seq, p.peer, p.len)
            }
            Task::P2p(p) => ferrocx_algo::Fingerprint::recv(p.seq, p.peer, p.len),
        }
    }
}

/// The status label of a call or group: its first operation, and how many more
/// (formatted only when a status report asks).
pub(crate) fn label(tasks: &[Task]) -> Label {
    match tasks.split_first() {
        Some((t, rest)) => Label::Call(t.fingerprint(), rest.len()),
        None => Label::Text("an empty group".into()),
    }
}

/// What an operation is, formatted only when a report asks (a call pays for a copy of
/// its 32-byte fingerprint, not for text).
#[derive(Debug, Clone)]
pub(crate) enum Label {
    /// A call's fingerprint, and how many more operations its group holds.
    Call(Fingerprint, usize),
    /// A collective a plugin (named) runs.
    Plugin(Fingerprint, Arc<str>),
    /// Anything else.
    Text(String),
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Call(fp, 0) => write!(f, "{fp}"),
            Label::Call(fp, more) => write!(f, "{fp} (and {more} more in its group)"),
            Label::Plugin(fp, name) => write!(f, "{fp} on plugin '{name}'"),
            Label::Text(t) => f.write_str(t),
        }
    }
}

fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

impl CollTask {
    /// Validate a call. `send`/`recv` are (address, bytes). With `in_place`,
    /// both describe the one buffer and NCCL's layout decides where the input is.
    pub fn new(
        spec: &CollSpec,
        rank: usize,
        nranks: usize,
        send: (usize, usize),
        recv: (usize, usize),
        in_place: bool,
    ) -> Result<Self> {
        let kind = spec.kind;
        let name = kind.name();
        if kind.rooted() && spec.root >= nranks {
            return Err(Error::invalid(format!(
                "{name}: root {} out of range: the communicator has {nranks} ranks",
                spec.root
            )));
        }
        if let Some(a) = spec.algo {
            if !a.applies(kind) {
                return Err(Error::invalid(format!(
                    "{name}: algorithm '{}' does not implement it (choose from: {})",
                    a.name(),
                    Algo::for_kind(kind)
                        .iter()
                        .map(|a| a.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        let es = spec.dtype.size();
        let (send_elems, recv_elems, v) = match kind {
            CollKind::AllToAllV => {
                let v = spec.v.as_ref().ok_or_else(|| {
                    Error::invalid("alltoallv: the spec has no counts (CollSpec::with_v)")
                })?;
                let (s, r) = v.extents(nranks)?;
                (s, r, Some(Arc::new(v.clone())))
            }
            _ => {
                let (s, r) = kind
                    .buffer_elems(spec.count, nranks, rank, spec.root)
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "{name}: count {} × {nranks} ranks overflows",
                            spec.count
                        ))
                    })?;
                (s, r, None)
            }
        };
        let bytes = |e: usize| {
            e.checked_mul(es).ok_or_else(|| {
                Error::invalid(format!(
                    "{name}: {e} elements of {} overflow the address space",
                    spec.dtype
                ))
            })
        };
        bytes(send_elems)?;
        bytes(recv_elems)?;
        let mut t = CollTask {
            kind,
            algo: spec.algo,
            dtype: spec.dtype,
            op: spec.op,
            count: spec.count,
            root: spec.root,
            send: send.0,
            recv: recv.0,
            send_elems,
            stage_send: false,
            v,
            device: false,
            seq: 0,
        };
        if in_place {
            let buf = recv;
            let whole = send_elems.max(recv_elems);
            check_buffer(name, "in-place buffer", buf, whole, spec.dtype)?;
            let at = |elems: usize| buf.0 + elems * es;
            match kind {
                CollKind::AllGather | CollKind::Gather => {
                    t.recv = buf.0;
                    t.send = at(rank * spec.count);
                }
                CollKind::ReduceScatter | CollKind::Scatter => {
                    t.send = buf.0;
                    t.recv = at(rank * spec.count);
                }
                CollKind::AllToAll | CollKind::AllToAllV => {
                    t.send = buf.0;
                    t.recv = buf.0;
                    t.stage_send = true;
                }
                _ => {
                    t.send = buf.0;
                    t.recv = buf.0;
                }
            }
            // Non-root ranks of gather/scatter: only one side is used.
            if kind == CollKind::Gather && rank != spec.root {
                t.send = buf.0;
            }
            if kind == CollKind::Scatter && rank != spec.root {
                t.recv = buf.0;
            }
            return Ok(t);
        }
        check_buffer(name, "send buffer", send, send_elems, spec.dtype)?;
        check_buffer(name, "receive buffer", recv, recv_elems, spec.dtype)?;
        let s = (send.0, send_elems * es);
        let r = (recv.0, recv_elems * es);
        if overlap(s, r) {
            // Overlap is only allowed in NCCL's in-place layout (same pointers as in_place).
            let layout = kind
                .in_place_offset(spec.count, rank, spec.root)
                .map(|o| recv.0 + o * es)
                == Some(send.0)
                || (matches!(kind, CollKind::ReduceScatter | CollKind::Scatter)
                    && recv.0 == send.0 + rank * spec.count * es);
            if !layout {
                return Err(Error::invalid(format!(
                    "{name}: send buffer [{:#x}, +{}) and receive buffer [{:#x}, +{}) overlap (only NCCL's in-place layout may alias)",
                    s.0, s.1, r.0, r.1
                )));
            }
            t.stage_send = !in_place_safe(kind);
        }
        Ok(t)
    }

    /// The size every rank plans with, in bytes: `count` × element size.
    /// All-to-all-v counts differ per rank, so it plans as 0 (one channel,
    /// no load, algorithm by rank count): every rank must decide alike.
    pub fn plan_bytes(&self) -> usize {
        super::spec::plan_bytes(self.count, self.dtype, self.v.is_some())
    }
}
