//! The [`Communicator`]: a set of ranks that exchange data.

mod coll;
mod device;
mod dispatch;
mod form;
mod group;
mod p2p_route;
mod shrink;
mod split;
mod windows;

pub use group::Group;

use crate::bootstrap::{Bootstrap, JobSecret, LaunchInfo, RankInfo};
use crate::collective::Collectives;
use crate::config;
use crate::engine::{Engine, EngineStats, Request, Submitted};
use crate::error::{Error, Result};
use crate::plan::{CollSpec, P2pTask, PlanConfig, ScheduleCache, Task, Tasks};
use crate::plugin::{Dir, PluginInstance, PluginReport, Registry, TransportFilter};
use crate::proxy::{connect, ProgressThread, ServiceThread};
use crate::registration::{RegHandle, Registrations};
use crate::shared::CommShared;
use ferrocx_sdk::abi::{FxP2pOp, FxPeerInfo};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LIVE: u8 = 0;
const DESTROYED: u8 = 1;
const ABORTED: u8 = 2;

/// How to create a communicator explicitly (see [`Communicator::from_env`] for launchers).
#[derive(Debug, Clone)]
pub struct CommConfig {
    /// Rendezvous address `host:port` (rank 0 listens there).
    pub root: String,
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
    /// Bound for every wait; default `FERROCX_TIMEOUT` or 300 s.
    pub timeout: Option<Duration>,
    /// The job secret that authenticates the bootstrap's connections (the same on every
    /// rank); default `FERROCX_SECRET` or `FERROCX_SECRET_FILE`, else none (allowed, with
    /// a warning: anyone who can reach `root` can join).
    pub secret: Option<JobSecret>,
    /// The CUDA device this rank uses: `None` picks as `FERROCX_DEVICE` says (else
    /// the local rank modulo the device count), `Some(-1)` none, `Some(d)` device `d`
    /// (a split keeps its parent's; NCCL's API passes the caller's current device).
    pub device: Option<i32>,
}

/// A communicator: ranks `0..nranks` exchanging host buffers over plugins.
///
/// Thread-safe; operations from several threads are serialized per connection.
/// Every method returns an error (never panics) on bad input or after
/// [`destroy`](Self::destroy) / [`abort`](Self::abort).
pub struct Communicator {
    shared: Arc<CommShared>,
    engine: Arc<Engine>,
    service: Mutex<Option<ServiceThread>>,
    progress: Mutex<Option<ProgressThread>>,
    regs: Arc<Registrations>,
    plan_cfg: PlanConfig,
    schedules: ScheduleCache,
    report: Vec<PluginReport>,
    state: AtomicU8,
    /// This rank's GPU, when CUDA is usable here (`FERROCX_DEVICE`).
    gpu: Option<Arc<crate::device::Gpu>>,
    /// Stream-ordered operations not yet known finished (their errors surface later).
    device_ops: Mutex<Vec<Arc<crate::plan::StageDone>>>,
    /// Whether device transfers to some peer are staged (computed on first use).
    staging: std::sync::OnceLock<bool>,
    /// Collective plugins taking part in this communicator's calls.
    colls: Collectives,
    /// Serializes the hooks of the collective plugins' comms (the ABI's
    /// promise); holds the host point-to-point bids they gave.
    coll_serial: Mutex<crate::collective::bids::HostP2p>,
    /// Symmetric windows.
    windows: crate::window::WindowTable,
    /// Splits so far (names each split's rendezvous messages).
    splits: AtomicU64,
    /// Shrinks so far (names each shrink's messages).
    shrinks: AtomicU64,
    /// Per peer: sends to it and receives from it so far on the core's path
    /// (point-to-point call checks), host memory then device memory: the two
    /// run on channels of their own, so each kind pairs in its own order.
    p2p_seq: Mutex<Vec<[u64; 4]>>,
    /// The job secret this communicator was made with; its splits use it too.
    secret: Option<JobSecret>,
    /// Device-networking plugins found (opened only by `devnet_open`).
    devnet_libs: Vec<Arc<crate::devnet::DevnetLib>>,
    /// Device calls that queued work which may wait for a host thread
    /// ([`host_bound_calls`](Self::host_bound_calls)).
    host_bound: AtomicU64,
    /// Relaxed from the start of `drop` until this, the last field, is
    /// dropped: the other fields' frees (a plugin's `comm_destroy` after
    /// `abort`, cached device buffers) are ferrocx's own driver calls, never
    /// part of a capture on another thread. Inactive until then.
    dropping: ferrocx_sdk::cuda::RelaxedCapture,
}

