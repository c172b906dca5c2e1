//! The collective API on [`Communicator`] and [`Group`]: typed slices,
//! byte buffers with a runtime [`DataType`](crate::DataType), and raw
//! pointers for async use.

use super::group::Group;
use super::Communicator;
use crate::algo::{CollKind, VCounts};
use crate::engine::Request;
use crate::error::{Error, Result};
use crate::plan::{CollSpec, CollTask};
use crate::types::{Element, RedOp};

/// Reinterpret a typed slice as bytes.
fn bytes<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: Element types are plain numbers with no padding; the length is in bytes.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

/// Reinterpret a mutable typed slice as bytes.
fn bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as above, and every byte pattern is a valid element (Element's contract).
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}

impl Communicator {
    /// Turn a spec and buffers into a validated task.
    pub(crate) fn coll_task(
        &self,
        spec: &CollSpec,
        send: (usize, usize),
        recv: (usize, usize),
        in_place: bool,
    ) -> Result<CollTask> {
        self.coll_task_in(&self.coll_serial.lock(), spec, send, recv, in_place)
    }

    /// [`coll_task`](Self::coll_task) while holding `coll_serial` (`_serial`,
    /// its contents: calls are numbered under it).
    pub(crate) fn coll_task_in(
        &self,
        _serial: &crate::collective::bids::HostP2p,
        spec: &CollSpec,
        send: (usize, usize),
        recv: (usize, usize),
        in_place: bool,
    ) -> Result<CollTask> {
        self.check_live()?;
        let mut t = CollTask::new(spec, self.rank(), self.nranks(), send, recv, in_place)?;
        // Every valid collective call takes the next number, the same on every rank
        // (plugin dispatch and the call check both use it).
        t.seq = self.shared.status.number_coll();
        Ok(t)
    }

