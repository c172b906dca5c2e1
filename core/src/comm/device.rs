//! The stream-ordered API for CUDA device buffers.
//!
//! `*_on` calls take device addresses and a CUDA stream and return at once: the
//! operation starts after the work already queued on the stream and the stream resumes
//! only after it (see `device::order`). Errors found at the call (bad buffer, wrong
//! device, rank out of range) are returned; errors during the operation break the
//! communicator like host errors do and are returned by the next call, or by
//! [`Communicator::device_error`].
//!
//! ```no_run
//! # unsafe fn demo(comm: &ferrocx::Communicator, d_in: u64, d_out: u64, n: usize,
//! #                stream: ferrocx::RawStream) -> ferrocx::Result<()> {
//! use ferrocx::{CollKind, CollSpec, DataType, RedOp};
//! let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, n).op(RedOp::Sum);
//! comm.collective_on(&spec, d_in, d_out, stream)?; // queued behind the stream's work
//! // ... more kernels on `stream` see the reduced `d_out` ...
//! # Ok(()) }
//! ```

use super::group::Group;
use super::{Communicator, Dir};
use crate::device::{order::Signal, AsStream, Gpu, RawStream};
use crate::error::{Error, Result};
use crate::plan::{CollSpec, CollTask, P2pTask, PlanDevice, Task};
use ferrocx_sdk::cuda::{self, Event};
use ferrocx_sdk::spans::{self, Point};
use std::sync::Arc;

impl Communicator {
    /// The CUDA device this rank uses (`FERROCX_DEVICE`, else local rank modulo the
    /// device count), or `None` without CUDA.
    pub fn device(&self) -> Option<i32> {
        self.gpu.as_ref().map(|g| g.device())
    }

    pub(crate) fn gpu(&self) -> Result<&Arc<Gpu>> {
        self.gpu.as_ref().ok_or_else(|| {
            Error::Unsupported(match cuda::available() {
                Err(why) => format!("device buffers need CUDA: {why}"),
                Ok(_) => {
                    "device buffers need a GPU, and this rank has none (FERROCX_DEVICE=-1)".into()
                }
            })
        })
    }

    /// `ptr` checked to be device memory of this rank's GPU: (ptr, bytes from it to
    /// the end of its allocation). Null stays (0, 0) for the size checks to judge.
    /// `what` names the buffer in an error (formatted only then: this runs per call).
    fn device_extent(&self, what: impl Fn() -> String, ptr: u64) -> Result<(usize, usize)> {
        if ptr == 0 {
            return Ok((0, 0));
        }
        let gpu = self.gpu()?;
        gpu.bind()?;
        let span = cuda::device_span(ptr as usize).ok_or_else(|| {
            Error::invalid(format!(
                "{} at {ptr:#x} is not CUDA device memory (use the host API for host buffers)",
                what()
            ))
        })?;
        self.extent_in(gpu, &span, ptr as usize, &what)
    }

    /// [`device_extent`](Self::device_extent), or `None` where `ptr` is not
    /// device memory (or this rank has no GPU); device memory of another GPU
    /// is an error. Host memory leaves the thread's current context as it
    /// was (the pointer query needs none).
    fn device_extent_or_host(
        &self,
        what: &impl Fn() -> String,
        ptr: u64,
    ) -> Result<Option<(usize, usize)>> {
        if ptr == 0 {
            return Ok(Some((0, 0)));
        }
        let Some(gpu) = self.gpu.as_ref() else {
            return Ok(None);
        };
        let Some(span) = cuda::device_span(ptr as usize) else {
            return Ok(None);
        };
        gpu.bind()?;
        self.extent_in(gpu, &span, ptr as usize, what).map(Some)
    }

    /// The bytes from `ptr` to the end of its allocation `span`, which must be
    /// on this rank's GPU.
    fn extent_in(
        &self,
        gpu: &Gpu,
        span: &cuda::DeviceSpan,
        ptr: usize,
        what: &impl Fn() -> String,
    ) -> Result<(usize, usize)> {
        if span.device != gpu.device() {
            return Err(Error::invalid(format!(
                "{} at {ptr:#x} is on GPU {}, but rank {} uses GPU {}",
                what(),
                span.device,
                self.rank(),
                gpu.device()
            )));
        }
        Ok((ptr, span.base + span.size - ptr))
    }

