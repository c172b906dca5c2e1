//! A runner executes one schedule on one channel: posts a stage's transfers,
//! waits for them (without blocking: the engine's sweep calls `advance`),
//! runs its local steps, goes on to the next stage.

use super::local::{self, Bases};
use crate::algo::{Schedule, Xfer};
use crate::device::mem::copy_async;
use crate::device::Gpu;
use crate::error::Error;
use crate::plugin::Dir;
use crate::types::{DataType, RedOp};
use ferrocx_sdk::cuda::Event;
use std::sync::Arc;

pub(crate) use super::post::{Post, Poster};

/// Below this a send is assumed eager (copied out at once by the transport).
const EAGER_BYTES: usize = 16 * 1024;

/// Scratch memory, 8-byte aligned, recycled through the engine's pool.
pub(crate) type ScratchBuf = Vec<u64>;

/// Result of [`Runner::advance`].
pub(crate) enum Step {
    /// Waiting for transfers.
    Blocked,
    /// Every stage done.
    Done,
    /// A stage failed.
    Failed(Error),
}

pub(crate) struct Runner {
    pub channel: usize,
    pub sched: Arc<Schedule>,
    pub bases: Bases,
    pub dtype: DataType,
    pub op: RedOp,
    pub nranks: usize,
    /// Collectives break the communicator on failure; point-to-point
    /// errors (a receive too small) only fail the request.
    pub fatal: bool,
    pub stage: usize,
    pub cur: Option<Arc<super::StageDone>>,
    pub scratch: Option<ScratchBuf>,
    /// Keeps a staged copy of an in-place input alive.
    pub _staging: Option<Arc<ScratchBuf>>,
    /// Reused list of transfers (no allocation per stage once warm).
    posts: Vec<Post>,
    /// Device buffers: local steps run on the GPU, stream-ordered.
    pub dev: Option<DevRun>,
    /// The call check, until the previous rank's call is known to agree.
    pub check: Option<super::check::Check>,
    /// The call check of sends and receives (their fingerprints travel in the stage).
    pub pairs: Option<super::pairs::Pairs>,
}

/// Where a device runner is within its current stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Next: stage device data bound for host-only transports, then post
    /// (the transfers whose connections exist; the others in later batches).
    Start,
    /// A batch built (and staged copies queued): post it once the copies are
    /// done, then back to `Start` while transfers are left.
    Post,
    /// Waiting for the transfers; then copy staged receives in and run the locals.
    Transfer,
}

/// The device side of a runner: the GPU work it queued last, and where its
/// channel's scratch and pinned staging are (made before launch; see
/// [`Gpu::ensure_channel`]).
pub(crate) struct DevRun {
    gpu: Arc<Gpu>,
    pending: Option<Event>,
    phase: Phase,
    started: bool,
    /// (host address, bytes) of the channel's pinned staging.
    stage: (usize, usize),
    /// (device address, pinned address, bytes) of this stage's staged receives.
    staged_recvs: Vec<(usize, usize, usize)>,
    /// Which of this stage's transfers (receives, then sends) are posted;
    /// empty before its first batch.
    posted: Vec<bool>,
    /// Bytes of the pinned staging this stage's batches took.
    staged: usize,
    /// The stage's earlier batches (the last is the runner's `cur`).
    batches: Vec<Arc<super::StageDone>>,
    /// How many of this stage's local steps were queued before its transfers
    /// (they touch nothing the transfers do, so they run alongside them), and
    /// the event after them when they queued GPU work.
    early: usize,
    early_done: Option<Event>,
}

