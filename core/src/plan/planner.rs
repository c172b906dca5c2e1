//! Group → plans. Collective tasks are planned first, in call order, so
//! every rank makes the same decisions (budget cuts, channel choice) from
//! the same inputs; point-to-point tasks, which differ per rank, come last
//! and influence nothing shared (the bug of seed 000: when they came first,
//! ranks cut and picked channels differently and hung).

use super::cache::ScheduleCache;
use super::check::Check;
use super::local::Bases;
use super::own_block;
use super::pairs::Pairs;
use super::runner::{Runner, ScratchBuf};
use super::task::{CollTask, P2pTask, Task};
use crate::algo::{self, Algo, Buf, CollArgs, CollKind, Part, Region, Schedule, Stage, Xfer};
use crate::config;
use crate::device::mem::DevBuf;
use crate::device::order::Signal;
use crate::device::Gpu;
use crate::error::Result;
use crate::plugin::Dir;
use crate::types::{DataType, RedOp};
use ferrocx_sdk::cuda::Event;
use std::sync::Arc;

/// Most channels a communicator may use.
pub(crate) const MAX_CHANNELS: usize = 32;

/// Planner settings (from the environment at communicator creation).
#[derive(Debug, Clone)]
pub(crate) struct PlanConfig {
    /// Channels (connections per peer and direction) a collective may stripe over.
    pub nchannels: usize,
    /// Largest message of a pipelined or scratch-using algorithm, in bytes.
    pub chunk_bytes: usize,
    /// The same for device buffers: every stage costs an event round trip, so
    /// fewer, larger stages.
    pub device_chunk_bytes: usize,
    /// Bytes of collective work per plan before a cut.
    pub budget_bytes: usize,
    /// A collective gets one more channel per this many bytes.
    pub channel_bytes: usize,
    /// The same for device collectives that do not reduce: one channel's copies
    /// already fill the link, and each channel adds a round of handshakes and events.
    pub device_channel_bytes: usize,
    /// Forced algorithm (`FERROCX_ALGO`), where it applies.
    pub algo: Option<Algo>,
    /// Check every collective's call against the neighbours' (`FERROCX_CHECK_CALLS`
    /// not `0`; `deferred` changes only what shm-coll does).
    pub check_calls: bool,
    /// Added to the channel of host-memory runners (`CommShared::host_channels`):
    /// 0, or `nchannels` where host and device work keep apart.
    pub host_channel_base: usize,
}

impl PlanConfig {
    /// The core's algorithm for a collective of `kind` moving `bytes` per
    /// rank on `nranks` ranks: the call's own (`CollSpec::algo`), else
    /// `FERROCX_ALGO` where it applies, else the choice by size. What the
    /// planner runs and what selection tables print.
    pub fn algo_for(
        &self,
        call: Option<Algo>,
        kind: CollKind,
        nranks: usize,
        bytes: usize,
    ) -> Algo {
        call.or(self.algo.filter(|a| a.applies(kind)))
            .unwrap_or_else(|| algo::choose(kind, nranks, bytes))
    }

    pub fn from_env() -> Result<Self> {
        let algo = match std::env::var("FERROCX_ALGO") {
            Ok(s) if !s.is_empty() => {
                Some(Algo::parse(&s).ok_or_else(|| crate::Error::Config {
                    var: "FERROCX_ALGO".into(),
                    message: format!(
                        "unknown algorithm '{s}' (known: {})",
                        Algo::ALL.map(|a| a.name()).join(", ")
                    ),
                })?)
            }
            _ => None,
        };
        let call_check =
            ferrocx_sdk::env::call_check(&|n: &str| std::env::var(n).ok()).map_err(|e| {
                crate::Error::Config {
                    var: "FERROCX_CHECK_CALLS".into(),
                    message: e.message().to_string(),
                }
            })?;
        Ok(PlanConfig {
            nchannels: config::env_usize("FERROCX_NCHANNELS", 2)?.clamp(1, MAX_CHANNELS),
            chunk_bytes: config::env_usize("FERROCX_ALGO_CHUNK", 1 << 20)?.max(64),
            device_chunk_bytes: config::env_usize("FERROCX_DEVICE_CHUNK", 16 << 20)?.max(64),
            budget_bytes: config::env_usize("FERROCX_PLAN_BUDGET", 256 << 20)?.max(1),
            channel_bytes: config::env_usize("FERROCX_CHANNEL_BYTES", 1 << 20)?.max(1),
            device_channel_bytes: config::env_usize("FERROCX_DEVICE_CHANNEL_BYTES", 64 << 20)?
                .max(1),
            algo,
            check_calls: call_check.compares(),
            host_channel_base: 0,
        })
    }
}