    fn device_coll_task(
        &self,
        spec: &CollSpec,
        send: u64,
        recv: u64,
        in_place: bool,
    ) -> Result<CollTask> {
        let name = spec.kind.name();
        let span = spans::enter(Point::CoreBufferChecks);
        let s = self.device_extent(|| format!("{name}: the send buffer"), send)?;
        let r = self.device_extent(|| format!("{name}: the receive buffer"), recv)?;
        drop(span);
        self.device_task_of(spec, (s, r), in_place)
    }

    fn device_task_of(
        &self,
        spec: &CollSpec,
        (s, r): ((usize, usize), (usize, usize)),
        in_place: bool,
    ) -> Result<CollTask> {
        let mut t = self.coll_task(spec, s, r, in_place)?;
        t.device = true;
        Ok(t)
    }

    fn device_p2p(&self, dir: Dir, ptr: u64, len: usize, peer: usize) -> Result<P2pTask> {
        let verb = if dir == Dir::Send { "send" } else { "recv" };
        let span = spans::enter(Point::CoreBufferChecks);
        let (p, avail) = self.device_extent(|| format!("{verb}: the buffer"), ptr)?;
        drop(span);
        if len > 0 && p == 0 {
            return Err(Error::invalid(format!(
                "{verb}: buffer is null but length is {len}"
            )));
        }
        if len > avail {
            return Err(Error::invalid(format!(
                "{verb}: {len} bytes at {p:#x} run past the end of its device allocation ({avail} bytes left)"
            )));
        }
        let mut op = self.make_op(dir, p, len, peer)?;
        op.device = true;
        Ok(op)
    }

    /// A collective on device buffers, ordered on `stream` (see [`collective`](Self::collective)
    /// for the layouts; `send`/`recv` are device addresses, 0 for an unused buffer).
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream of this rank's device (or null, the legacy
    /// default stream); the buffers must stay allocated until the stream has passed
    /// this operation.
    pub unsafe fn collective_on(
        &self,
        spec: &CollSpec,
        send: u64,
        recv: u64,
        stream: impl AsStream,
    ) -> Result<()> {
        let _span = spans::enter(Point::CoreCollective);
        let t = self.device_coll_task(spec, send, recv, false)?;
        // SAFETY: the caller's contract.
        unsafe { self.queue_device(spec, t, (send, recv), false, stream.raw_stream()) }
    }