/// This rank's GPU: `FERROCX_DEVICE`, else the local rank modulo the device count;
/// none without a CUDA driver or with `FERROCX_DEVICE=-1`. A device that exists but
/// cannot be opened is an error.
fn open_gpu(local_rank: usize, chosen: Option<i32>) -> Result<Option<Arc<crate::device::Gpu>>> {
    let dev = match chosen {
        None => crate::device::choose_device(local_rank)?,
        Some(d) if d < 0 => None,
        Some(d) => Some(crate::device::check_device(d)?),
    };
    let Some(dev) = dev else {
        return Ok(None);
    };
    let gpu = crate::device::Gpu::open(dev)?;
    tracing::info!(target: "ferrocx::device", "using CUDA device {dev} (PCI {:#x})", gpu.pci());
    Ok(Some(gpu))
}

fn peer_info(r: &RankInfo, nranks: usize, comm_hash: u64) -> FxPeerInfo {
    let mut p = FxPeerInfo::zeroed();
    p.rank = r.rank as i32;
    p.nranks = nranks as i32;
    p.local_rank = r.local_rank as i32;
    p.pid = r.pid as i32;
    p.host_hash = r.host_hash;
    p.comm_hash = comm_hash;
    p.cuda_device = r.cuda_device;
    p.set_host_name(&r.host_name);
    p
}

impl Communicator {
    /// Create from the launch environment (`fxrun`, `mpirun`, `srun`, `torchrun`; see `docs/ENV.md`).
    pub fn from_env() -> Result<Self> {
        crate::log::init();
        let l = LaunchInfo::from_env()?;
        tracing::debug!(target: "ferrocx::comm", "launch from {}: rank {} of {} at {}", l.source, l.rank, l.nranks, l.root);
        Self::with_config(CommConfig {
            root: l.root,
            rank: l.rank,
            nranks: l.nranks,
            timeout: None,
            secret: None,
            device: None,
        })
    }

    /// Create with an explicit rendezvous address, rank and size.
    pub fn new(root: &str, rank: usize, nranks: usize) -> Result<Self> {
        Self::with_config(CommConfig {
            root: root.to_string(),
            rank,
            nranks,
            timeout: None,
            secret: None,
            device: None,
        })
    }

    /// Create from a [`CommConfig`].
    pub fn with_config(cfg: CommConfig) -> Result<Self> {
        Self::create(cfg, None)
    }