/// Runners in plan order. Runners of one channel (a lane) run one after the
/// other, in this order; lanes run side by side. One flat vector (finished
/// runners leave `None`) instead of a queue per channel: fewer allocations
/// per call.
pub(crate) struct Plan {
    pub runners: Vec<Option<Runner>>,
    /// Runners not finished yet.
    pub left: usize,
    /// Device work: the gate before it starts, the signals after it ends.
    pub device: Option<PlanDevice>,
}

/// What a plan with device buffers needs around its runners.
pub(crate) struct PlanDevice {
    pub gpu: Arc<Gpu>,
    /// Events on the users' streams: the plan starts once all are done.
    pub gate: Vec<Event>,
    /// Gate passed and prelude copies done.
    pub open: bool,
    /// (dst, src, bytes): in-place inputs copied aside once the gate opens.
    pub prelude: Vec<(usize, usize, usize)>,
    /// The device buffers those copies go to (alive as long as the plan).
    pub inputs: Vec<DevBuf>,
    /// (dst, src, bytes): local copies independent of everything else in the
    /// plan, for the launcher to queue on the user's stream (see `hoist`).
    pub hoisted: Vec<super::hoist::Copy>,
    /// Released when the plan ends (or fails: dropping fires them too).
    pub signals: Vec<Signal>,
}

impl PlanDevice {
    pub fn new(gpu: Arc<Gpu>) -> Self {
        PlanDevice {
            gpu,
            gate: Vec::new(),
            open: false,
            prelude: Vec::new(),
            inputs: Vec::new(),
            hoisted: Vec::new(),
            signals: Vec::new(),
        }
    }

    /// Whether the plan may start: the users' streams reached the launch point and
    /// the prelude copies are done. Never blocks.
    pub fn ready(&mut self) -> Result<bool> {
        if self.open {
            return Ok(true);
        }
        self.gpu.bind()?;
        for e in &self.gate {
            if !e.done().map_err(crate::Error::cuda)? {
                return Ok(false);
            }
        }
        self.gate.clear();
        if self.prelude.is_empty() {
            self.open = true;
            tracing::trace!(target: "ferrocx::device", "plan gate open");
            return Ok(true);
        }
        for (d, s, n) in std::mem::take(&mut self.prelude) {
            // SAFETY: `s` is a validated device buffer of the task, `d` one of
            // `inputs`; both live as long as the plan.
            unsafe { self.gpu.copy_local(d, s, n, self.gpu.stream())? };
        }
        self.gate.push(self.gpu.mark()?);
        Ok(false)
    }

    /// The plan ended: release the users' streams.
    pub fn finish(&mut self) {
        tracing::trace!(target: "ferrocx::device", "plan done: releasing {} stream(s)", self.signals.len());
        for s in &mut self.signals {
            s.fire();
        }
    }
}

impl Drop for PlanDevice {
    fn drop(&mut self) {
        // Staged inputs go back to the pool: later users queue behind on the stream.
        for b in self.inputs.drain(..) {
            self.gpu.put_dev(b);
        }
    }
}

impl Plan {
    /// A plan with no runners: it completes once every plan ahead of it has.
    pub(crate) fn new() -> Self {
        Plan {
            runners: Vec::new(),
            left: 0,
            device: None,
        }
    }

    /// Release the device streams waiting for this plan (no-op for host plans).
    pub fn finish_device(&mut self) {
        if let Some(d) = &mut self.device {
            d.finish();
        }
    }

