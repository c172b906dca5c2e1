//! A collective described at run time, and the checks its buffers must pass
//! before anything is queued.

use crate::algo::{Algo, CollKind, VCounts};
use crate::error::{Error, Result};
use crate::types::{DataType, RedOp};

/// A collective described at run time: what [`Communicator::collective`](crate::Communicator::collective)
/// and [`Group::collective`](crate::Group::collective) take. `count` has NCCL's meaning for `kind`.
///
/// ```
/// use ferrocx::{CollKind, CollSpec, DataType, RedOp};
/// let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, 1024).op(RedOp::Max);
/// assert_eq!(spec.count, 1024);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollSpec {
    /// The collective.
    pub kind: CollKind,
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator (ignored by collectives that do not reduce).
    pub op: RedOp,
    /// Elements, as NCCL counts them for `kind` (ignored by all-to-all-v).
    pub count: usize,
    /// Root of rooted collectives.
    pub root: usize,
    /// Per-peer counts of all-to-all-v.
    pub v: Option<VCounts>,
    /// Force an algorithm (default: chosen by size, or `FERROCX_ALGO`).
    pub algo: Option<Algo>,
}

/// The size every rank plans a collective with, in bytes: `count` × element
/// size; all-to-all-v (`v`), whose counts differ per rank, plans as 0.
pub(crate) fn plan_bytes(count: usize, dtype: DataType, v: bool) -> usize {
    if v {
        0
    } else {
        count.saturating_mul(dtype.size())
    }
}

impl CollSpec {
    /// The size the planner chooses this call's algorithm by ([`plan_bytes`]).
    pub(crate) fn plan_bytes(&self) -> usize {
        plan_bytes(self.count, self.dtype, self.v.is_some())
    }

    /// A spec with op `Sum`, root 0, automatic algorithm.
    pub fn new(kind: CollKind, dtype: DataType, count: usize) -> Self {
        CollSpec {
            kind,
            dtype,
            op: RedOp::Sum,
            count,
            root: 0,
            v: None,
            algo: None,
        }
    }
    /// Set the operator.
    pub fn op(mut self, op: RedOp) -> Self {
        self.op = op;
        self
    }
    /// Set the root.
    pub fn root(mut self, root: usize) -> Self {
        self.root = root;
        self
    }
    /// Force an algorithm.
    pub fn algo(mut self, algo: Algo) -> Self {
        self.algo = Some(algo);
        self
    }
    /// All-to-all-v counts (sets `kind`).
    pub fn with_v(mut self, v: VCounts) -> Self {
        self.kind = CollKind::AllToAllV;
        self.v = Some(v);
        self
    }
}

/// Check that a byte buffer fits `elems` elements of `dtype`; errors read
/// "{coll}: {what} ...". (No formatting unless something is wrong: this runs per call.)
pub(crate) fn check_buffer(
    coll: &str,
    what: &str,
    (ptr, len): (usize, usize),
    elems: usize,
    dtype: DataType,
) -> Result<()> {
    let need = elems.checked_mul(dtype.size()).ok_or_else(|| {
        Error::invalid(format!(
            "{coll}: {what}: {elems} elements of {dtype} overflow the address space"
        ))
    })?;
    if need == 0 {
        return Ok(());
    }
    if ptr == 0 {
        return Err(Error::invalid(format!(
            "{coll}: {what} is null but {need} bytes are needed"
        )));
    }
    if !ptr.is_multiple_of(dtype.size()) {
        return Err(Error::invalid(format!(
            "{coll}: {what} at {ptr:#x} is not aligned to the {}-byte {dtype} elements",
            dtype.size()
        )));
    }
    if len < need {
        return Err(Error::invalid(format!(
            "{coll}: {what} holds {len} bytes but {elems} elements of {dtype} need {need}"
        )));
    }
    if ptr.checked_add(need).is_none() {
        return Err(Error::invalid(format!(
            "{coll}: {what}: {need} bytes at {ptr:#x} wrap around the address space"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What selection tables print by ([`CollSpec::plan_bytes`]) is what the
    /// planner chooses by: `count` × element size, 0 for all-to-all-v (whose
    /// `count` is ignored), so an all-to-all-v with a large `count` still
    /// shows the algorithm it runs.
    #[test]
    fn specs_plan_by_the_size_tasks_plan_by() {
        let s = CollSpec::new(CollKind::AllGather, DataType::F32, 1000);
        assert_eq!(s.plan_bytes(), 4000);
        let v = VCounts {
            send_counts: vec![1, 1],
            send_displs: vec![0, 1],
            recv_counts: vec![1, 1],
            recv_displs: vec![0, 1],
        };
        let s = CollSpec::new(CollKind::AllToAll, DataType::F64, 1 << 20).with_v(v);
        assert_eq!(s.plan_bytes(), 0);
        assert_eq!(plan_bytes(usize::MAX, DataType::F32, false), usize::MAX);
    }
}
