//! Groups: post several sends, receives and collectives, then run them
//! together so that ranks posting in different orders cannot deadlock.

use super::Communicator;
use crate::engine::Request;
use crate::error::Result;
use crate::plan::{Task, Tasks};
use crate::plugin::Dir;
use std::marker::PhantomData;

/// An open group. Buffers stay borrowed until [`Group::group_end`] returns.
///
/// ```no_run
/// # fn demo(comm: &ferrocx::Communicator) -> ferrocx::Result<()> {
/// let right = (comm.rank() + 1) % comm.nranks();
/// let left = (comm.rank() + comm.nranks() - 1) % comm.nranks();
/// let out = vec![comm.rank() as u8; 1024];
/// let mut inp = vec![0u8; 1024];
/// let mut g = comm.group_start();
/// g.send(&out, right)?;
/// g.recv(&mut inp, left)?;
/// g.group_end()?;
/// assert!(inp.iter().all(|&b| b == left as u8));
/// # Ok(()) }
/// ```
#[must_use = "a group does nothing until group_end()"]
pub struct Group<'a> {
    pub(super) comm: &'a Communicator,
    pub(super) tasks: Tasks,
    /// One per device operation: the streams a device group is ordered on.
    pub(super) streams: Vec<crate::device::RawStream>,
    _bufs: PhantomData<&'a mut [u8]>,
}

impl<'a> Group<'a> {
    pub(super) fn new(comm: &'a Communicator) -> Self {
        Group {
            comm,
            tasks: Tasks::new(),
            streams: Vec::new(),
            _bufs: PhantomData,
        }
    }

    /// Add a send of `buf` to `peer`.
    pub fn send(&mut self, buf: &'a [u8], peer: usize) -> Result<()> {
        let op = self
            .comm
            .make_op(Dir::Send, buf.as_ptr() as usize, buf.len(), peer)?;
        self.tasks.push(Task::P2p(op));
        Ok(())
    }

    /// Add a receive into `buf` from `peer` (the peer must send exactly `buf.len()` bytes).
    pub fn recv(&mut self, buf: &'a mut [u8], peer: usize) -> Result<()> {
        let op = self
            .comm
            .make_op(Dir::Recv, buf.as_mut_ptr() as usize, buf.len(), peer)?;
        self.tasks.push(Task::P2p(op));
        Ok(())
    }

    /// Add a raw send (FFI users).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be readable and stay valid until `group_end` returns.
    pub unsafe fn send_raw(&mut self, ptr: *const u8, len: usize, peer: usize) -> Result<()> {
        let op = self.comm.make_raw_op(Dir::Send, ptr as usize, len, peer)?;
        self.tasks.push(Task::P2p(op));
        Ok(())
    }

    /// Add a raw receive (FFI users).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be writable, unaliased and valid until `group_end` returns.
    pub unsafe fn recv_raw(&mut self, ptr: *mut u8, len: usize, peer: usize) -> Result<()> {
        let op = self.comm.make_raw_op(Dir::Recv, ptr as usize, len, peer)?;
        self.tasks.push(Task::P2p(op));
        Ok(())
    }

    /// Number of operations in the group.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the group is empty.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Connect what is needed, run every operation, wait for all of them. A group of
    /// device operations (`*_on`) is queued instead: it starts once every stream it
    /// names has reached this point, and every one of those streams waits for all of it.
    pub fn group_end(mut self) -> Result<()> {
        if self.streams.is_empty() {
            self.copy_to_self()?;
            if self.tasks.is_empty() {
                return Ok(());
            }
            return self.comm.run_tasks(&mut self.tasks);
        }
        self.check_one_kind()?;
        if self.tasks.is_empty() {
            return Ok(());
        }
        // Device sends to this rank itself: a collective plugin may take them
        // with the rest (`FX_COLL_CAP_P2P_SELF`), else they are copied there.
        // SAFETY: every stream and device buffer was given by `*_on` calls whose
        // contracts cover this launch.
        unsafe {
            self.comm
                .launch_device_p2p(self.tasks.into_vec(), self.streams)
        }
    }

    /// Do this rank's host sends to itself now, as copies into their receives,
    /// and take them out of the group (no transport connects a rank to itself;
    /// device groups: [`Communicator::launch_device_p2p`]).
    fn copy_to_self(&mut self) -> Result<()> {
        if !crate::plan::has_self_ops(&self.tasks, self.comm.rank()) {
            return Ok(());
        }
        let done =
            crate::plan::copy_self_pairs(&self.tasks, self.comm.rank(), |(_, s), (_, r)| {
                // SAFETY: host buffers this group borrows (or raw ones under
                // send_raw/recv_raw's contract), validated when added.
                unsafe { crate::plan::copy_host(r.ptr, s.ptr, s.len) };
                Ok(())
            })?;
        for i in done {
            self.tasks.remove(i);
        }
        Ok(())
    }

    fn check_one_kind(&self) -> Result<()> {
        if self.streams.len() != self.tasks.len() {
            return Err(crate::Error::invalid(format!(
                "a group holds either host or device buffers: this one has {} host and {} device operations",
                self.tasks.len() - self.streams.len(),
                self.streams.len()
            )));
        }
        Ok(())
    }

    /// Start the group and return without waiting.
    ///
    /// A communicator's operations complete in the order they were started
    /// (as NCCL's on a stream): a later call waits for this group, so a
    /// receive started here and the send that would meet it on the peer must
    /// not depend on a later call of this rank (start both in one group
    /// instead). Sends and receives a collective plugin runs on host memory
    /// (small ones on shm-coll) complete before this returns; the rest of the
    /// group runs on after it, its new connections made in the background (so
    /// a peer may meet them only after this rank's next call, on another
    /// communicator for example: docs/ARCHITECTURE.md, Connections).
    ///
    /// # Safety
    /// Every buffer added to the group must stay valid (and unaliased where
    /// written) until the [`Request`] reports completion. Dropping the request
    /// waits, but leaking it (`mem::forget`) ends the borrows early: that is
    /// why this is `unsafe`.
    pub unsafe fn launch(mut self) -> Result<Request> {
        if !self.streams.is_empty() {
            return Err(crate::Error::invalid(
                "a group of device operations is stream-ordered: end it with group_end()",
            ));
        }
        self.copy_to_self()?;
        self.comm.start_tasks(&mut self.tasks)
    }
}