    fn add(&mut self, r: Runner) {
        self.left += 1;
        self.runners.push(Some(r));
    }

    /// Whether `ok` holds for every (channel, peer, dir) the plan uses.
    pub fn all_needs(&self, mut ok: impl FnMut((usize, usize, Dir)) -> bool) -> bool {
        self.runners.iter().flatten().all(|r| {
            r.check
                .iter()
                .flat_map(|c| c.needs())
                .all(|(peer, dir)| ok((r.channel, peer, dir)))
                && r.sched.stages.iter().all(|st| {
                    st.sends.iter().all(|x| ok((r.channel, x.peer, Dir::Send)))
                        && st.recvs.iter().all(|x| ok((r.channel, x.peer, Dir::Recv)))
                })
        })
    }

    /// A plan of this plan's first call check alone. Run before connecting
    /// what the plan needs: ranks that disagree about a call (a root, a peer)
    /// may wait forever for connections the other side never makes.
    ///
    /// Only the first: it is the first message of the plan on its channel on
    /// every rank, whether that rank checks ahead or (its connections all made)
    /// inside the call. A later collective's check follows an earlier one's
    /// data on a shared channel: sent ahead by one rank and in order by its
    /// neighbour, it would meet that data (a group of several collectives,
    /// seen once small sends left the core's connections for shm-coll).
    pub fn first_check_only(&self) -> Option<Plan> {
        let (r, c) = self.first_check()?;
        let mut p = Plan::new();
        p.add(check_runner(r.channel, r.nranks, c.again()));
        Some(p)
    }

    fn first_check(&self) -> Option<(&Runner, &Check)> {
        self.runners
            .iter()
            .flatten()
            .find_map(|r| r.check.as_ref().map(|c| (r, c)))
    }

    /// A plan of one call check alone (on `channel`), for a call the core does
    /// not run itself (a collective plugin runs it); `None` for a single rank.
    pub fn check_alone(
        fp: ferrocx_algo::Fingerprint,
        rank: usize,
        nranks: usize,
        channel: usize,
    ) -> Option<Plan> {
        let mut p = Plan::new();
        p.add(check_runner(channel, nranks, Check::new(fp, rank, nranks)?));
        Some(p)
    }

    /// Forget the first call check (it ran ahead: [`first_check_only`](Self::first_check_only)).
    pub fn drop_first_check(&mut self) {
        if let Some(r) = self
            .runners
            .iter_mut()
            .flatten()
            .find(|r| r.check.is_some())
        {
            r.check = None;
        }
    }

    /// The (channel, peer, dir) connections the plan's first call check uses.
    pub fn check_needs(&self, out: &mut Vec<(usize, usize, Dir)>) {
        if let Some((r, c)) = self.first_check() {
            out.extend(c.needs().map(|(peer, dir)| (r.channel, peer, dir)));
        }
    }

    /// The call mismatch some runner has seen, if any.
    pub fn mismatch(&self) -> Option<crate::Error> {
        self.runners.iter().flatten().find_map(|r| r.mismatch())
    }

    /// Every (channel, peer, dir) connection the plan uses.
    pub fn needs(&self, out: &mut Vec<(usize, usize, Dir)>) {
        for r in self.runners.iter().flatten() {
            if let Some(c) = &r.check {
                out.extend(c.needs().map(|(peer, dir)| (r.channel, peer, dir)));
            }
            for st in &r.sched.stages {
                out.extend(st.sends.iter().map(|x| (r.channel, x.peer, Dir::Send)));
                out.extend(st.recvs.iter().map(|x| (r.channel, x.peer, Dir::Recv)));
            }
        }
    }
}

/// The element ranges of an in-place input that must be set aside: all of
/// it, but an all-to-all's own block (`own_block`).
fn staged_ranges(t: &CollTask, rank: usize) -> Vec<(usize, usize)> {
    if t.kind == CollKind::AllToAll {
        own_block::staged_ranges(t.send_elems, rank, t.count)
    } else {
        vec![(0, t.send_elems)]
    }
}