impl DevRun {
    /// Grow the channel's buffers now, on the launching thread: allocations can
    /// synchronize the device, and once a user stream waits for this plan, a
    /// synchronizing call on the progress thread would deadlock. `staging`: some
    /// peer's transport takes no device memory.
    pub fn new(
        gpu: Arc<Gpu>,
        channel: usize,
        sched: &Schedule,
        esize: usize,
        staging: bool,
    ) -> Result<Self, Error> {
        // Staging for the worst case: every transfer of a stage through a host-only transport.
        let stage = if staging {
            sched
                .stages
                .iter()
                .map(|st| {
                    st.sends
                        .iter()
                        .chain(st.recvs.iter())
                        .map(|x| x.region.len * esize)
                        .sum::<usize>()
                })
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        gpu.ensure_channel(channel, sched.scratch * esize, stage)?;
        Ok(DevRun {
            gpu,
            pending: None,
            phase: Phase::Start,
            started: false,
            stage: (0, 0),
            staged_recvs: Vec::new(),
            posted: Vec::new(),
            staged: 0,
            batches: Vec::new(),
            early: 0,
            early_done: None,
        })
    }
}

impl Runner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        channel: usize,
        sched: Arc<Schedule>,
        bases: Bases,
        dtype: DataType,
        op: RedOp,
        nranks: usize,
        fatal: bool,
        staging: Option<Arc<ScratchBuf>>,
    ) -> Self {
        Runner {
            channel,
            sched,
            bases,
            dtype,
            op,
            nranks,
            fatal,
            stage: 0,
            cur: None,
            scratch: None,
            _staging: staging,
            posts: Vec::new(),
            dev: None,
            check: None,
            pairs: None,
        }
    }

    /// Check each receive against the fingerprint its send put before the data.
    pub fn with_pairs(mut self, pairs: super::pairs::Pairs) -> Self {
        self.pairs = Some(pairs);
        self
    }

    /// Check the call against the previous rank's before using received data.
    pub fn with_check(mut self, check: Option<super::check::Check>) -> Self {
        self.check = check;
        self
    }

    /// Post the call check (first of all) and see whether it came back: `Err` on a
    /// mismatch. Once it agrees the check is dropped.
    fn poll_check(&mut self, poster: &mut dyn Poster) -> Result<(), Error> {
        if let Some(c) = self.check.as_mut() {
            c.start(self.channel, poster);
            if c.poll()? {
                self.check = None;
            }
        }
        Ok(())
    }

    /// The error to report for a failed transfer: the call mismatch behind it, if
    /// the previous rank's fingerprint already said so.
    fn cause(&self, e: Error) -> Error {
        let pairs = || {
            self.pairs
                .as_ref()
                .and_then(|p| p.verdict().err())
                .filter(|e| matches!(e, Error::Mismatch { .. }))
        };
        self.check
            .as_ref()
            .and_then(|c| c.arrived_mismatch())
            .or_else(pairs)
            .unwrap_or(e)
    }

    /// The call mismatch this runner has seen, if any (the engine prefers it to a
    /// transport failure it explains).
    pub fn mismatch(&self) -> Option<Error> {
        self.check.as_ref().and_then(|c| c.arrived_mismatch())
    }

    /// Run on device memory: locals as GPU work on `gpu`'s executor stream.
    /// `staging`: some peer's transport takes no device memory.
    pub fn on_device(mut self, gpu: Arc<Gpu>, staging: bool) -> Result<Self, Error> {
        let dev = DevRun::new(gpu, self.channel, &self.sched, self.bases.esize, staging)?;
        self.dev = Some(dev);
        Ok(self)
    }

    /// Scratch bytes this runner needs.
    pub fn scratch_bytes(&self) -> usize {
        self.sched.scratch * self.bases.esize
    }

    /// Give the runner its scratch buffer (before the first `advance`).
    pub fn set_scratch(&mut self, buf: ScratchBuf) {
        self.bases.scratch = buf.as_ptr() as usize;
        self.scratch = Some(buf);
    }

    fn locals(&self, stage: usize) {
        let st = &self.sched.stages[stage];
        // SAFETY: regions lie in validated user buffers (checked against the
        // counts when the task was made, kept alive by the request's contract)
        // or in this runner's scratch; the stage's transfers are complete.
        unsafe { local::run(&st.locals, &self.bases, self.dtype, self.op, self.nranks) };
    }

    /// Move as far as possible without blocking.
    pub fn advance(&mut self, poster: &mut dyn Poster) -> Step {
        if let Err(e) = self.poll_check(poster) {
            return Step::Failed(e);
        }
        if self.dev.is_some() {
            return match self.advance_device(poster) {
                Ok(s) => s,
                Err(e) => {
                    // Batches of the stage still in flight would go on into
                    // buffers the plan's end releases: only breaking the
                    // communicator stops them (its connections are freed).
                    let in_flight = self.cur.is_some()
                        || self.dev.as_ref().is_some_and(|d| !d.batches.is_empty());
                    self.fatal |= in_flight;
                    Step::Failed(self.cause(e))
                }
            };
        }
        loop {
            if let Some(done) = &self.cur {
                if !done.is_done() {
                    return Step::Blocked;
                }
                if let Some(e) = done.take_error() {
                    self.cur = None;
                    return Step::Failed(self.cause(e));
                }
                if self.check.is_some() {
                    // Received data is used only once the calls are known to agree.
                    return Step::Blocked;
                }
                if let Some(Err(e)) = self.pairs.take().map(|p| p.verdict()) {
                    self.cur = None;
                    return Step::Failed(e);
                }
                self.cur = None;
                self.locals(self.stage);
                self.stage += 1;
            }
            let Some(st) = self.sched.stages.get(self.stage) else {
                if self.check.is_some() {
                    return Step::Blocked;
                }
                return Step::Done;
            };
            if st.is_local() {
                self.locals(self.stage);
                self.stage += 1;
                continue;
            }
            let addr = |x: &Xfer, dir| {
                let (ptr, len) = self.bases.addr(&x.region);
                Post {
                    channel: self.channel,
                    peer: x.peer,
                    dir,
                    ptr,
                    len,
                }
            };
            // Small messages go out first (they are eager: the sooner posted,
            // the sooner the peer has them); with large ones, receives first,
            // so a rendezvous transport advertises where data should go before
            // this rank spends its time copying.
            self.posts.clear();
            let recvs = st.recvs.iter().map(|x| addr(x, Dir::Recv));
            let sends = st.sends.iter().map(|x| addr(x, Dir::Send));
            let eager = st
                .sends
                .iter()
                .all(|x| x.region.len * self.bases.esize < EAGER_BYTES);
            if eager {
                self.posts.extend(sends.chain(recvs));
            } else {
                self.posts.extend(recvs.chain(sends));
            }
            self.cur = Some(poster.post(&self.posts));
        }
    }

    /// [`advance`](Self::advance) for device buffers. Per stage: copy device data
    /// bound for host-only transports into pinned memory (GPU copy, event), post the
    /// transfers, wait for them, copy staged receives back and queue the local steps
    /// (copies, NVRTC reductions) on the executor stream, wait for that event.
    fn advance_device(&mut self, poster: &mut dyn Poster) -> Result<Step, Error> {
        let dev = self.dev.as_mut().expect("device runner");
        dev.gpu.bind()?;
        if !dev.started {
            // The channel's buffers as they are now (grown, if at all, before launch).
            let ((scratch, _), stage) = dev.gpu.channel(self.channel);
            self.bases.scratch = scratch;
            dev.stage = stage;
            dev.started = true;
        }
        loop {
            let dev = self.dev.as_mut().expect("device runner");
            if let Some(ev) = &dev.pending {
                if !ev.done().map_err(Error::cuda)? {
                    return Ok(Step::Blocked);
                }
                dev.pending = None;
            }
            match dev.phase {
                Phase::Start => {
                    let Some(st) = self.sched.stages.get(self.stage) else {
                        if self.check.is_some() {
                            return Ok(Step::Blocked);
                        }
                        if let Some(Err(e)) = self.pairs.take().map(|p| p.verdict()) {
                            return Ok(Step::Failed(e));
                        }
                        return Ok(Step::Done);
                    };
                    if st.is_local() {
                        self.device_locals()?;
                        self.stage += 1;
                        continue;
                    }
                    // The early locals go with the stage's first batch, whenever
                    // its first connection comes.
                    let first = self
                        .dev
                        .as_ref()
                        .is_some_and(|d| !d.posted.iter().any(|&p| p));
                    if !self.build_device_posts(poster)? {
                        // Every transfer left waits for its connection.
                        return Ok(Step::Blocked);
                    }
                    if first {
                        self.queue_early_locals()?;
                    }
                    let dev = self.dev.as_mut().expect("device runner");
                    dev.phase = Phase::Post;
                }
                Phase::Post => {
                    tracing::trace!(target: "ferrocx::device", "channel {} stage {}: posting {} transfer(s)", self.channel, self.stage, self.posts.len());
                    let batch = poster.post(&self.posts);
                    let dev = self.dev.as_mut().expect("device runner");
                    if let Some(earlier) = self.cur.replace(batch) {
                        dev.batches.push(earlier);
                    }
                    dev.phase = if dev.posted.iter().all(|&p| p) {
                        Phase::Transfer
                    } else {
                        Phase::Start
                    };
                }
                Phase::Transfer => {
                    let dev = self.dev.as_mut().expect("device runner");
                    let done = self.cur.as_ref().expect("posted");
                    if !done.is_done() || !dev.batches.iter().all(|b| b.is_done()) {
                        return Ok(Step::Blocked);
                    }
                    let failed = dev
                        .batches
                        .iter()
                        .chain([done])
                        .find_map(|b| b.take_error());
                    dev.batches.clear();
                    dev.posted.clear();
                    if let Some(e) = failed {
                        self.cur = None;
                        return Ok(Step::Failed(self.cause(e)));
                    }
                    if self.check.is_some() {
                        // Received data is used only once the calls are known to agree.
                        return Ok(Step::Blocked);
                    }
                    self.cur = None;
                    tracing::trace!(target: "ferrocx::device", "channel {} stage {}: transfers done", self.channel, self.stage);
                    let dev = self.dev.as_mut().expect("device runner");
                    let stream = dev.gpu.stream();
                    for &(d, h, n) in &dev.staged_recvs {
                        // SAFETY: `d` lies in a validated device buffer or our scratch;
                        // `h` in our pinned staging, which lives until the event below.
                        unsafe { copy_async(d, h, n, stream)? };
                    }
                    dev.phase = Phase::Start;
                    self.device_locals()?;
                    self.stage += 1;
                }
            }
        }
    }

    /// Queue the current stage's local steps (those not queued early) on the
    /// executor stream and wait for them.
    fn device_locals(&mut self) -> Result<(), Error> {
        let st = &self.sched.stages[self.stage];
        let dev = self.dev.as_mut().expect("device runner");
        let early = std::mem::take(&mut dev.early);
        let early_done = dev.early_done.take();
        // SAFETY: regions lie in validated device buffers or this runner's device
        // scratch; the stage's transfers (and staged copies) are complete or ordered
        // before on the same stream.
        let queued = unsafe {
            local::run_device(
                &st.locals[early..],
                &self.bases,
                self.dtype,
                self.op,
                self.nranks,
                &dev.gpu,
            )?
        };
        // Wait for what this stage queued on the executor stream: an event after
        // it all, or the one after the early steps (most likely complete by now:
        // they ran beside the transfers). Nothing queued: no event round trip.
        dev.pending = if queued || !dev.staged_recvs.is_empty() {
            Some(dev.gpu.mark()?)
        } else {
            early_done
        };
        Ok(())
    }

    /// Queue the longest prefix of the stage's local steps that neither read
    /// what the stage receives nor write what it sends or receives (e.g. the
    /// root's own copy in broadcast, a rank's own block in all-to-all): they
    /// then run on the executor stream while the transport's copies run.
    fn queue_early_locals(&mut self) -> Result<(), Error> {
        let st = &self.sched.stages[self.stage];
        let early = early_prefix(st, &self.bases);
        if early == 0 {
            return Ok(());
        }
        let dev = self.dev.as_mut().expect("device runner");
        // SAFETY: as in `device_locals`; these steps touch no region a transfer of
        // this stage reads or writes, so they may run while the transfers do.
        let queued = unsafe {
            local::run_device(
                &st.locals[..early],
                &self.bases,
                self.dtype,
                self.op,
                self.nranks,
                &dev.gpu,
            )?
        };
        dev.early = early;
        dev.early_done = if queued { Some(dev.gpu.mark()?) } else { None };
        Ok(())
    }

    /// Build the next batch of the current stage's transfers: those not yet
    /// posted whose connections exist (which transport carries a transfer
    /// decides whether it is staged), with those through host-only
    /// transports redirected to pinned staging (sends copied there first, on
    /// the GPU). `false` (nothing built) while every transfer left waits for
    /// its connection: a group's transfer on a connection still being made
    /// must not hold back one whose peer is ready (docs/ARCHITECTURE.md,
    /// Connections).
    fn build_device_posts(&mut self, poster: &mut dyn Poster) -> Result<bool, Error> {
        let st = &self.sched.stages[self.stage];
        let dev = self.dev.as_mut().expect("device runner");
        if dev.posted.is_empty() {
            dev.posted = vec![false; st.recvs.len() + st.sends.len()];
            dev.staged = 0;
            dev.staged_recvs.clear();
            dev.batches.clear();
        }
        // Send/receive fingerprints are host memory: posted as they are.
        let pairs = self.pairs.as_ref();
        let base = dev.stage.0;
        let stream = dev.gpu.stream();
        self.posts.clear();
        let mut copies = false;
        // Receives first: a rendezvous transport can advertise where data goes.
        let all = st.recvs.iter().map(|x| (x, Dir::Recv));
        for (i, (x, dir)) in all
            .chain(st.sends.iter().map(|x| (x, Dir::Send)))
            .enumerate()
        {
            if dev.posted[i] {
                continue;
            }
            let Some(direct) = poster.device_ok(self.channel, x.peer, dir) else {
                continue; // its connection is still being made
            };
            let (ptr, len) = self.bases.addr(&x.region);
            let staged = !direct && !pairs.is_some_and(|p| p.holds(ptr));
            let ptr = if staged {
                if dev.staged + len > dev.stage.1 {
                    return Err(Error::Cuda(format!(
                        "internal: {} bytes to stage but the channel has {}",
                        dev.staged + len,
                        dev.stage.1
                    )));
                }
                let h = base + dev.staged;
                dev.staged += len;
                if dir == Dir::Send {
                    // SAFETY: `ptr` is in a validated device buffer or our scratch,
                    // `h` in our pinned staging (checked above).
                    unsafe { copy_async(h, ptr, len, stream)? };
                    copies = true;
                } else {
                    dev.staged_recvs.push((ptr, h, len));
                }
                h
            } else {
                ptr
            };
            dev.posted[i] = true;
            self.posts.push(Post {
                channel: self.channel,
                peer: x.peer,
                dir,
                ptr,
                len,
            });
        }
        if self.posts.is_empty() {
            return Ok(false);
        }
        if copies {
            dev.pending = Some(dev.gpu.mark()?);
        }
        Ok(true)
    }
}