    /// Queue the checked device collective `t` on `stream`: on the plugin
    /// that wins it, else on the core's path.
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on).
    unsafe fn queue_device(
        &self,
        spec: &CollSpec,
        t: CollTask,
        (send, recv): (u64, u64),
        in_place: bool,
        stream: RawStream,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        if unsafe { self.device_on_plugin(spec, t.seq, send, recv, in_place, stream)? } {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.launch_device(vec![t.into()], &[stream]) }
    }

    /// Offer a device call to the collective plugins (see `dispatch`).
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on).
    unsafe fn device_on_plugin(
        &self,
        spec: &CollSpec,
        seq: u64,
        send: u64,
        recv: u64,
        in_place: bool,
        stream: RawStream,
    ) -> Result<bool> {
        if self.colls.is_empty() {
            return self.run_on_plugin(
                &super::dispatch::Call {
                    spec,
                    send,
                    recv,
                    in_place,
                    mem: ferrocx_sdk::abi::FX_MEM_CUDA,
                    capturing: false,
                    seq,
                },
                std::ptr::null_mut(),
            );
        }
        // ferrocx's own driver calls (the plugin's queries and reads) are
        // never part of the user's capture, which in global or thread-local
        // mode would forbid them and be invalidated.
        let _relaxed = cuda::RelaxedCapture::enter();
        let span = spans::enter(Point::CoreDeviceError);
        self.device_error()?;
        drop(span);
        let span = spans::enter(Point::CoreCaptureQuery);
        let capturing = crate::device::order::is_capturing(stream)?;
        drop(span);
        let call = super::dispatch::Call {
            spec,
            send,
            recv,
            in_place,
            mem: ferrocx_sdk::abi::FX_MEM_CUDA,
            capturing,
            seq,
        };
        self.run_on_plugin(&call, stream as *mut std::ffi::c_void)
    }

    /// An in-place collective on a device buffer, ordered on `stream`.
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on).
    pub unsafe fn collective_in_place_on(
        &self,
        spec: &CollSpec,
        buf: u64,
        stream: impl AsStream,
    ) -> Result<()> {
        let _span = spans::enter(Point::CoreCollective);
        let t = self.device_coll_task(spec, buf, buf, true)?;
        // SAFETY: the caller's contract.
        unsafe { self.queue_device(spec, t, (buf, buf), true, stream.raw_stream()) }
    }

    /// A collective whose buffers may be host or device memory, for layers
    /// whose callers pass either (NCCL's API, which ferrocx lets take host
    /// buffers): run on `stream` as [`collective_on`](Self::collective_on)
    /// (`in_place`: [`collective_in_place_on`](Self::collective_in_place_on)
    /// on `send`) when the first buffer that is not null is device memory
    /// (`Ok(true)`); nothing done (`Ok(false)`) when it is host memory, or
    /// both are null, for the caller to run it on the host path. The test is
    /// the device path's own buffer check: no driver query of its own.
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on).
    pub unsafe fn collective_on_if_device(
        &self,
        spec: &CollSpec,
        send: u64,
        recv: u64,
        in_place: bool,
        stream: impl AsStream,
    ) -> Result<bool> {
        let _span = spans::enter(Point::CoreCollective);
        let recv = if in_place { send } else { recv };
        let name = spec.kind.name();
        let (what_s, what_r) = (
            || format!("{name}: the send buffer"),
            || format!("{name}: the receive buffer"),
        );
        let span = spans::enter(Point::CoreBufferChecks);
        let (s, r) = if send != 0 {
            let Some(s) = self.device_extent_or_host(&what_s, send)? else {
                return Ok(false);
            };
            (s, self.device_extent(what_r, recv)?)
        } else if recv != 0 {
            let Some(r) = self.device_extent_or_host(&what_r, recv)? else {
                return Ok(false);
            };
            ((0, 0), r)
        } else {
            return Ok(false);
        };
        drop(span);
        let t = self.device_task_of(spec, (s, r), in_place)?;
        // SAFETY: the caller's contract.
        unsafe { self.queue_device(spec, t, (send, recv), in_place, stream.raw_stream()) }
            .map(|()| true)
    }

    /// Send `len` bytes of device memory to `peer`, ordered on `stream`.
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on).
    pub unsafe fn send_on(
        &self,
        buf: u64,
        len: usize,
        peer: usize,
        stream: impl AsStream,
    ) -> Result<()> {
        let op = self.device_p2p(Dir::Send, buf, len, peer)?;
        // SAFETY: the caller's contract.
        unsafe { self.launch_device_p2p(vec![Task::P2p(op)], vec![stream.raw_stream()]) }
    }

    /// Receive `len` bytes from `peer` into device memory, ordered on `stream`.
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on).
    pub unsafe fn recv_on(
        &self,
        buf: u64,
        len: usize,
        peer: usize,
        stream: impl AsStream,
    ) -> Result<()> {
        let op = self.device_p2p(Dir::Recv, buf, len, peer)?;
        // SAFETY: the caller's contract.
        unsafe { self.launch_device_p2p(vec![Task::P2p(op)], vec![stream.raw_stream()]) }
    }

    /// Device tasks with sends or receives: those a collective plugin wins
    /// go to it, the rest through [`launch_device`](Self::launch_device).
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on), for every stream.
    pub(crate) unsafe fn launch_device_p2p(
        &self,
        tasks: Vec<Task>,
        streams: Vec<RawStream>,
    ) -> Result<()> {
        let pairs = crate::plan::self_pairs(&tasks, self.rank())?;
        // As for collectives (`device_on_plugin`).
        let _relaxed = cuda::RelaxedCapture::enter();
        // Before anything is queued: a pair the core copies needs one stream.
        if pairs.iter().any(|&(s, r)| streams[s] != streams[r]) {
            return Err(Error::invalid(
                "a send to the rank itself and its receive must be on one stream",
            ));
        }
        // SAFETY: the caller's contract.
        let (mut tasks, mut streams) =
            unsafe { self.device_p2p_on_plugins(tasks, streams, &pairs)? };
        // SAFETY: the caller's contract.
        unsafe { self.copy_to_self_on_device(&mut tasks, &mut streams)? };
        if tasks.is_empty() {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.launch_device(tasks, &streams) }
    }

    /// This rank's sends to itself left in `tasks` (no plugin took them), as
    /// copies into their receives queued on their stream, taken out of the
    /// group (no transport connects a rank to itself).
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on), for every task and stream.
    unsafe fn copy_to_self_on_device(
        &self,
        tasks: &mut Vec<Task>,
        streams: &mut Vec<RawStream>,
    ) -> Result<()> {
        if !crate::plan::has_self_ops(tasks, self.rank()) {
            return Ok(());
        }
        let gpu = self.gpu()?;
        gpu.bind()?;
        let done = crate::plan::copy_self_pairs(tasks, self.rank(), |(_, s), (r, recv)| {
            // SAFETY: device buffers of `*_on` calls, whose contracts cover
            // work queued on their stream (one stream per pair: checked
            // before anything was queued).
            unsafe { gpu.copy_local(recv.ptr, s.ptr, s.len, streams[r] as _) }
        })?;
        for i in done {
            tasks.remove(i);
            streams.remove(i);
        }
        Ok(())
    }

    /// Whether some peer's transport takes no device memory (device data to it is
    /// staged through pinned host memory), by the transport selection rules.
    fn needs_staging(&self) -> bool {
        *self.staging.get_or_init(|| {
            (0..self.nranks()).filter(|&p| p != self.rank()).any(|p| {
                self.shared
                    .candidates()
                    .choose(p)
                    .map_or(true, |pl| !pl.takes_device_memory())
            })
        })
    }

    /// Register `len` bytes of device memory at `ptr` with every transport that can
    /// (p2p: an IPC handle of the allocation, so transfers into it go straight there).
    /// Release with [`deregister`](Self::deregister).
    ///
    /// # Safety
    /// The memory must stay allocated until it is deregistered.
    pub unsafe fn register_device(&self, ptr: u64, len: usize) -> Result<super::RegHandle> {
        self.check_live()?;
        let (p, avail) = self.device_extent(|| "register_device: the buffer".into(), ptr)?;
        if len > avail {
            return Err(Error::invalid(format!(
                "register_device: {len} bytes at {p:#x} run past the end of its device allocation ({avail} bytes left)"
            )));
        }
        self.regs.register(
            &self.shared.plugins,
            p as *const u8,
            len,
            ferrocx_sdk::abi::FX_MEM_CUDA,
        )
    }

    /// The first error of a finished stream-ordered operation not reported yet
    /// (or the asynchronous error of a collective plugin, such as ce's watchdog
    /// releasing a stream a dead peer left waiting), else a peer's abort
    /// notice that names a mismatched call (sticky, like every later call's
    /// error).
    pub fn device_error(&self) -> Result<()> {
        // Finalized cleanly: destroy waited for every operation and returned its
        // errors; what the collective plugins say of their released comms is no error.
        if self.state.load(std::sync::atomic::Ordering::Acquire) == super::DESTROYED {
            return Ok(());
        }
        // A collective plugin's watchdog may have broken its comm (a peer never
        // arrived). When it let go because a peer died or aborted (the core raised
        // its stop flag), that peer is the error to report, not the release.
        if let Err(e) = self.colls.status() {
            self.shared.check_peers()?;
            // A plugin that found mismatched calls words them as the core does.
            return Err(super::dispatch::plugin_error(e, self.shared.timeout));
        }
        let mut ops = self.device_ops.lock();
        let mut first = None;
        ops.retain(|d| {
            if !d.is_done() {
                return true;
            }
            if let Some(e) = d.take_error() {
                first.get_or_insert(e);
            }
            false
        });
        if let Some(e) = first {
            return Err(e);
        }
        // A peer that found this rank's call mismatched after this rank's own
        // operations completed: the call was wrong all the same, and a
        // stream-ordered program learns it here. Only that finding: a peer
        // that aborted or left for another reason (a rank done first and
        // calling abort at shutdown, as PyTorch does) is no error of this
        // rank's calls; its next call that needs the peer reports it.
        if self.engine.peer_event_seen() {
            if let Some(e) = self.shared.abort_mismatch() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Plan `tasks` (device buffers) and queue them behind `streams`; return at once.
    ///
    /// # Safety
    /// As [`collective_on`](Self::collective_on), for every stream.
    pub(crate) unsafe fn launch_device(
        &self,
        tasks: Vec<Task>,
        streams: &[RawStream],
    ) -> Result<()> {
        self.check_live()?;
        // As for collectives (`device_on_plugin`).
        let _relaxed = cuda::RelaxedCapture::enter();
        self.device_error()?;
        // The core's device path waits for the users' streams with events the
        // engine queries, which a capture forbids: refused before anything is
        // numbered or queued (the communicator stays usable).
        self.gpu()?.bind()?;
        let mut uniq: smallvec::SmallVec<[RawStream; 2]> = streams.iter().copied().collect();
        uniq.sort_unstable_by_key(|s| *s as usize);
        uniq.dedup();
        for &s in &uniq {
            if crate::device::order::is_capturing(s)? {
                // Collectives of no elements move nothing: nothing to capture.
                let moves = tasks.iter().any(|t| match t {
                    Task::P2p(_) => true,
                    Task::Coll(c) => c.count > 0 || c.v.is_some(),
                });
                if !moves {
                    return Ok(());
                }
                return Err(capture_refusal(crate::plan::label(&tasks)));
            }
        }
        let mut tasks = tasks;
        self.number_p2p(&mut tasks);
        let numbered: smallvec::SmallVec<[crate::plan::P2pTask; 2]> = tasks
            .iter()
            .filter_map(|t| match t {
                Task::P2p(p) => Some(*p),
                Task::Coll(_) => None,
            })
            .collect();
        // SAFETY: the caller's contract.
        let r = unsafe { self.launch_device_numbered(tasks, streams) };
        if r.is_err() {
            // Nothing was posted: the numbers go back, or every later check
            // with these peers would fail.
            self.unnumber_p2p(&numbered);
        }
        r
    }

    /// [`launch_device`](Self::launch_device) of numbered tasks.
    ///
    /// # Safety
    /// As [`launch_device`](Self::launch_device).
    unsafe fn launch_device_numbered(&self, tasks: Vec<Task>, streams: &[RawStream]) -> Result<()> {
        let label = crate::plan::label(&tasks);
        let gpu = self.gpu()?.clone();
        gpu.bind()?;
        gpu.warn_if_lazy_loading();
        // The kernels were loaded when the device was opened; this only reports a
        // kernel that could not be built, here rather than from the progress thread.
        for t in &tasks {
            if let Task::Coll(c) = t {
                if c.kind.reduces() {
                    gpu.kernels()?.prepare(c.dtype, c.op)?;
                }
            }
        }
        let mut uniq: Vec<RawStream> = streams.to_vec();
        uniq.sort_unstable_by_key(|s| *s as usize);
        uniq.dedup();
        // On one stream, the plan's independent local copies (and in-place inputs
        // set aside) go on that stream: no engine round trip waits for them.
        let single = match uniq.as_slice() {
            [s] => Some(*s),
            _ => None,
        };
        let mut plans = crate::plan::plan(
            tasks,
            &self.plan_cfg,
            &self.schedules,
            self.rank(),
            self.nranks(),
            Some(&gpu),
            self.needs_staging(),
            single.is_some(),
        )?;
        if let Some(s) = single {
            for d in plans.iter_mut().filter_map(|p| p.device.as_mut()) {
                for (dst, src, n) in std::mem::take(&mut d.prelude) {
                    // SAFETY: `src` is a validated device buffer of the task, `dst` one
                    // of the plan's `inputs`, which return to the pool only when the
                    // plan ends, after its gate (below) has passed this copy.
                    unsafe { gpu.copy_local(dst, src, n, s)? };
                }
            }
        }
        let mut gate = Vec::with_capacity(uniq.len());
        let mut signals: Vec<Signal> = Vec::with_capacity(uniq.len());
        for &s in &uniq {
            let e = Event::new().map_err(Error::cuda)?;
            // SAFETY: `s` is a live stream of this device (the caller's contract).
            unsafe { e.record(s) }.map_err(Error::cuda)?;
            gate.push(e);
            if single.is_some() {
                for d in plans.iter().filter_map(|p| p.device.as_ref()) {
                    for &(dst, src, n) in &d.hoisted {
                        // SAFETY: both lie in the task's validated device buffers, which
                        // the caller keeps valid until the stream passes the operation;
                        // nothing else in the operation touches them (`plan::hoist`),
                        // and the stream wait queued next orders the copy before the
                        // user's later work.
                        unsafe { gpu.copy_local(dst, src, n, s)? };
                    }
                }
            }
            // SAFETY: as above.
            signals.push(unsafe { gpu.flags().wait_on(s)? });
        }
        if plans.is_empty() {
            return Ok(()); // nothing to move: the signals fire as they drop
        }
        let first = plans.first_mut().expect("not empty");
        first
            .device
            .get_or_insert_with(|| PlanDevice::new(gpu.clone()))
            .gate = gate;
        let last = plans.last_mut().expect("not empty");
        last.device
            .get_or_insert_with(|| PlanDevice::new(gpu.clone()))
            .signals = signals;
        let done = self.submit_plans(plans, false, label)?;
        tracing::trace!(target: "ferrocx::device", "launched on {} stream(s)", uniq.len());
        self.device_ops.lock().push(done);
        // The progress thread drives it: the stream may wait for that thread.
        self.note_host_bound(|| "the core's path (its progress thread drives the copies)".into());
        Ok(())
    }

    /// How many device calls of this communicator queued work that may wait
    /// for a host thread: the core's own path (its progress thread drives the
    /// copies) or a collective plugin's that did not say its work ends by
    /// itself (`launch_bounded`, e.g. ce's barrier routes, which its watchdog
    /// releases). Read it before and after a call: a caller about to hold the
    /// CUDA driver (a synchronous copy to pageable memory) while such a call
    /// is in flight must wait for the call's stream first, or the host thread
    /// the stream waits for cannot run. Calls run by self-timed kernels
    /// (ce's LL, Simple and point-to-point kernels) do not count.
    pub fn host_bound_calls(&self) -> u64 {
        self.host_bound.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A device call queued work that may wait for a host thread (`why`,
    /// logged at debug: what a blocking caller then waits for).
    pub(crate) fn note_host_bound(&self, why: impl FnOnce() -> String) {
        tracing::debug!(target: "ferrocx::device", "a device call may wait for a host thread: {}", why());
        self.host_bound
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Group<'_> {
    fn add_device(&mut self, t: Task, stream: RawStream) {
        self.tasks.push(t);
        self.streams.push(stream);
    }

    /// Add a collective on device buffers ordered on `stream` (see
    /// [`Communicator::collective_on`]). A group holds either host or device buffers.
    ///
    /// # Safety
    /// As [`Communicator::collective_on`].
    pub unsafe fn collective_on(
        &mut self,
        spec: &CollSpec,
        send: u64,
        recv: u64,
        stream: impl AsStream,
    ) -> Result<()> {
        let t = self.comm.device_coll_task(spec, send, recv, false)?;
        self.add_device(t.into(), stream.raw_stream());
        Ok(())
    }

    /// Add an in-place collective on a device buffer ordered on `stream`.
    ///
    /// # Safety
    /// As [`Communicator::collective_on`].
    pub unsafe fn collective_in_place_on(
        &mut self,
        spec: &CollSpec,
        buf: u64,
        stream: impl AsStream,
    ) -> Result<()> {
        let t = self.comm.device_coll_task(spec, buf, buf, true)?;
        self.add_device(t.into(), stream.raw_stream());
        Ok(())
    }

    /// Add a device send ordered on `stream`.
    ///
    /// # Safety
    /// As [`Communicator::collective_on`].
    pub unsafe fn send_on(
        &mut self,
        buf: u64,
        len: usize,
        peer: usize,
        stream: impl AsStream,
    ) -> Result<()> {
        let op = self.comm.device_p2p(Dir::Send, buf, len, peer)?;
        self.add_device(Task::P2p(op), stream.raw_stream());
        Ok(())
    }

    /// Add a device receive ordered on `stream`.
    ///
    /// # Safety
    /// As [`Communicator::collective_on`].
    pub unsafe fn recv_on(
        &mut self,
        buf: u64,
        len: usize,
        peer: usize,
        stream: impl AsStream,
    ) -> Result<()> {
        let op = self.comm.device_p2p(Dir::Recv, buf, len, peer)?;
        self.add_device(Task::P2p(op), stream.raw_stream());
        Ok(())
    }
}

/// `what`, on a stream being captured, reached the core's device path: it
/// waits for the users' streams with events the engine queries, which a
/// capture forbids.
pub(super) fn capture_refusal(what: impl std::fmt::Display) -> Error {
    Error::Unsupported(format!(
        "{what} on a stream being captured into a CUDA graph: no collective plugin took it (ce runs captured calls with FERROCX_CE_GRAPH_KERNELS=1, its default, within its limits: docs/ENV.md), and the core's own device path cannot be captured; nothing was queued"
    ))
}