    /// [`with_config`](Self::with_config); rank 0 calls `on_bound` with its
    /// rendezvous address once it listens (a split picks its port that way).
    pub(crate) fn create(
        cfg: CommConfig,
        on_bound: Option<&dyn Fn(std::net::SocketAddr)>,
    ) -> Result<Self> {
        crate::log::init();
        if cfg.nranks == 0 {
            return Err(Error::invalid("nranks must be at least 1"));
        }
        if cfg.rank >= cfg.nranks {
            return Err(Error::invalid(format!(
                "rank {} out of range: the communicator has {} ranks",
                cfg.rank, cfg.nranks
            )));
        }
        let timeout = match cfg.timeout {
            Some(t) => t,
            None => config::timeout_from_env()?,
        };
        let secret = match cfg.secret {
            Some(s) => Some(s),
            None => config::secret_from_env()?,
        };
        // Local checks first, so a misconfigured rank fails with its own message.
        let filter = TransportFilter::from_env()?;
        let coll_filter = crate::collective::filter_from_env()?;
        let registry = Registry::discover()?;
        for name in coll_filter.required() {
            if !registry.collectives.iter().any(|p| &p.name == name) {
                return Err(Error::PluginLoad {
                    path: name.clone(),
                    message: format!(
                        "FERROCX_COLLECTIVES names '{name}', which is not loaded (collective plugins loaded: {}; skipped: {})",
                        if registry.collectives.is_empty() { "none".to_string() } else {
                            registry.collectives.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                        },
                        registry.skipped_summary()
                    ),
                });
            }
        }
        for name in filter.required() {
            if !registry.plugins.iter().any(|p| &p.name == name) {
                return Err(Error::PluginLoad {
                    path: name.clone(),
                    message: format!(
                        "FERROCX_TRANSPORTS names '{name}', which is not loaded (loaded: {}; skipped: {})",
                        registry.plugins.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
                        registry.skipped_summary()
                    ),
                });
            }
        }
        let abort = Arc::new(AtomicU32::new(0));
        let mut report = registry.report.clone();
        let mut plugins = Vec::new();
        for lib in registry.plugins.iter().filter(|p| filter.allows(&p.name)) {
            match PluginInstance::init(lib.clone(), timeout, abort.clone()) {
                Ok(p) => plugins.push(Arc::new(p)),
                Err(e) if filter.required().contains(&lib.name) => return Err(e),
                Err(e) => {
                    tracing::warn!(target: "ferrocx::plugin", "skipping plugin '{}': {e}", lib.name);
                    if let Some(r) = report
                        .iter_mut()
                        .find(|r| r.name == lib.name && r.skipped.is_none())
                    {
                        r.skipped = Some(format!("init failed: {e}"));
                    }
                }
            }
        }
        let skipped = report
            .iter()
            .filter_map(|r| {
                r.skipped
                    .as_ref()
                    .map(|w| format!("{} ({}): {w}", r.name, r.source))
            })
            .collect::<Vec<_>>()
            .join("; ");

        let bootstrap = Bootstrap::init_with(
            &cfg.root,
            cfg.rank,
            cfg.nranks,
            -1,
            timeout,
            secret.as_ref(),
            on_bound,
        )?;
        let comm_hash = bootstrap.comm_hash();
        let gpu = open_gpu(bootstrap.peers()[cfg.rank].local_rank, cfg.device)?;
        // Every rank's device and its PCI location (the same GPU has the same PCI id
        // in every process), for transports that pair GPUs (p2p).
        let mine = match &gpu {
            Some(g) => [g.device(), g.pci()],
            None => [-1, -1],
        };
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&mine[0].to_le_bytes());
        bytes[4..].copy_from_slice(&mine[1].to_le_bytes());
        let devices = bootstrap.all_gather(&bytes)?;
        let peer_info: Vec<ferrocx_sdk::abi::FxPeerInfo> = bootstrap
            .peers()
            .iter()
            .zip(&devices)
            .map(|(r, d)| {
                let mut p = peer_info(r, cfg.nranks, comm_hash);
                let word = |i: usize| {
                    d.get(i..i + 4)
                        .map_or(-1, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                };
                p.cuda_device = word(0);
                p.cuda_pci = word(4);
                p
            })
            .collect();
        let mut plan_cfg = PlanConfig::from_env()?;
        // Every rank sees every rank's device: all decide alike.
        let host_channels = if peer_info.iter().any(|p| p.cuda_device >= 0) {
            plan_cfg.nchannels
        } else {
            0
        };
        plan_cfg.host_channel_base = host_channels;
        let shared = Arc::new(CommShared {
            rank: cfg.rank,
            nranks: cfg.nranks,
            comm_hash,
            peer_info,
            plugins,
            filter,
            skipped: if skipped.is_empty() {
                "none".into()
            } else {
                skipped
            },
            bootstrap,
            timeout,
            abort,
            stop: Default::default(),
            status: Default::default(),
            host_channels,
        });
        let status = shared.status.clone();
        if !plan_cfg.check_calls {
            status.calls_unchecked();
        }
        shared
            .bootstrap
            .set_status_source(Box::new(move || status.status().encode()));
        crate::signal::watch(&shared)?;
        let (colls, left_out) = Collectives::start(&registry.collectives, &coll_filter, &shared)?;
        shared
            .status
            .name_plugins(colls.plugins().iter().map(|p| p.shared_name()).collect());
        for (name, why) in left_out {
            if let Some(r) = report
                .iter_mut()
                .find(|r| r.name == name && r.kind == "collective" && r.skipped.is_none())
            {
                r.skipped = Some(why);
            }
        }
        let regs = Arc::new(Registrations::default());
        let engine = Engine::new(
            shared.clone(),
            regs.clone(),
            plan_cfg.nchannels + host_channels,
        );
        let weak = Arc::downgrade(&engine);
        shared.bootstrap.set_event_hook(Box::new(move || {
            if let Some(e) = weak.upgrade() {
                e.notify_peer_event();
            }
        }));
        let service = ServiceThread::start(shared.clone(), connection_hooks(&engine))?;
        let progress = ProgressThread::start(cfg.rank, engine.clone())?;
        tracing::info!(
            target: "ferrocx::comm",
            "rank {}/{} ready; transports: {}; collective plugins: {}",
            cfg.rank,
            cfg.nranks,
            shared.plugins.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            if colls.is_empty() {
                "none".to_string()
            } else {
                colls.plugins().iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
            }
        );
        Ok(Communicator {
            shared,
            engine,
            service: Mutex::new(Some(service)),
            progress: Mutex::new(Some(progress)),
            regs,
            plan_cfg,
            schedules: ScheduleCache::default(),
            report,
            state: AtomicU8::new(LIVE),
            gpu,
            device_ops: Mutex::new(Vec::new()),
            staging: std::sync::OnceLock::new(),
            colls,
            coll_serial: Mutex::new(crate::collective::bids::HostP2p::new(cfg.nranks)),
            devnet_libs: registry.devnets.clone(),
            windows: crate::window::WindowTable::default(),
            splits: AtomicU64::new(0),
            shrinks: AtomicU64::new(0),
            p2p_seq: Mutex::new(vec![[0; 4]; cfg.nranks]),
            secret,
            host_bound: AtomicU64::new(0),
            dropping: ferrocx_sdk::cuda::RelaxedCapture::inactive(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.shared.rank
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.shared.nranks
    }

    /// The bound applied to every wait.
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// What plugin discovery found (loaded and skipped, with reasons).
    pub fn plugin_report(&self) -> &[PluginReport] {
        &self.report
    }

    /// Names of the initialized transports, in discovery order.
    pub fn transports(&self) -> Vec<String> {
        self.shared
            .plugins
            .iter()
            .map(|p| p.name().to_string())
            .collect()
    }

    /// Information about every rank (host, pid, …) from the bootstrap.
    pub fn peers(&self) -> &[RankInfo] {
        self.shared.bootstrap.peers()
    }

    pub(crate) fn check_live(&self) -> Result<()> {
        match self.state.load(Ordering::Acquire) {
            LIVE => Ok(()),
            DESTROYED => Err(Error::Destroyed("communicator was destroyed".into())),
            _ => Err(Error::Destroyed("communicator was aborted".into())),
        }
    }

    #[inline]
    fn check_peer(&self, peer: usize, verb: &str) -> Result<()> {
        if peer >= self.nranks() {
            return Err(self.peer_out_of_range(peer, verb));
        }
        Ok(())
    }

    /// [`check_peer`](Self::check_peer)'s error, out of line (with the
    /// choice of its verb, where that is made for it alone).
    #[cold]
    #[inline(never)]
    fn peer_out_of_range(&self, peer: usize, verb: &str) -> Error {
        Error::invalid(format!(
            "{verb}: peer rank {peer} out of range: the communicator has {} ranks",
            self.nranks()
        ))
    }

    pub(crate) fn make_op(&self, dir: Dir, ptr: usize, len: usize, peer: usize) -> Result<P2pTask> {
        self.check_live()?;
        let verb = if dir == Dir::Send { "send" } else { "recv" };
        self.check_peer(peer, verb)?;
        Ok(P2pTask {
            dir,
            peer,
            ptr,
            len,
            device: false,
            seq: 0,
        })
    }

    pub(crate) fn make_raw_op(
        &self,
        dir: Dir,
        ptr: usize,
        len: usize,
        peer: usize,
    ) -> Result<P2pTask> {
        let verb = if dir == Dir::Send { "send" } else { "recv" };
        if ptr == 0 && len > 0 {
            return Err(Error::invalid(format!(
                "{verb}: buffer is null but length is {len}"
            )));
        }
        if ptr.checked_add(len).is_none() {
            return Err(Error::invalid(format!(
                "{verb}: {len} bytes at {ptr:#x} wrap around the address space"
            )));
        }
        self.make_op(dir, ptr, len, peer)
    }

    /// Which transport this rank would use to send host memory to `peer`
    /// (already connected or not) on the core's path.
    pub fn transport_to(&self, peer: usize) -> Result<String> {
        self.transport_for(peer, false)
    }

    /// The same for device memory (`send_on` and device collectives the core runs).
    pub fn device_transport_to(&self, peer: usize) -> Result<String> {
        self.transport_for(peer, true)
    }

    fn transport_for(&self, peer: usize, device: bool) -> Result<String> {
        self.check_live()?;
        self.check_peer(peer, "send")?;
        if peer == self.rank() {
            return Err(Error::invalid(format!(
                "rank {peer} is this rank: its sends to itself are local copies, over no transport"
            )));
        }
        let channel = if device { 0 } else { self.shared.host_channels };
        if let Some(t) = self.engine.transport_of(peer, Dir::Send, channel) {
            return Ok(t);
        }
        self.shared
            .candidates()
            .choose_for(peer, self.shared.host_channel(channel))
            .map(|p| p.name().to_string())
    }

    /// Plan `tasks`, connect what they need, run them, wait.
    /// `tasks` is borrowed (and emptied where the core takes them), not
    /// moved: a group's inline ops are a few hundred bytes, copied at every
    /// move on a path of a few hundred nanoseconds (issue 18).
    pub(crate) fn run_tasks(&self, tasks: &mut Tasks) -> Result<()> {
        self.launch(tasks, true)?.wait()
    }

    /// Plan `tasks`, connect what they need, start them (borrowed as by
    /// [`run_tasks`](Self::run_tasks)).
    pub(crate) fn start_tasks(&self, tasks: &mut Tasks) -> Result<Request> {
        self.launch(tasks, false)
    }

    fn launch(&self, tasks: &mut Tasks, driving: bool) -> Result<Request> {
        self.check_live()?;
        match self.host_p2p_on_plugins(tasks, driving)? {
            Some(req) => Ok(req),
            None => self.launch_core(std::mem::take(tasks).into_vec(), driving),
        }
    }

    /// Plan `tasks` (numbered) on the core's path, connect what they need, start them.
    fn launch_core(&self, mut tasks: Vec<Task>, driving: bool) -> Result<Request> {
        self.number_p2p(&mut tasks);
        let (plans, label) = self.plan_core(tasks)?;
        self.start_plans(plans, label, driving)
    }

    /// The core's plans for `tasks` (numbered), and the label of the call.
    pub(super) fn plan_core(
        &self,
        tasks: Vec<Task>,
    ) -> Result<(Vec<crate::plan::Plan>, crate::plan::Label)> {
        let label = crate::plan::label(&tasks);
        let plans = crate::plan::plan(
            tasks,
            &self.plan_cfg,
            &self.schedules,
            self.rank(),
            self.nranks(),
            self.gpu.as_ref(),
            false,
            false,
        )?;
        Ok((plans, label))
    }

    /// Connect what `plans` need, queue them, return their request.
    pub(super) fn start_plans(
        &self,
        plans: Vec<crate::plan::Plan>,
        label: crate::plan::Label,
        driving: bool,
    ) -> Result<Request> {
        let done = self.submit_plans(plans, driving, label)?;
        Ok(Request::new(self.engine.clone(), done, driving))
    }

    /// Give each send (receive) its number among this rank's sends to (receives
    /// from) its peer, in posting order: what its call check compares.
    pub(super) fn number_p2p(&self, tasks: &mut [Task]) {
        if !tasks.iter().any(|t| matches!(t, Task::P2p(_))) {
            return; // collectives only: no lock
        }
        let mut counts = self.p2p_seq.lock();
        for t in tasks.iter_mut() {
            if let Task::P2p(p) = t {
                let c = &mut counts[p.peer][seq_slot(p)];
                p.seq = *c;
                *c += 1;
            }
        }
    }

    /// Take back the numbers [`number_p2p`](Self::number_p2p) gave `tasks`,
    /// whose launch failed before anything was posted. Exact while no other
    /// thread numbered operations to the same peers in between (a
    /// communicator's calls are ordered by its caller).
    pub(super) fn unnumber_p2p(&self, ops: &[P2pTask]) {
        let mut counts = self.p2p_seq.lock();
        for p in ops.iter().rev() {
            let c = &mut counts[p.peer][seq_slot(p)];
            if *c == p.seq + 1 {
                *c = p.seq;
            }
        }
    }

    /// Queue plans, making the connections they need first.
    /// `label` names the operation in status reports (`Communicator::status_report`).
    pub(crate) fn submit_plans(
        &self,
        plans: Vec<crate::plan::Plan>,
        driving: bool,
        label: crate::plan::Label,
    ) -> Result<Arc<crate::plan::StageDone>> {
        let status = &self.shared.status;
        match self.engine.submit(plans, driving) {
            Ok(Submitted::Queued(done)) => {
                // The common case: one status update per call.
                status.queued_as(label, &done);
                Ok(done)
            }
            Ok(Submitted::Missing(plans, missing)) => {
                status.begin(label);
                let r = self.connect_and_submit(plans, missing, driving);
                match &r {
                    Ok(done) => status.queued(done),
                    Err(_) => status.failed(),
                }
                r
            }
            Err(e) => {
                status.begin(label);
                status.failed();
                Err(e)
            }
        }
    }

    /// Make the connections `plans` need (their call checks first), then queue them.
    fn connect_and_submit(
        &self,
        mut plans: Vec<crate::plan::Plan>,
        missing: Vec<(usize, usize, Dir)>,
        driving: bool,
    ) -> Result<Arc<crate::plan::StageDone>> {
        let _waiting = self.shared.status.waiting();
        let missing = self.check_before_connecting(&mut plans, missing)?;
        // Plans are queued as soon as the send sides are announced, their
        // operations on each connection starting as it is made (a device
        // stage posts each transfer once its connection exists: its transport
        // decides what is staged through host memory): a peer may post its side of one
        // connection only once an operation on another ended, or once this
        // rank made a later call (on another communicator too).
        // A failure from here on breaks the communicator: the plans cannot be
        // taken back.
        self.begin_connecting(&missing)?;
        let done = match self.engine.submit_connecting(plans, &missing) {
            Ok(done) => done,
            // The setup may have failed already, breaking the engine: the
            // call hears the setup's own error.
            Err(e) => return Err(self.when_made(missing).err().unwrap_or(e)),
        };
        if driving {
            // A blocking call hears a failed setup as itself.
            self.when_made(missing)?;
            self.engine.add_driver();
        }
        Ok(done)
    }

    /// Before making connections a call needs beyond its first check's ring, run
    /// that check alone (over the ring's connections, made first): ranks that
    /// disagree about the call would otherwise wait for connections the others
    /// never make. Returns the connections still to make. The check then leaves
    /// its plan: each rank sends and receives one fingerprint per call (a rank
    /// whose connections all exist checks inside the call, and its neighbours'
    /// early check pairs with that). Later collectives of a group keep their
    /// checks inside the call.
    fn check_before_connecting(
        &self,
        plans: &mut [crate::plan::Plan],
        missing: Vec<(usize, usize, Dir)>,
    ) -> Result<Vec<(usize, usize, Dir)>> {
        // The first plan's first check: later ones stay in their calls
        // (`Plan::first_check_only` says why).
        let mut ring = Vec::new();
        if let Some(p) = plans.first() {
            p.check_needs(&mut ring);
        }
        if ring.is_empty() || missing.iter().all(|m| ring.contains(m)) {
            return Ok(missing);
        }
        let (first, rest): (Vec<_>, Vec<_>) = missing.into_iter().partition(|m| ring.contains(m));
        if !first.is_empty() {
            self.connect(first)?;
        }
        let pre: Vec<_> = plans
            .iter()
            .take(1)
            .filter_map(|p| p.first_check_only())
            .collect();
        let done = match self.engine.submit(pre, true)? {
            Submitted::Queued(done) => done,
            Submitted::Missing(_, still) => {
                return Err(Error::Io(format!(
                    "call check: connections {still:?} missing right after they were established"
                )))
            }
        };
        Request::new(self.engine.clone(), done, true).wait()?;
        if let Some(p) = plans.first_mut() {
            p.drop_first_check();
        }
        Ok(rest)
    }

    /// Establish connections on the service thread; fatal failures break the communicator.
    fn connect(&self, missing: Vec<(usize, usize, Dir)>) -> Result<()> {
        self.begin_connecting(&missing)?;
        self.when_made(missing)
    }

    /// Break the communicator for a failure while connections were being made.
    /// A refused or unreachable peer stays this call's own error (the first
    /// failure may be that peer's abort notice saying the same from its side).
    fn setup_broke(&self, e: Error) -> Error {
        let cause = self.engine.break_with(e.clone());
        match e {
            Error::NoTransport { .. } => e,
            _ => cause,
        }
    }

    /// Run `f` with the service thread (else: the communicator was destroyed).
    fn on_service<R>(&self, f: impl FnOnce(&ServiceThread) -> Result<R>) -> Result<R> {
        match self.service.lock().as_ref() {
            Some(svc) => f(svc),
            None => Err(Error::Destroyed("communicator was destroyed".into())),
        }
    }

    /// Announce the send sides of `missing`; the service thread makes them
    /// and their receive sides from then on. A missing transport does not
    /// break the communicator (nothing was made, and the peers were told); a
    /// failed setup or a dead peer does.
    fn begin_connecting(&self, missing: &[(usize, usize, Dir)]) -> Result<()> {
        if missing.is_empty() {
            return Ok(());
        }
        self.on_service(|svc| svc.begin(missing.to_vec()))
            .map_err(|e| match e {
                Error::Timeout { .. }
                | Error::PeerFailed { .. }
                | Error::Plugin { .. }
                | Error::Bootstrap(_) => self.engine.break_with(e),
                e => e,
            })
    }

    /// Wait until the connections `needs` are made. Peers that never answer
    /// may be blocked in another call waiting for this rank: meanwhile the
    /// crossed check names both calls long before the timeout. A failure has
    /// broken the communicator.
    fn when_made(&self, needs: Vec<(usize, usize, Dir)>) -> Result<()> {
        let mut crossed = crate::status::CrossedCheck::new();
        self.on_service(|svc| {
            svc.when_made(needs, crate::status::CrossedCheck::TICK, || {
                if let Some(e) = crossed.poll(&self.shared.status, &self.shared.bootstrap) {
                    self.engine.break_with(e);
                }
            })
            .map_err(|e| self.setup_broke(e))
        })
    }

    /// Send `buf` to `peer` and wait until the buffer may be reused.
    pub fn send(&self, buf: &[u8], peer: usize) -> Result<()> {
        self.check_live()?;
        self.check_peer(peer, "send")?;
        let op = p2p_route::raw_op(Dir::Send, peer, buf.len(), buf.as_ptr() as usize);
        self.blocking_p2p(&[op], |g| g.send(buf, peer))
    }

    /// Receive exactly `buf.len()` bytes from `peer`.
    pub fn recv(&self, buf: &mut [u8], peer: usize) -> Result<()> {
        self.check_live()?;
        self.check_peer(peer, "recv")?;
        let op = p2p_route::raw_op(Dir::Recv, peer, buf.len(), buf.as_mut_ptr() as usize);
        self.blocking_p2p(&[op], |g| g.recv(buf, peer))
    }

    /// Send `send` to `dest` and receive exactly `recv.len()` bytes from
    /// `src`, as one group of the two (`MPI_Sendrecv`): neither waits for
    /// the other, so ranks that all send and receive around a ring cannot
    /// deadlock. `dest` or `src` may be this rank itself (the bytes are then
    /// copied, where the other is this rank too).
    pub fn sendrecv(&self, send: &[u8], dest: usize, recv: &mut [u8], src: usize) -> Result<()> {
        self.check_live()?;
        self.check_peer(dest, "send")?;
        self.check_peer(src, "recv")?;
        let ops = [
            p2p_route::raw_op(Dir::Send, dest, send.len(), send.as_ptr() as usize),
            p2p_route::raw_op(Dir::Recv, src, recv.len(), recv.as_mut_ptr() as usize),
        ];
        self.blocking_p2p(&ops, |g| {
            g.send(send, dest)?;
            g.recv(recv, src)
        })
    }

    /// A blocking call's sends and receives (`ops`, on buffers the caller
    /// checked): straight to the plugin that wins them all
    /// ([`host_p2p_usual`](Self::host_p2p_usual): no group built), else as
    /// the group `add` fills.
    fn blocking_p2p<'a>(
        &'a self,
        ops: &[FxP2pOp],
        add: impl FnOnce(&mut Group<'a>) -> Result<()>,
    ) -> Result<()> {
        if let Some(r) = self.host_p2p_usual(ops) {
            return r;
        }
        let mut g = self.group_start();
        add(&mut g)?;
        g.group_end()
    }

    /// Open a group (see [`Group`]).
    pub fn group_start(&self) -> Group<'_> {
        Group::new(self)
    }

    /// Register a buffer with every transport that supports registration
    /// (the shm transport then copies straight into it: one copy instead of two).
    /// Registering the same range again increments a reference count.
    pub fn register(&self, buf: &[u8]) -> Result<RegHandle> {
        self.check_live()?;
        self.regs.register(
            &self.shared.plugins,
            buf.as_ptr(),
            buf.len(),
            ferrocx_sdk::abi::FX_MEM_HOST,
        )
    }

    /// Release a registration.
    pub fn deregister(&self, h: RegHandle) -> Result<()> {
        self.check_live()?;
        self.regs.deregister(h)
    }

    /// Number of live registrations (for leak checks).
    pub fn registration_count(&self) -> usize {
        self.regs.count()
    }

    /// Counters for leak checks: plans alive, operations queued, scratch pooled.
    pub fn stats(&self) -> EngineStats {
        self.engine.stats()
    }

    /// Wait until every rank reaches this point (a dissemination barrier of
    /// empty messages over the transports).
    pub fn barrier(&self) -> Result<()> {
        let spec = CollSpec::new(
            crate::algo::CollKind::Barrier,
            crate::types::DataType::U8,
            0,
        );
        let t = self.coll_task(&spec, (0, 0), (0, 0), false)?;
        self.run_tasks(&mut smallvec::smallvec![t.into()])
    }

    /// Wait until every rank reaches this point, out of band over the bootstrap
    /// (slow; for tools, and when the transports are in doubt).
    pub fn barrier_oob(&self) -> Result<()> {
        self.check_live()?;
        self.shared.bootstrap.barrier()
    }

    /// Gather a small byte string from every rank, out of band (slow path for
    /// tools: results tables, timing maxima).
    pub fn all_gather_oob(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.check_live()?;
        self.shared.bootstrap.all_gather(mine)
    }

    /// Where every rank of this communicator is: its last operation, whether it is
    /// still in flight, whether a thread waits in it, e.g. `rank 2 is past
    /// all_reduce(float, sum, 1000) as op #4 and made no further call; ranks 0,1 wait
    /// in broadcast(float, 1000, root 0) as op #5`. Every rank answers from a
    /// background thread, so this works while the others are busy or stuck (ranks
    /// that do not answer within 2 s are named as such); it changes nothing. The
    /// same report is in [`Error::Hang`], and `FERROCX_STATUS_SIGNAL=1` prints it on
    /// SIGUSR1.
    pub fn status_report(&self) -> Result<String> {
        if self.state.load(Ordering::Acquire) != LIVE {
            return Err(Error::Destroyed("communicator was destroyed".into()));
        }
        Ok(self
            .shared
            .status
            .report(&self.shared.bootstrap, self.timeout()))
    }

    fn teardown(&self, why: &str) {
        self.windows.clear(&self.colls);
        self.engine.shutdown(why);
        if let Some(mut p) = self.progress.lock().take() {
            p.join();
        }
        if let Some(mut s) = self.service.lock().take() {
            s.stop();
        }
        self.regs.clear();
    }

    /// Release everything: connections, registrations, threads, plugin contexts' use.
    /// Later calls on this communicator return [`Error::Destroyed`].
    pub fn destroy(&self) -> Result<()> {
        if self
            .state
            .compare_exchange(LIVE, DESTROYED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::Destroyed(
                "communicator was already destroyed or aborted".into(),
            ));
        }
        // ferrocx's own driver calls (waits, frees) are never part of a user's capture.
        let _relaxed = ferrocx_sdk::cuda::RelaxedCapture::enter();
        let broken = self.engine.broken();
        if let Some(r) = ferrocx_sdk::spans::report() {
            // FERROCX_SPANS=1: where this process's device calls spent host time.
            eprintln!("ferrocx rank {}: host time per span\n{r}", self.rank());
        }
        self.teardown("communicator destroyed");
        let closed = {
            let _serial = self.coll_serial.lock();
            self.colls.close()
        };
        // A plugin that checks calls later (shm-coll, `deferred`) reports a
        // difference in the last calls here, which fails the destroy; so does
        // a peer's report of it (a peer that saw it first aborts, and this
        // rank's plugin may then fail its teardown's barrier instead). Other
        // errors of a plugin's teardown (a peer gone first) are only logged.
        let mut mismatch = None;
        for e in closed {
            match dispatch::plugin_error(e, self.shared.timeout) {
                e @ Error::Mismatch { .. } if mismatch.is_none() => mismatch = Some(e),
                e => tracing::warn!(target: "ferrocx::collective", "{e}"),
            }
        }
        let me = self.rank();
        let heard = self
            .engine
            .broken()
            .into_iter()
            .chain(
                self.shared
                    .bootstrap
                    .abort_notice()
                    .map(|(rank, why)| Error::from_abort(rank, &why)),
            )
            // Only a difference this rank's calls are part of: two other
            // ranks' send and receive that disagree are theirs to report.
            .find(
                |e| matches!(e, Error::Mismatch { rank, peer, .. } if *rank == me || *peer == me),
            );
        self.shared.bootstrap.close();
        match broken.or(mismatch).or(heard) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Abort: tell the peers, stop waiting, release everything without waiting for peers.
    pub fn abort(&self) {
        if self
            .state
            .compare_exchange(LIVE, ABORTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let _relaxed = ferrocx_sdk::cuda::RelaxedCapture::enter();
        self.shared.abort.store(1, Ordering::Release);
        self.shared.stop_waits();
        // After a failure, the peers learn its cause with the abort: a peer whose own
        // notice of it comes later (another reader thread) still reports what happened.
        let reason = match self.engine.broken() {
            Some(e) => format!("rank {} called abort after: {e}", self.rank()),
            None => format!("rank {} called abort", self.rank()),
        };
        self.shared.bootstrap.broadcast_abort(&reason);
        self.teardown("communicator aborted");
        self.shared.bootstrap.close();
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // Fields drop after this returns, in order: `dropping`, the last,
        // restores the thread's own mode after all of them.
        self.dropping = ferrocx_sdk::cuda::RelaxedCapture::enter();
        if self.state.load(Ordering::Acquire) == LIVE {
            let _ = self.destroy();
        }
    }
}

/// What the service thread's connection setup needs from `engine`.
fn connection_hooks(engine: &Arc<Engine>) -> connect::Hooks {
    let (a, b, c) = (engine.clone(), engine.clone(), engine.clone());
    connect::Hooks {
        install: Box::new(move |conn| a.add_connections(vec![conn])),
        stopped: Box::new(move || b.usable().err()),
        broke: Box::new(move |e| {
            c.break_with(e);
        }),
    }
}

/// Which of a peer's four counters numbers `p` (`Communicator::p2p_seq`):
/// sends, receives; host memory, then device memory.
fn seq_slot(p: &P2pTask) -> usize {
    usize::from(p.dir == Dir::Recv) + 2 * usize::from(p.device)
}