/// How many of `st`'s local steps, from the first, neither read a region the
/// stage receives into nor write one it sends from or receives into (by
/// address, so in-place aliasing counts): those may run while the stage's
/// transfers do. A prefix, so no step moves ahead of one it might depend on.
pub(crate) fn early_prefix(st: &crate::algo::Stage, bases: &Bases) -> usize {
    use local::overlap;
    let recvs: Vec<_> = st.recvs.iter().map(|x| bases.span(&x.region)).collect();
    let sends: Vec<_> = st.sends.iter().map(|x| bases.span(&x.region)).collect();
    let free = |l: &crate::algo::Local| {
        let (reads, write) = l.regions();
        let w = bases.span(write);
        reads
            .iter()
            .flatten()
            .all(|r| recvs.iter().all(|&x| !overlap(bases.span(r), x)))
            && recvs.iter().chain(sends.iter()).all(|&x| !overlap(w, x))
    };
    st.locals.iter().take_while(|l| free(l)).count()
}

#[cfg(test)]
mod tests {
    use super::early_prefix;
    use crate::algo::{Buf, Local, Region, Stage, Xfer};
    use crate::plan::local::Bases;

    fn bases(in_place: bool) -> Bases {
        Bases {
            send: 0x10000,
            recv: if in_place { 0x10000 } else { 0x20000 },
            scratch: 0x30000,
            esize: 4,
        }
    }
    fn r(buf: Buf, off: usize, len: usize) -> Region {
        Region::new(buf, off, len)
    }