    /// Typed calls pass whole slices: their lengths must be exactly what the
    /// collective uses (buffers a rank does not use may have any length).
    fn typed<T: Element>(&self, spec: &CollSpec, send: &[T], recv: &mut [T]) -> Result<()> {
        let (n, r) = (self.nranks(), self.rank());
        let name = spec.kind.name();
        let need = spec
            .kind
            .buffer_elems(spec.count, n, r, spec.root)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{name}: count {} × {n} ranks overflows",
                    spec.count
                ))
            })?;
        for (what, len, want) in [
            ("send", send.len(), need.0),
            ("receive", recv.len(), need.1),
        ] {
            if want > 0 && len != want {
                return Err(Error::invalid(format!(
                    "{name}: the {what} buffer has {len} elements but rank {r} of {n} needs exactly {want} (count {})",
                    spec.count
                )));
            }
        }
        self.collective(spec, bytes(send), bytes_mut(recv))
    }

    /// Run a collective on byte buffers holding `spec.dtype` elements
    /// (aligned to the element size). Buffers a rank does not use (the send
    /// buffer of a non-root broadcast rank, the receive buffer of a non-root
    /// reduce or gather rank) may be empty.
    pub fn collective(&self, spec: &CollSpec, send: &[u8], recv: &mut [u8]) -> Result<()> {
        let Some(t) = self.host_collective(
            spec,
            (send.as_ptr() as usize, send.len()),
            (recv.as_mut_ptr() as usize, recv.len()),
            false,
        )?
        else {
            return Ok(());
        };
        self.run_tasks(&mut smallvec::smallvec![t.into()])
    }

    /// Run a collective in place, in NCCL's layout: all-reduce, broadcast and
    /// reduce work on `buf` as a whole; all-gather and gather take this rank's
    /// input at `rank*count` of the output; reduce-scatter and scatter leave
    /// this rank's output at `rank*count` of the input; all-to-all(v) replace
    /// the input with the output.
    pub fn collective_in_place(&self, spec: &CollSpec, buf: &mut [u8]) -> Result<()> {
        let b = (buf.as_mut_ptr() as usize, buf.len());
        let Some(t) = self.host_collective(spec, b, b, true)? else {
            return Ok(());
        };
        self.run_tasks(&mut smallvec::smallvec![t.into()])
    }

    /// Start a collective on raw pointers and return at once; the
    /// [`Request`] completes it.
    ///
    /// # Safety
    /// `send..send+send_bytes` must stay readable and `recv..recv+recv_bytes`
    /// writable and unaliased (except NCCL's in-place layouts, when `in_place`)
    /// until the request reports completion.
    pub unsafe fn start_raw(
        &self,
        spec: &CollSpec,
        send: (*const u8, usize),
        recv: (*mut u8, usize),
        in_place: bool,
    ) -> Result<Request> {
        let Some(t) = self.host_collective(
            spec,
            (send.0 as usize, send.1),
            (recv.0 as usize, recv.1),
            in_place,
        )?
        else {
            return Ok(Request::finished());
        };
        self.start_tasks(&mut smallvec::smallvec![t.into()])
    }

    /// Sum (or `op`) of every rank's `send` into every rank's `recv` (same length).
    pub fn all_reduce<T: Element>(&self, send: &[T], recv: &mut [T], op: RedOp) -> Result<()> {
        let spec = CollSpec::new(CollKind::AllReduce, T::DTYPE, send.len()).op(op);
        self.typed(&spec, send, recv)
    }

    /// [`all_reduce`](Self::all_reduce) in place.
    pub fn all_reduce_in_place<T: Element>(&self, buf: &mut [T], op: RedOp) -> Result<()> {
        let spec = CollSpec::new(CollKind::AllReduce, T::DTYPE, buf.len()).op(op);
        self.collective_in_place(&spec, bytes_mut(buf))
    }

    /// Every rank's `send` (`count` elements) into `recv` (`nranks*count`), in rank order.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let spec = CollSpec::new(CollKind::AllGather, T::DTYPE, send.len());
        self.typed(&spec, send, recv)
    }

    /// Block `r` of every rank's `send` (`nranks*count`) reduced into rank `r`'s `recv` (`count`).
    pub fn reduce_scatter<T: Element>(&self, send: &[T], recv: &mut [T], op: RedOp) -> Result<()> {
        let spec = CollSpec::new(CollKind::ReduceScatter, T::DTYPE, recv.len()).op(op);
        self.typed(&spec, send, recv)
    }

    /// The root's `send` into every rank's `recv` (non-roots may pass an empty `send`).
    pub fn broadcast<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let spec = CollSpec::new(CollKind::Broadcast, T::DTYPE, recv.len()).root(root);
        self.typed(&spec, send, recv)
    }

    /// [`broadcast`](Self::broadcast) in place.
    pub fn broadcast_in_place<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let spec = CollSpec::new(CollKind::Broadcast, T::DTYPE, buf.len()).root(root);
        self.collective_in_place(&spec, bytes_mut(buf))
    }

    /// Every rank's `send` reduced into the root's `recv` (non-roots may pass an empty `recv`).
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: RedOp,
        root: usize,
    ) -> Result<()> {
        let spec = CollSpec::new(CollKind::Reduce, T::DTYPE, send.len())
            .op(op)
            .root(root);
        self.typed(&spec, send, recv)
    }

    /// Block `p` of `send` to rank `p`; block `p` of `recv` from rank `p` (`count` each).
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.nranks().max(1);
        if !send.len().is_multiple_of(n) {
            return Err(Error::invalid(format!(
                "alltoall: the send buffer has {} elements, not a multiple of the {n} ranks",
                send.len()
            )));
        }
        let spec = CollSpec::new(CollKind::AllToAll, T::DTYPE, send.len() / n);
        self.typed(&spec, send, recv)
    }

    /// All-to-all with per-peer counts and displacements (in elements).
    pub fn all_to_allv<T: Element>(&self, send: &[T], recv: &mut [T], v: &VCounts) -> Result<()> {
        let spec = CollSpec::new(CollKind::AllToAllV, T::DTYPE, 0).with_v(v.clone());
        self.typed(&spec, send, recv)
    }

    /// Every rank's `send` into the root's `recv` (`nranks*count`; non-roots may pass empty).
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let spec = CollSpec::new(CollKind::Gather, T::DTYPE, send.len()).root(root);
        self.typed(&spec, send, recv)
    }

    /// Block `r` of the root's `send` (`nranks*count`; non-roots may pass empty) into rank `r`'s `recv`.
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let spec = CollSpec::new(CollKind::Scatter, T::DTYPE, recv.len()).root(root);
        self.typed(&spec, send, recv)
    }
}

impl<'a> Group<'a> {
    /// Add a collective on byte buffers (see [`Communicator::collective`]).
    /// Every rank must add the same collectives in the same order; sends and
    /// receives of the group may be added in any order around them.
    pub fn collective(
        &mut self,
        spec: &CollSpec,
        send: &'a [u8],
        recv: &'a mut [u8],
    ) -> Result<()> {
        let t = self.comm.coll_task(
            spec,
            (send.as_ptr() as usize, send.len()),
            (recv.as_mut_ptr() as usize, recv.len()),
            false,
        )?;
        self.tasks.push(t.into());
        Ok(())
    }

    /// Add an in-place collective (see [`Communicator::collective_in_place`]).
    pub fn collective_in_place(&mut self, spec: &CollSpec, buf: &'a mut [u8]) -> Result<()> {
        let b = (buf.as_mut_ptr() as usize, buf.len());
        let t = self.comm.coll_task(spec, b, b, true)?;
        self.tasks.push(t.into());
        Ok(())
    }

    /// Add a typed all-reduce.
    pub fn all_reduce<T: Element>(
        &mut self,
        send: &'a [T],
        recv: &'a mut [T],
        op: RedOp,
    ) -> Result<()> {
        let spec = CollSpec::new(CollKind::AllReduce, T::DTYPE, send.len()).op(op);
        self.collective(&spec, bytes(send), bytes_mut(recv))
    }
}