/// Copy an in-place input aside (for algorithms that cannot alias): the
/// `ranges` (elements), each at its own offset in a buffer of the input's size.
fn stage_input(t: &CollTask, ranges: &[(usize, usize)]) -> Arc<ScratchBuf> {
    let es = t.dtype.size();
    let mut buf: ScratchBuf = vec![0u64; (t.send_elems * es).div_ceil(8)];
    for &(off, n) in ranges {
        super::local::copy_in(&mut buf, off * es, t.send + off * es, n * es);
    }
    Arc::new(buf)
}

/// A runner that only runs call check `c` on `channel` (no transfers of its own).
fn check_runner(channel: usize, nranks: usize, c: Check) -> Runner {
    let empty = Arc::new(Schedule {
        stages: Vec::new(),
        scratch: 0,
    });
    Runner::new(
        channel,
        empty,
        Bases::absolute(),
        DataType::U8,
        RedOp::Sum,
        nranks,
        true,
        None,
    )
    .with_check(Some(c))
}

/// Plan a group's tasks. `hoist`: device plans hand their independent local
/// copies to the launcher (in `PlanDevice::hoisted`) instead of running them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    tasks: Vec<Task>,
    cfg: &PlanConfig,
    cache: &ScheduleCache,
    rank: usize,
    nranks: usize,
    gpu: Option<&Arc<Gpu>>,
    stage_device: bool,
    hoist: bool,
) -> Result<Vec<Plan>> {
    let nch = cfg.nchannels;
    let mut plans = Vec::new();
    let mut cur = Plan::new();
    let mut load = vec![0usize; nch];
    let mut budget = 0usize;
    let mut p2p = Vec::new();
    for t in tasks {
        let t = match t {
            Task::Coll(t) => t,
            Task::P2p(p) => {
                p2p.push(p);
                continue;
            }
        };
        let bytes = t.plan_bytes();
        if budget > 0 && budget.saturating_add(bytes) > cfg.budget_bytes {
            plans.push(std::mem::replace(&mut cur, Plan::new()));
            load.iter_mut().for_each(|l| *l = 0);
            budget = 0;
        }
        budget = budget.saturating_add(bytes);
        // Device collectives that only move data fill the link from one
        // channel; reductions overlap one channel's transfer with another's
        // reduction kernel, so they keep the host rule.
        let per_channel = if t.device && !t.kind.reduces() {
            cfg.device_channel_bytes
        } else {
            cfg.channel_bytes
        };
        let nparts = (bytes / per_channel).clamp(1, nch);
        // Least-loaded channels, ties to the lowest index: the same on every rank.
        let mut order = [0usize; MAX_CHANNELS];
        order.iter_mut().enumerate().for_each(|(i, c)| *c = i);
        let order = &mut order[..nch];
        order.sort_by_key(|&c| (load[c], c));
        let chosen = &mut order[..nparts];
        chosen.sort_unstable();
        let algo = cfg.algo_for(t.algo, t.kind, nranks, bytes);
        let dev_gpu = match (t.device, gpu) {
            (false, _) => None,
            (true, Some(g)) => Some(g.clone()),
            (true, None) => {
                return Err(crate::Error::Unsupported(
                    "device buffers need a GPU (none is open for this communicator)".into(),
                ))
            }
        };
        let esize = t.dtype.size();
        let staged = if t.stage_send {
            staged_ranges(&t, rank)
        } else {
            Vec::new()
        };
        let (staging, send) = match &dev_gpu {
            None => {
                let staging = t.stage_send.then(|| stage_input(&t, &staged));
                let send = staging.as_ref().map_or(t.send, |b| b.as_ptr() as usize);
                (staging, send)
            }
            Some(g) => {
                let d = cur.device.get_or_insert_with(|| PlanDevice::new(g.clone()));
                if t.stage_send {
                    g.bind()?;
                    let buf = g.dev_buf(t.send_elems * esize)?;
                    let at = buf.ptr();
                    for &(off, n) in &staged {
                        d.prelude
                            .push((at + off * esize, t.send + off * esize, n * esize));
                    }
                    d.inputs.push(buf);
                    (None, at)
                } else {
                    (None, t.send)
                }
            }
        };
        // The own block of a staged all-to-all was not set aside: drop its
        // copy onto itself (`own_block`).
        let own_block = t.stage_send && t.kind == CollKind::AllToAll;
        for (i, &ch) in chosen.iter().enumerate() {
            let sched = cache.get(&CollArgs {
                kind: t.kind,
                algo,
                rank,
                nranks,
                count: t.count,
                root: t.root,
                part: Part {
                    index: i,
                    of: nparts,
                },
                chunk: (if t.device {
                    cfg.device_chunk_bytes
                } else {
                    cfg.chunk_bytes
                } / esize)
                    .max(1),
                v: t.v.as_deref(),
            });
            let sched = if own_block {
                own_block::drop_own_copies(&sched, rank, t.count).map_or(sched, Arc::new)
            } else {
                sched
            };
            load[ch] += bytes / nparts + 1;
            let bases = Bases {
                send,
                recv: t.recv,
                scratch: 0,
                esize,
            };
            let sched = match (&dev_gpu, hoist) {
                (Some(_), true) => match super::hoist::split(&sched, &bases) {
                    Some((keep, copies)) => {
                        cur.device
                            .as_mut()
                            .expect("device plan")
                            .hoisted
                            .extend(copies);
                        Arc::new(keep)
                    }
                    None => sched,
                },
                _ => sched,
            };
            // The call check travels with the first part (the same on every rank).
            let check = (cfg.check_calls && i == 0)
                .then(|| Check::new(t.fingerprint(), rank, nranks))
                .flatten();
            let r = Runner::new(
                ch + if t.device { 0 } else { cfg.host_channel_base },
                sched,
                bases,
                t.dtype,
                t.op,
                nranks,
                true,
                staging.clone(),
            )
            .with_check(check);
            cur.add(match &dev_gpu {
                Some(g) => r.on_device(g.clone(), stage_device)?,
                None => r,
            });
        }
    }
    if !p2p.is_empty() {
        let ch = (0..nch).min_by_key(|&c| (load[c], c)).unwrap_or(0);
        // Host and device operations run in separate runners (one stage each).
        for device in [false, true] {
            let mut st = Stage::default();
            let ops: Vec<&P2pTask> = p2p.iter().filter(|t| t.device == device).collect();
            let data = |i: usize| {
                let t = ops[i];
                let buf = if t.dir == Dir::Send {
                    Buf::Send
                } else {
                    Buf::Recv
                };
                Xfer {
                    peer: t.peer,
                    region: Region::new(buf, t.ptr, t.len),
                }
            };
            let mut pairs = None;
            if cfg.check_calls {
                let desc: Vec<_> = ops
                    .iter()
                    .map(|t| (t.dir == Dir::Send, t.peer, t.len, t.seq))
                    .collect();
                let (p, sends, recvs) = Pairs::new(rank, &desc, data);
                (st.sends, st.recvs) = (sends, recvs);
                pairs = Some(p);
            } else {
                for (i, t) in ops.iter().enumerate() {
                    match t.dir {
                        Dir::Send => st.sends.push(data(i)),
                        Dir::Recv => st.recvs.push(data(i)),
                    }
                }
            }
            if st.sends.is_empty() && st.recvs.is_empty() {
                continue;
            }
            let sched = Arc::new(Schedule {
                stages: vec![st],
                scratch: 0,
            });
            let r = Runner::new(
                ch + if device { 0 } else { cfg.host_channel_base },
                sched,
                Bases::absolute(),
                DataType::U8,
                RedOp::Sum,
                nranks,
                false,
                None,
            );
            let r = match pairs {
                Some(p) => r.with_pairs(p),
                None => r,
            };
            if device {
                let g = gpu.ok_or_else(|| {
                    crate::Error::Unsupported(
                        "device buffers need a GPU (none is open for this communicator)".into(),
                    )
                })?;
                cur.device.get_or_insert_with(|| PlanDevice::new(g.clone()));
                cur.add(r.on_device(g.clone(), stage_device)?);
            } else {
                cur.add(r);
            }
        }
    }
    if cur.left > 0 {
        plans.push(cur);
    }
    Ok(plans)
}