    #[test]
    fn the_roots_own_copy_runs_beside_the_send() {
        // Broadcast at the root, out of place: send the buffer, copy it to recv.
        let st = Stage {
            sends: vec![Xfer {
                peer: 1,
                region: r(Buf::Send, 0, 100),
            }],
            recvs: vec![],
            locals: vec![Local::Copy {
                dst: r(Buf::Recv, 0, 100),
                src: r(Buf::Send, 0, 100),
            }],
        };
        assert_eq!(early_prefix(&st, &bases(false)), 1);
        // In place the copy's target is the buffer being sent: it must wait.
        assert_eq!(early_prefix(&st, &bases(true)), 0);
    }

    #[test]
    fn an_all_to_all_keeps_its_own_block_early_but_not_what_it_receives() {
        let st = Stage {
            sends: vec![Xfer {
                peer: 1,
                region: r(Buf::Send, 50, 50),
            }],
            recvs: vec![Xfer {
                peer: 1,
                region: r(Buf::Recv, 50, 50),
            }],
            locals: vec![
                Local::Copy {
                    dst: r(Buf::Recv, 0, 50),
                    src: r(Buf::Send, 0, 50),
                },
                // Reads what arrives: must wait, and so must everything after it.
                Local::Reduce {
                    dst: r(Buf::Scratch, 0, 50),
                    a: r(Buf::Recv, 50, 50),
                    b: r(Buf::Send, 0, 50),
                },
                Local::Copy {
                    dst: r(Buf::Scratch, 100, 10),
                    src: r(Buf::Send, 0, 10),
                },
            ],
        };
        assert_eq!(early_prefix(&st, &bases(false)), 1);
    }

    #[test]
    fn nothing_early_that_writes_a_send_or_receive_region() {
        let st = Stage {
            sends: vec![Xfer {
                peer: 1,
                region: r(Buf::Scratch, 0, 10),
            }],
            recvs: vec![Xfer {
                peer: 1,
                region: r(Buf::Scratch, 10, 10),
            }],
            locals: vec![Local::Finish {
                dst: r(Buf::Scratch, 5, 10),
            }],
        };
        assert_eq!(early_prefix(&st, &bases(false)), 0);
        let st = Stage {
            locals: vec![Local::Copy {
                dst: r(Buf::Scratch, 0, 10),
                src: r(Buf::Recv, 0, 10),
            }],
            ..st
        };
        assert_eq!(early_prefix(&st, &bases(false)), 0);
    }
}
