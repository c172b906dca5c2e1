//! One communicator of ce: setup (`comm_init`), windows, launches, teardown.

use crate::chain::Chain;
use crate::config::Config;
use crate::driver::{self, Api};
use crate::flags::Flags;
use crate::issue::{self, Xfer};
use crate::notes;
use crate::p2p;
use crate::plan::{self, Batching, Buf, Shape};
use crate::select::{self, Agreed, Exchange, Window};
use crate::setup::{self, Hello};
use crate::sync::{FlagLayout, Mode, Sequencer, Step};
use crate::watch::{self, Expect, What};
use crate::watchdog::{Reader, Watchdog};
use ferrocx_sdk::collective::{Coll, CollDesc, CommInfo, Oob, P2pDesc, P2pOp, WindowDesc};
use ferrocx_sdk::cuda::{self, sys, Stream};
use ferrocx_sdk::device::cuda::CudaDriver;
use ferrocx_sdk::device::{Device, Driver, Reach};
use ferrocx_sdk::kernels::Kernels;
use ferrocx_sdk::spans::{self, Point};
use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::ffi::c_void;
use std::sync::Arc;

/// Per-communicator state.
pub struct CeComm {
    host: Host,
    cfg: Config,
    rank: usize,
    nranks: usize,
    oob: Oob,
    api: Api,
    seq: Sequencer,
    // Dropped in this order: the watchdog (its events), the chain, the flags, the device.
    watchdog: Watchdog,
    /// Orders launches across streams and graphs once a call was captured.
    chain: Chain,
    flags: Option<Flags>,
    /// The reduction kernels, when every rank has them and FERROCX_CE_REDUCE agrees.
    kernels: Option<Kernels>,
    /// What the ranks agreed on for reductions.
    red: Agreed,
    /// LL kernels launched (equal on every rank: routes are).
    ll_calls: u64,
    /// Whether an exchange kernel was launched (the watchdog was told).
    exchanged: bool,
    /// Point-to-point kernels launched (for messages).
    p2p_calls: u64,
    /// Whether the last launch queued only self-timed kernels behind no
    /// pending barrier route (`launch_bounded`).
    bounded: bool,
    /// The stream for local copies beside peer copies (`issue::Side`);
    /// before `dev` (dropped with its context; `None` once destroyed).
    side: Option<issue::Side>,
    dev: Arc<dyn Device>,
}

/// What this rank set up before telling the others.
struct Local {
    api: Api,
    stream: Stream,
    flags: Flags,
    side: issue::Side,
    dev: Arc<dyn Device>,
}

fn local_setup(info: &CommInfo, layout: FlagLayout, scratch: usize) -> PluginResult<Local> {
    cuda::available().map_err(PluginError::unsupported)?;
    let api = Api::load()?;
    let ordinal = info
        .cuda_device
        .ok_or_else(|| PluginError::unsupported("no CUDA device"))?;
    let driver = CudaDriver;
    let dev = driver.device(ordinal)?;
    let _bound = dev.bind()?;
    let me = &info.peers[info.rank];
    for (r, peer) in info.peers.iter().enumerate() {
        if r == info.rank {
            continue;
        }
        // A GPU hidden by CUDA_VISIBLE_DEVICES is still reachable through IPC.
        if let Reach::No(why) = driver.reach(me, peer) {
            return Err(PluginError::unsupported(format!(
                "rank {r}'s GPU is not reachable: {why}"
            )));
        }
    }
    let stream = Stream::new()?;
    let flags = Flags::alloc(&dev, layout, info.rank, &stream, scratch)?;
    let side = issue::Side::new()?;
    Ok(Local {
        api,
        stream,
        flags,
        side,
        dev,
    })
}

/// Round 3 of `comm_init`: the reduction kernels (compiled and loaded now, so
/// no module loads while collectives are in flight), whether every rank has
/// them with the same `FERROCX_CE_ONESHOT_BYTES`, and the scratch every rank
/// has (the smallest). Every rank takes part; reductions run only where all
/// agree; staging uses the agreed scratch either way.
fn reduce_setup(
    host: &Host,
    cfg: &Config,
    info: &CommInfo,
    oob: &Oob,
    scratch: usize,
    capture_api: bool,
) -> PluginResult<(Option<Kernels>, Agreed)> {
    let kernels = if cfg.reduce {
        let ordinal = info.cuda_device.unwrap_or(-1);
        let built = cuda::Context::primary(ordinal)
            .map_err(|e| e.to_string())
            .and_then(|ctx| Kernels::new(&ctx).map_err(|e| e.to_string()))
            // Ranks sharing a GPU split the waiting kernels' one wave.
            .map(|k| k.with_share(setup::ranks_per_gpu(&info.peers)))
            .and_then(|k| k.prepare_all().map(|_| k).map_err(|e| e.to_string()));
        match built {
            Ok(k) => Some(k),
            Err(why) => {
                host.info(format!(
                    "ce on rank {}: no reduction kernels ({why}); all_reduce and reduce_scatter stay with the core",
                    info.rank
                ));
                None
            }
        }
    } else {
        None
    };
    let mut mine = vec![kernels.is_some() as u8];
    mine.extend_from_slice(&(cfg.one_shot_bytes as u64).to_le_bytes());
    mine.extend_from_slice(&(scratch as u64).to_le_bytes());
    mine.push(cfg.stage as u8);
    mine.push(cfg.check_calls as u8);
    mine.push(cfg.stage_needs_check as u8);
    mine.extend_from_slice(&(cfg.direct_bytes as u64).to_le_bytes());
    mine.push(setup::nvlink_to_every_peer(info) as u8);
    // Graph kernels need the driver's capture dependencies (forked captures
    // would otherwise go unordered): without them, the barrier routes.
    mine.push((cfg.graph_kernels && capture_api) as u8);
    let all = oob.all_gather(&mine)?;
    if all.iter().any(|m| m.len() != mine.len()) {
        return Err(PluginError::internal(
            "ce: a rank sent a malformed setup message",
        ));
    }
    let scratch = all
        .iter()
        .map(|m| u64::from_le_bytes(m[9..17].try_into().expect("8 bytes")) as usize)
        .min()
        .unwrap_or(0);
    let same_one_shot = match all.iter().enumerate().find(|(_, m)| m[1..9] != mine[1..9]) {
        Some((r, _)) => {
            host.warn(format!(
                "FERROCX_CE_ONESHOT_BYTES differs between ranks (rank {} has {}, rank {r} another): ce leaves all_reduce and reduce_scatter to the core",
                info.rank, cfg.one_shot_bytes
            ));
            false
        }
        None => true,
    };
    let on = same_one_shot && all.iter().all(|m| m[0] == 1);
    // Notes are checked only where every rank writes them.
    let check_calls = all.iter().all(|m| m[18] == 1);
    if !check_calls && cfg.check_calls {
        host.warn(format!(
            "ce on rank {}: FERROCX_CE_CHECK_CALLS differs between ranks: calls on this communicator are not checked",
            info.rank
        ));
    }
    // Staging only where every rank allows it (a rank that does not must not
    // see its peers pull from a scratch it never filled), and not where a rank
    // allowed it only because ce would check the calls, which it does not.
    let stage = all.iter().all(|m| m[17] == 1) && (check_calls || all.iter().all(|m| m[19] == 0));
    if !stage && cfg.stage {
        host.warn(format!(
            "ce on rank {}: no staging on this communicator (FERROCX_CE_STAGE, FERROCX_CE_CHECK_CALLS or FERROCX_CHECK_CALLS differ between ranks)",
            info.rank
        ));
    }
    // The LL kernel lives in the reduction kernels' modules: only where those
    // are on. (Ranks sharing a GPU run it too — 4 ranks on 2 GPUs passed the
    // matrix — but their spinning kernels take turns on it: slow, correct.)
    // FERROCX_CE_LL_BYTES is equal on every rank (the hello checked it).
    // So does the Simple kernel (FERROCX_CE_SIMPLE_BYTES equal everywhere too).
    let ll_bytes = if on { cfg.ll_bytes } else { 0 };
    let simple_bytes = if on { cfg.simple_bytes } else { 0 };
    // The direct modes run in the Simple kernel, on its rings.
    let same_direct = all.iter().all(|m| m[20..28] == mine[20..28]);
    if !same_direct {
        host.warn(format!(
            "ce on rank {}: FERROCX_CE_DIRECT_BYTES differs between ranks: no direct modes on this communicator",
            info.rank
        ));
    }
    let direct_bytes = if on && simple_bytes > 0 && same_direct {
        cfg.direct_bytes
    } else {
        0
    };
    // LL128 only where every rank may run it (its own GPU, NVLink to every
    // peer; FERROCX_CE_LL128_BYTES is equal everywhere: the hello checked it).
    let ll128_everywhere = all.iter().all(|m| m[28] == 1);
    if !ll128_everywhere && cfg.ll128_bytes > 0 {
        host.info(format!(
            "ce on rank {}: no LL128 kernel on this communicator (a GPU is shared, or a pair of GPUs lacks NVLink or cannot see each other)",
            info.rank
        ));
    }
    let ll128_bytes = if on && ll128_everywhere {
        cfg.ll128_bytes
    } else {
        0
    };
    // Captured calls route alike on every rank only where all agree.
    let graph_kernels = all.iter().all(|m| m[29] == 1);
    if !graph_kernels && cfg.graph_kernels {
        host.warn(format!(
            "ce on rank {}: FERROCX_CE_GRAPH_KERNELS differs between ranks, or a rank's CUDA driver lacks cuStreamGetCaptureInfo_v2 or cuStreamUpdateCaptureDependencies: calls captured into CUDA graphs take the barrier routes",
            info.rank
        ));
    }
    let red = Agreed {
        on,
        scratch,
        one_shot_bytes: cfg.one_shot_bytes,
        stage,
        check_calls,
        ll_bytes,
        ll128_bytes,
        simple_bytes,
        direct_bytes,
        graph_kernels,
    };
    Ok((kernels.filter(|_| on), red))
}

/// Order a launch on `stream` after the communicator's earlier ones, before
/// it: an eager one after the newest pending eager launch on another stream
/// (`Watchdog::order`) and the chain's tip; a captured one in the chain
/// (`chain.rs`), with ce's side stream for the bridge.
///
/// # Safety
/// `stream` is a live stream of the bound context (or null, not captured).
unsafe fn order_launch(
    chain: &mut Chain,
    api: &Api,
    watchdog: &Watchdog,
    side: Option<&issue::Side>,
    mode: Mode,
    stream: sys::CUstream,
) -> PluginResult<()> {
    match mode {
        // SAFETY: the caller's contract.
        Mode::Eager => unsafe {
            watchdog.order(stream)?;
            chain.eager_before(stream)
        },
        Mode::Graph => {
            let side = side
                .ok_or_else(|| PluginError::internal("no side stream"))?
                .stream();
            // SAFETY: the caller's contract; ce's side stream is of the same
            // context and never captured.
            unsafe { chain.captured_before(api, stream, |ev| watchdog.bridge(side, ev)) }
        }
    }
}

/// After a launch on `stream`: it is the chain's tip.
///
/// # Safety
/// As [`order_launch`], which ran first.
unsafe fn chain_after(
    chain: &mut Chain,
    api: &Api,
    mode: Mode,
    stream: sys::CUstream,
) -> PluginResult<()> {
    match mode {
        // SAFETY: the caller's contract.
        Mode::Eager => unsafe { chain.eager_after(stream) },
        // SAFETY: as above.
        Mode::Graph => unsafe { chain.captured_after(api, stream) },
    }
}

/// One step of a collective with everything it needs looked up.
enum Work<'a> {
    Sync(&'a crate::sync::Barrier),
    /// The copies, this rank's local ones (the first `local`) before those
    /// to or from peers.
    Copies {
        xs: Vec<Xfer>,
        local: usize,
    },
    Fold {
        k: &'a Kernels,
        t: ferrocx_sdk::kernels::DataType,
        o: ferrocx_sdk::kernels::RedOp,
        f: &'a plan::Fold,
        dst: u64,
        srcs: Vec<u64>,
    },
}

/// A call for messages ("all_gather of 4096 bytes per rank, root 1"), run
/// by `kernel` (`None`: a barrier route).
fn what(d: &CollDesc<'_, Window>, kernel: Option<Exchange>) -> What {
    What::Coll {
        name: d.coll.name(),
        block: d.count * d.elem,
        root: d.coll.kind().rooted().then_some(d.root),
        kernel: kernel.map(Exchange::name),
    }
}

impl CeComm {
    /// `comm_init`: every rank takes part in both exchanges whatever happens
    /// locally (see `setup.rs`), so all ranks return alike.
    pub fn init(host: Host, cfg: Config, info: &CommInfo, oob: Oob) -> PluginResult<CeComm> {
        let (rank, nranks) = (info.rank, info.nranks);
        // Decided from what every rank knows: no exchange, the same answer everywhere.
        if !info.single_host() {
            return Err(PluginError::unsupported(
                "ce runs only when every rank is on one host",
            ));
        }
        if let Some(r) = info.peers.iter().position(|p| p.cuda_device < 0) {
            return Err(PluginError::unsupported(format!("rank {r} has no GPU")));
        }
        let layout = FlagLayout {
            nranks,
            ll_bytes: cfg.ll_bytes,
            // Sized from what every rank knows alike (the scratch after the
            // flags moves with it); whether this rank's links allow the kernel
            // is agreed in reduce_setup.
            ll128_bytes: setup::ll128_region(&cfg, &info.peers),
            // No rings where the Simple kernel never runs (equal on every rank).
            simple_slot: cfg.simple_rings(nranks),
            p2p_slot: cfg.p2p_rings(nranks),
            p2p_lines: ferrocx_sdk::kernels::p2p::ring_lines(cfg.p2p_lines_max(nranks)),
        };
        let local = local_setup(info, layout, cfg.scratch_bytes);
        let hello = match &local {
            Ok(l) => Hello::ready(&cfg, l.flags.handle()),
            Err(e) => Hello::failed(&cfg, e.message()),
        };
        let hellos =
            setup::decode_all(&oob.all_gather(&hello.encode())?).map_err(PluginError::internal)?;
        setup::agree(&hellos).map_err(|why| {
            PluginError::unsupported(format!("ce sits this communicator out: {why}"))
        })?;
        let Local {
            api,
            stream,
            mut flags,
            side,
            dev,
        } = local.map_err(|e| PluginError::internal(format!("agreed although: {e}")))?;
        // Round 2: open the peers' flags and start the watchdog.
        let handles: Vec<_> = hellos.iter().map(|h| h.handle).collect();
        let started = dev.bind().and_then(|_bound| {
            flags.open_peers(&handles)?;
            let reader = Reader::new(dev.clone(), stream, flags.own(), layout)?;
            Watchdog::start(host, rank, reader)
        });
        let status = match &started {
            Ok(_) => Hello::ready(&cfg, flags.handle()),
            Err(e) => Hello::failed(&cfg, e.message()),
        };
        let agreed = oob
            .all_gather(&status.encode())
            .and_then(|all| setup::decode_all(&all).map_err(PluginError::internal))
            .and_then(|all| {
                setup::agree(&all).map_err(|why| {
                    PluginError::unsupported(format!("ce sits this communicator out: {why}"))
                })
            });
        // Round 3 only where rounds 1 and 2 succeeded everywhere (they agree alike).
        let extras = match (&started, &agreed) {
            (Ok(_), Ok(())) => Some(reduce_setup(
                &host,
                &cfg,
                info,
                &oob,
                flags.scratch_bytes(),
                api.capture.is_some(),
            )),
            _ => None,
        };
        match (started, agreed, extras) {
            (Ok(watchdog), Ok(()), Some(Ok((kernels, red)))) => Ok(CeComm {
                host,
                cfg,
                rank,
                nranks,
                oob,
                api,
                seq: Sequencer::new(rank, nranks),
                watchdog,
                chain: Chain::default(),
                flags: Some(flags),
                kernels,
                red,
                ll_calls: 0,
                exchanged: false,
                p2p_calls: 0,
                bounded: false,
                side: Some(side),
                dev,
            }),
            (started, agreed, extras) => {
                let _bound = dev.bind();
                drop(started);
                drop(side);
                // Peers may have opened our flags: everyone closes, then frees.
                flags.close_peers();
                let _ = oob.barrier();
                drop(flags);
                Err(agreed
                    .err()
                    .or_else(|| extras.and_then(Result::err))
                    .unwrap_or_else(|| PluginError::internal("ce setup failed without a reason")))
            }
        }
    }

    /// `window_register`: keep the window when every rank can use it.
    pub fn window_register(&mut self, d: &WindowDesc) -> PluginResult<Option<Window>> {
        let mine = Window::usable(d, self.nranks);
        let all = self.oob.all_gather(&[mine.is_ok() as u8])?;
        if let Some(r) = all.iter().position(|v| v.first() != Some(&1)) {
            let why = match &mine {
                Err(why) if r == self.rank => why.clone(),
                _ => "see that rank's log".into(),
            };
            self.host.debug(format!(
                "ce leaves a window of {} bytes to the core: rank {r} cannot use it ({why})",
                d.bytes
            ));
            return Ok(None);
        }
        mine.map(Some).map_err(PluginError::internal)
    }

    /// `window_deregister`: collectives still queued that write through the
    /// peers' mappings of this window finish first (bounded).
    pub fn window_deregister(&mut self, _win: Window) -> PluginResult<()> {
        let _bound = self.dev.bind()?;
        // Graph replays are not tracked: the chain's tip covers them.
        if !self.watchdog.drain(self.host.timeout()) || !self.chain.settle(self.host.timeout()) {
            self.host.warn(format!(
                "ce on rank {}: a window is deregistered while collectives on it are still queued",
                self.rank
            ));
        }
        Ok(())
    }

    /// The call's note for the peers (`notes.rs`), eager calls only: a graph's
    /// replays repeat their numbers.
    fn note(&self, d: &CollDesc<'_, Window>, mode: Mode) -> Option<(u64, notes::Call)> {
        (self.red.check_calls && mode == Mode::Eager).then(|| {
            (
                d.seq,
                notes::Call::new(d.coll, d.dtype, d.op, d.count, d.root),
            )
        })
    }

    /// The call check of a call being captured into a CUDA graph (notes in
    /// the rings cannot tell its replays apart): the ranks compare their
    /// notes over the out-of-band channel, once, before anything is
    /// captured; a difference breaks the communicator on every rank (each
    /// sees every note) with the core's mismatch wording.
    fn check_captured(&self, d: &CollDesc<'_, Window>) -> PluginResult<()> {
        if !self.red.check_calls {
            return Ok(());
        }
        let mine = notes::Call::new(d.coll, d.dtype, d.op, d.count, d.root);
        let all = self.oob.all_gather(&notes::to_bytes(&mine.note(d.seq)))?;
        let Some(m) = notes::compare_gathered(self.rank, d.seq, mine, &all) else {
            return Ok(());
        };
        let e = PluginError::remote(notes::mismatch_message(self.rank, &m));
        self.watchdog.break_with(e.clone());
        Err(e)
    }

    /// `FERROCX_TIMEOUT` for a kernel's deadline (kept far from wrapping).
    fn timeout_ns(&self) -> u64 {
        u64::try_from(self.host.timeout().as_nanos())
            .unwrap_or(u64::MAX / 4)
            .min(u64::MAX / 4)
    }

    /// `can_run`.
    pub fn can_run(&self, d: &CollDesc<'_, Window>) -> i32 {
        select::bid(self.cfg.priority, self.nranks, &self.agreed(), d).unwrap_or(0)
    }

    /// `describe`: the path [`can_run`](Self::can_run)'s bid stands for.
    pub fn describe(&self, d: &CollDesc<'_, Window>) -> Option<String> {
        select::describe(self.nranks, &self.agreed(), d)
    }

    /// What the ranks agreed on, less the LL and LL128 kernels once a
    /// communicator made [`ll::MAX_CALLS`](ferrocx_sdk::kernels::ll::MAX_CALLS)
    /// calls of them (they share the call count, and their flags would start
    /// to repeat; every rank counts the same calls).
    fn agreed(&self) -> Agreed {
        if self.ll_calls < ferrocx_sdk::kernels::ll::MAX_CALLS {
            self.red
        } else {
            Agreed {
                ll_bytes: 0,
                ll128_bytes: 0,
                ..self.red
            }
        }
    }

    /// `status`.
    pub fn status(&self) -> PluginResult<()> {
        self.watchdog.status()
    }

    /// `launch`: queue the whole collective on `stream`.
    ///
    /// # Safety
    /// The descriptor's buffers are valid until the stream passed the
    /// collective; `stream` is a live stream of this rank's device (or null).
    pub unsafe fn launch(
        &mut self,
        d: &CollDesc<'_, Window>,
        stream: *mut c_void,
    ) -> PluginResult<()> {
        let _span = spans::enter(Point::CeLaunch);
        self.bounded = false;
        self.watchdog.status()?;
        if self.host.aborted() {
            return Err(PluginError::remote("the communicator was aborted"));
        }
        let _bound = self.dev.bind()?;
        let stream = stream as sys::CUstream;
        // The host asked the driver about this stream for the call
        // (`FX_COLL_CAPTURING`): no second query per launch.
        let capturing = d.capturing;
        let mode = if capturing { Mode::Graph } else { Mode::Eager };
        if capturing {
            // First: every rank takes part in the exchange, whatever this
            // rank's call turns out to be (a count of 0, a bad argument).
            self.check_captured(d)?;
        }
        let invalid =
            |why| PluginError::invalid(format!("ce cannot run this {}: {why}", d.coll.name()));
        let (_, route) = select::bid_route(self.cfg.priority, self.nranks, &self.agreed(), d)
            .map_err(invalid)?;
        let Some(route) = route else {
            self.bounded = true;
            return Ok(()); // count 0
        };
        let block = d.count * d.elem;
        // An exchange kernel, eager or captured (`select::exchange`).
        if let Some(kernel) = route.kernel {
            // SAFETY: the caller's contract.
            unsafe { self.launch_exchange(d, mode, stream, kernel) }?;
            self.bounded = self.self_timed();
            return Ok(());
        }
        let shape = Shape {
            coll: d.coll,
            nranks: self.nranks,
            rank: self.rank,
            root: d.root,
            block,
            // NCCL's in-place all_reduce (send == recv) may come flagged out of
            // place; the one-shot fold must know that it writes its input.
            in_place: d.in_place || (d.coll == Coll::AllReduce && d.send as u64 == d.recv as u64),
            elem: d.elem,
            staged: route.staged,
            one_shot: route.one_shot,
        };
        let how = Batching {
            batch: self.cfg.batch,
            min_bytes: self.cfg.batch_bytes,
        };
        let mut seq = self.seq.clone();
        let note = self.note(d, mode);
        let parts = plan::Parts {
            note,
            ..plan::parts(&shape, &how)
        };
        let steps = seq.reduction(mode, parts);
        let flags = self
            .flags
            .as_ref()
            .ok_or_else(|| PluginError::internal("no flags"))?;
        // Rank `r`'s byte `off` of buffer `b`, as this process reaches it: through
        // the windows (symmetric offsets), this rank's own buffers, or the scratch.
        let addr = |r: usize, b: Buf, off: usize| -> PluginResult<u64> {
            let base = match b {
                Buf::Scratch => flags.scratch(r),
                Buf::Send | Buf::Recv => {
                    let (win, own) = if b == Buf::Send {
                        (&d.send_win, d.send as u64)
                    } else {
                        (&d.recv_win, d.recv as u64)
                    };
                    match win {
                        Some(w) => Some(w.win.peer_bases[r] + w.offset),
                        None => (r == self.rank).then_some(own),
                    }
                }
            };
            base.map(|a| a + off as u64).ok_or_else(|| {
                PluginError::internal(format!("no address for rank {r}'s {b:?} buffer"))
            })
        };
        let resolve = |p: &plan::Push| -> PluginResult<Xfer> {
            Ok(Xfer {
                dst: addr(p.dst_rank, p.dst_buf, p.dst)?,
                src: addr(p.src_rank, p.src_buf, p.src)?,
                bytes: p.bytes,
            })
        };
        let batch = self.cfg.memcpy_batch
            && self.api.memcpy_batch.is_some()
            && !capturing
            && !driver::is_legacy(stream);
        let what = what(d, None);
        // Everything this rank needs is looked up and checked before anything
        // is queued: a bad address or pointer found after the ready barrier
        // would leave the peers waiting for the rest (until their watchdogs).
        let types = select::kernel_types(d);
        let prepared: PluginResult<Vec<Work<'_>>> = steps
            .iter()
            .map(|step| match step {
                Step::Sync(b) => Ok(Work::Sync(b)),
                Step::Copies(v) => {
                    let is_local = |p: &plan::Push| p.src_rank == self.rank && p.dst_rank == self.rank;
                    let mut xs = Vec::with_capacity(v.len());
                    let mut local = 0;
                    // This rank's local copies first, then those to or from peers.
                    for pass in [true, false] {
                        for p in v.iter().filter(|p| is_local(p) == pass) {
                            let x = resolve(p)?;
                            if x.src != x.dst {
                                xs.push(x);
                                local += usize::from(pass);
                            }
                        }
                    }
                    Ok(Work::Copies { xs, local })
                }
                Step::Reduce(f) => {
                    let k = self
                        .kernels
                        .as_ref()
                        .ok_or_else(|| PluginError::internal("a reduction without kernels"))?;
                    let (t, o) = types.clone().map_err(PluginError::invalid)?;
                    let srcs = f
                        .srcs
                        .iter()
                        .map(|&(r, off)| addr(r, f.src_buf, off))
                        .collect::<PluginResult<Vec<u64>>>()?;
                    let dst = addr(self.rank, f.dst_buf, f.dst)?;
                    let elem = d.elem.max(1) as u64;
                    if let Some(p) = srcs.iter().chain([&dst]).find(|&&p| p == 0 || p % elem != 0) {
                        return Err(PluginError::invalid(format!(
                            "{} on {t}: the address {p:#x} is not aligned to its {elem}-byte elements",
                            d.coll.name()
                        )));
                    }
                    Ok(Work::Fold { k, t, o, f, dst, srcs })
                }
            })
            .collect();
        // A captured barrier waits in a kernel with a deadline (the watchdog
        // reads its error word from then on); without kernels, as stream waits.
        let graph_waits = match (mode, &self.kernels) {
            (Mode::Graph, Some(k)) => {
                self.watchdog.ll_launched();
                Some(issue::GraphWaits {
                    kernels: k,
                    ctl: flags.ll_ctl(),
                    timeout_ns: self.timeout_ns(),
                })
            }
            _ => None,
        };
        let mut queued = false;
        let mut issued = prepared.as_ref().map(|_| ()).map_err(Clone::clone);
        if issued.is_ok() {
            // SAFETY: the caller's contract; the device is bound.
            issued = unsafe {
                order_launch(
                    &mut self.chain,
                    &self.api,
                    &self.watchdog,
                    self.side.as_ref(),
                    mode,
                    stream,
                )
            };
        }
        let work = match issued {
            Ok(()) => prepared.as_deref().unwrap_or(&[]),
            Err(_) => &[],
        };
        for w in work {
            issued = match w {
                Work::Sync(b) if b.ops.is_empty() => Ok(()),
                // SAFETY: the caller's contract; the flags stay mapped until comm_destroy.
                Work::Sync(b) => unsafe {
                    issue::memops(&self.api, stream, flags, &b.ops, graph_waits.as_ref())
                },
                Work::Copies { xs, local } => {
                    let (mine, peers) = xs.split_at(*local);
                    match &self.side {
                        // SAFETY: sources and destinations lie in the windows (the
                        // core keeps the peers' mapped until window_deregister), this
                        // rank's own buffers, or the scratches (mapped until
                        // comm_destroy); the bid checked the ranges; the side
                        // stream is of this context.
                        Some(side) if issue::beside(mine, peers, capturing) => unsafe {
                            issue::copies_beside(&self.api, stream, side, mine, peers, batch)
                        },
                        // SAFETY: as above.
                        _ => unsafe { issue::copies(&self.api, stream, xs, batch) },
                    }
                }
                Work::Fold {
                    k,
                    t,
                    o,
                    f,
                    dst,
                    srcs,
                } => unsafe {
                    // SAFETY: the sources lie in the send windows or the scratches,
                    // the destination in this rank's receive buffer, all checked
                    // above; the caller's stream.
                    issue::fold(
                        k,
                        (*t, *o, d.elem),
                        self.nranks,
                        f,
                        *dst,
                        srcs,
                        stream,
                        &self.api,
                    )
                },
            };
            if issued.is_err() {
                break;
            }
            queued = true;
        }
        if queued && issued.is_ok() {
            // SAFETY: as above.
            issued = unsafe { chain_after(&mut self.chain, &self.api, mode, stream) };
        }
        let expects: Vec<Expect> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Sync(b) if mode == Mode::Eager => Some(Expect::of(b)),
                _ => None,
            })
            .collect();
        match issued {
            Ok(()) => {
                self.seq = seq;
                if mode == Mode::Eager {
                    // SAFETY: the caller's contract; the device is bound.
                    let tracked =
                        unsafe { self.watchdog.track(stream, d.seq, what, expects, note) };
                    if let Err(e) = tracked {
                        // Queued but untracked: nothing could release it.
                        self.watchdog.break_with(e.clone());
                        return Err(e);
                    }
                }
                Ok(())
            }
            Err(e) => {
                let e = self.call_error(d.seq, what, e);
                // The peers are in this collective and this rank is not (all of
                // it): the ranks' barriers no longer line up. Break, and let the
                // watchdog release what was queued.
                if queued {
                    self.seq = seq;
                    if mode == Mode::Eager {
                        // SAFETY: as above.
                        let _ = unsafe { self.watchdog.track(stream, d.seq, what, expects, note) };
                    }
                }
                self.watchdog.break_with(e.clone());
                Err(e)
            }
        }
    }

    /// `e`, said of call `seq` (`what` it was) on this rank.
    fn call_error(&self, seq: u64, what: What, e: PluginError) -> PluginError {
        PluginError::new(
            e.code(),
            format!(
                "ce collective #{seq} ({what}) on rank {}: {}",
                self.rank,
                e.message()
            ),
        )
    }

    /// `launch_bounded`: whether the last launch queued only self-timed
    /// kernels (they give up on the device at the timeout) behind no pending
    /// barrier route (a stream waiting at one needs the watchdog's release,
    /// and a kernel on another stream is ordered after it).
    pub fn launch_bounded(&self) -> bool {
        self.bounded
    }

    fn self_timed(&self) -> bool {
        !self.watchdog.barriers_pending()
    }

    /// A call as one exchange kernel (LL or Simple, `kernels::moves`): nothing but the
    /// kernel goes on the stream; the watchdog tracks it like any eager
    /// collective (its release raises the kernels' abort word).
    ///
    /// # Safety
    /// As [`launch`](Self::launch); the device is bound.
    unsafe fn launch_exchange(
        &mut self,
        d: &CollDesc<'_, Window>,
        mode: Mode,
        stream: sys::CUstream,
        kernel: Exchange,
    ) -> PluginResult<()> {
        // SAFETY: the caller's contract.
        let r = unsafe { self.queue_exchange(d, mode, stream, kernel) };
        if let Err(e) = &r {
            // The peers' kernels wait for this rank's lines, and the kernels pair
            // calls by count: as any launch that fails part way, the communicator
            // breaks.
            self.watchdog.break_with(e.clone());
        }
        r
    }

    /// [`launch_exchange`](Self::launch_exchange) without the break: one
    /// exchange kernel (LL or Simple; a two-shot all_reduce as one) for `d`
    /// on `stream`. Its note goes into the peers' note rings with its first
    /// chunk; an eager call is tracked by the watchdog.
    ///
    /// # Safety
    /// As [`launch`](Self::launch); the device is bound.
    unsafe fn queue_exchange(
        &mut self,
        d: &CollDesc<'_, Window>,
        mode: Mode,
        stream: sys::CUstream,
        kernel: Exchange,
    ) -> PluginResult<()> {
        let note = self.note(d, mode);
        let what = what(d, Some(kernel));
        // SAFETY: the caller's contract. (A check below that fails breaks the
        // communicator: `launch_exchange`.)
        unsafe { self.before_kernel(mode, stream) }?;
        use ferrocx_sdk::kernels::ll::LlArgs;
        use ferrocx_sdk::kernels::simple::{self, SimpleArgs};
        // A two-shot all_reduce in one kernel moves as a reduce_scatter of
        // its parts (then sends the folded parts back out).
        let two = kernel == Exchange::TwoShot;
        let (coll, block) = if two {
            (Coll::ReduceScatter, d.count / self.nranks.max(1) * d.elem)
        } else {
            (d.coll, d.count * d.elem)
        };
        let flags = self
            .flags
            .as_ref()
            .ok_or_else(|| PluginError::internal("no flags"))?;
        let k = self
            .kernels
            .as_ref()
            .ok_or_else(|| PluginError::internal("an exchange call without kernels"))?;
        let (t, o) = select::kernel_types(d).map_err(PluginError::invalid)?;
        let m = ferrocx_sdk::kernels::moves::moves(
            coll,
            self.rank,
            d.root,
            block,
            d.in_place && !two,
            d.send as u64,
            d.recv as u64,
        )
        .ok_or_else(|| {
            PluginError::internal(format!("no exchange kernel for {}", d.coll.name()))
        })?;
        let elem = d.elem.max(1) as u64;
        // In the rooted ones only the root sends data (broadcast, scatter)
        // or takes it (gather: its other ranks write no output).
        let root = d.root == self.rank;
        let sends = match d.coll {
            Coll::Broadcast | Coll::Scatter => root,
            Coll::Gather => !root,
            _ => true,
        };
        let takes = d.coll != Coll::Gather || root;
        // A gather's root sends acks alone but reads its own block.
        let reads = sends || (root && d.coll == Coll::Gather);
        for (p, used) in [(m.input, reads), (m.output, takes)] {
            if used && (p == 0 || p % elem != 0) {
                return Err(PluginError::invalid(format!(
                    "{} on {t}: the address {p:#x} is null or not aligned to its {elem}-byte elements",
                    d.coll.name()
                )));
            }
        }
        let layout = flags.layout();
        let args = LlArgs {
            bases: flags.ll_table(),
            region_off: layout.ll_offset() as u64,
            // This rank's slot of call `seq` in a peer's ring.
            note_off: note.map_or(0, |_| layout.note_offset(self.rank, d.seq, 0) as u64),
            note: note.map_or([0; 4], |(seq, c)| c.note(seq)),
            input: if reads { m.input } else { 0 },
            output: if takes { m.output } else { 0 },
            ctl: flags.ll_ctl(),
            send_stride: m.send_stride,
            out_stride: m.out_stride,
            seg: block as u64,
            area: layout.ll_area() as u64,
            timeout_ns: self.timeout_ns(),
            rank: self.rank as i32,
            nranks: self.nranks as i32,
            mode: m.mode,
            root: d.root as i32,
        };
        // The Simple kernel's arguments for this call's block on the agreed
        // rings (`overlap`: marks, for an output that overlaps the input), cut
        // into the chunks of the kernel's `mode` (set by the caller).
        let ring = |overlap: bool, mode: i32| {
            let slot = layout.simple_slot;
            SimpleArgs::from_ll(
                &args,
                layout.simple_offset() as u64,
                self.cfg.simple_chunk_of(block, slot, mode, self.nranks) as u64,
                slot as u64,
                overlap,
            )
        };
        let r = match kernel {
            // SAFETY: every address in `args` is this rank's buffers (checked
            // above, valid per the caller's contract) or a flag buffer mapped
            // until comm_destroy; every rank of the call routes it to the LL
            // kernel alike (select::route) with the same segment, mode, root and
            // area; the stream per the caller.
            Exchange::Ll => unsafe { k.ll(t, o, &args, stream) },
            // SAFETY: as for the LL kernel, on the LL128 regions (128-byte
            // aligned, of the agreed size on every rank: FlagLayout), which
            // every rank routes alike only where each has its own GPU and
            // NVLink to every peer (reduce_setup).
            Exchange::Ll128 => unsafe {
                let a = LlArgs {
                    region_off: layout.ll128_offset() as u64,
                    area: layout.ll128_area() as u64,
                    ..args
                };
                k.ll128(t, o, &a, stream)
            },
            Exchange::Direct => {
                let dm = crate::direct::mode(d.coll).unwrap_or(args.mode);
                let sp =
                    crate::direct::args(d, self.rank, ring(false, dm), flags.scratch(self.rank))
                        .map_err(PluginError::internal)?;
                let blocks = select::simple_blocks(None, self.nranks, self.cfg.simple_blocks);
                // SAFETY: as above; the peers' buffers lie in their windows
                // (mapped until window_deregister, which waits for this
                // communicator's calls), which every rank routes alike.
                unsafe { k.simple(t, o, &sp, blocks, stream) }
            }
            Exchange::Simple | Exchange::TwoShot => {
                // Above 2 ranks a broadcast is passed along the ranks
                // (every rank's route is the same; 2 ranks: the same thing).
                let chain = d.coll == Coll::Broadcast && self.nranks > 2;
                let mode = match (chain, two) {
                    (true, _) => simple::MODE_CHAIN,
                    (_, true) => simple::MODE_TWO_SHOT,
                    _ => args.mode,
                };
                let sp = SimpleArgs {
                    spread: self.cfg.simple_spread as i32,
                    mode,
                    // The folded parts go back to their places.
                    out_stride: if two { block as u64 } else { args.out_stride },
                    // A two-shot in place needs no marks: a peer's folded
                    // part arrives only after this rank sent it that part.
                    ..ring(
                        !two && m.overlap(self.rank, self.nranks, block, sends),
                        mode,
                    )
                };
                let blocks =
                    select::simple_blocks(Some(d.coll), self.nranks, self.cfg.simple_blocks);
                // SAFETY: as above, with the Simple regions (mapped until
                // comm_destroy, of the agreed slot on every rank) and the same
                // segment and chunk on every rank.
                unsafe { k.simple(t, o, &sp, blocks, stream) }
            }
        };
        if let Err(e) = r {
            return Err(self.call_error(d.seq, what, issue::kernel_error(e)));
        }
        if matches!(kernel, Exchange::Ll | Exchange::Ll128) {
            self.ll_calls += 1;
        }
        // SAFETY: as above.
        unsafe { chain_after(&mut self.chain, &self.api, mode, stream) }?;
        if mode == Mode::Eager {
            // SAFETY: as above.
            unsafe { self.watchdog.track(stream, d.seq, what, Vec::new(), note) }?;
        }
        Ok(())
    }

    /// Before an exchange or point-to-point kernel on `stream`: ordered after
    /// the communicator's earlier launches ([`order_launch`]); from the first
    /// on, the watchdog reads the kernels' error word.
    ///
    /// # Safety
    /// As [`launch`](Self::launch); the device is bound.
    unsafe fn before_kernel(&mut self, mode: Mode, stream: sys::CUstream) -> PluginResult<()> {
        // SAFETY: the caller's contract.
        unsafe {
            order_launch(
                &mut self.chain,
                &self.api,
                &self.watchdog,
                self.side.as_ref(),
                mode,
                stream,
            )
        }?;
        if !self.exchanged {
            self.watchdog.ll_launched();
            self.exchanged = true;
        }
        Ok(())
    }

    /// Whether ce takes `op` (ce's point-to-point kernel): by the op alone.
    fn p2p_accepts(&self, op: &P2pOp, d: &P2pDesc) -> Result<(), &'static str> {
        if self.cfg.priority <= 0 {
            return Err("FERROCX_CE_PRIORITY=0");
        }
        let region =
            self.kernels.is_some() && self.flags.as_ref().is_some_and(|f| f.layout().p2p_slot > 0);
        p2p::accepts(
            op,
            self.nranks,
            self.cfg.p2p_bytes,
            region,
            d.mem == ferrocx_sdk::MemKind::Cuda,
            d.capturing && !self.red.graph_kernels,
        )
    }

    /// `p2p_can_run`: ce's bid for the one op of `d`.
    pub fn p2p_can_run(&self, d: &P2pDesc) -> i32 {
        match d.ops.as_slice() {
            [op] if self.p2p_accepts(op, d).is_ok() => self.cfg.priority,
            _ => 0,
        }
    }

    /// `p2p_launch`: queue the group's sends and receives on `stream`, one
    /// point-to-point kernel per [`p2p::kernels`] cut.
    ///
    /// # Safety
    /// The ops' buffers are valid device memory until the stream passed them;
    /// `stream` is a live stream of this rank's device (or null).
    pub unsafe fn p2p_launch(&mut self, d: &P2pDesc, stream: *mut c_void) -> PluginResult<()> {
        let _span = spans::enter(Point::CeP2pLaunch);
        self.bounded = false;
        self.watchdog.status()?;
        if self.host.aborted() {
            return Err(PluginError::remote("the communicator was aborted"));
        }
        for op in &d.ops {
            if let Err(why) = self.p2p_accepts(op, d) {
                return Err(PluginError::invalid(format!(
                    "ce cannot run this {}: {why}",
                    What::p2p(std::slice::from_ref(op))
                )));
            }
        }
        let _bound = self.dev.bind()?;
        let stream = stream as sys::CUstream;
        // A captured stream (`FX_COLL_CAPTURING`, the host's driver query):
        // `p2p_accepts` took it only with graph kernels (the kernel's counts
        // live on the device), chained as the collectives are.
        let mode = if d.capturing {
            Mode::Graph
        } else {
            Mode::Eager
        };
        let flags = self
            .flags
            .as_ref()
            .ok_or_else(|| PluginError::internal("no flags"))?;
        let layout = flags.layout();
        let base = ferrocx_sdk::kernels::p2p::P2pArgs {
            bases: flags.ll_table(),
            region_off: layout.p2p_offset() as u64,
            ctl: flags.ll_ctl(),
            slot: layout.p2p_slot as u64,
            timeout_ns: self.timeout_ns(),
            ll_off: layout.p2p_ll_offset() as u64,
            ll_lines: layout.p2p_lines as u64,
            rank: self.rank as i32,
            nranks: self.nranks as i32,
            send: Default::default(),
            recv: Default::default(),
        };
        // Every kernel's ops, all checked before the first is queued.
        let cuts: Vec<Vec<P2pOp>> = p2p::kernels(&d.ops)
            .iter()
            .map(|cut| cut.iter().map(|&i| d.ops[i]).collect())
            .collect();
        for ops in &cuts {
            p2p::self_paired(ops, self.rank)
                .map_err(|e| PluginError::invalid(format!("ce cannot run this group: {e}")))?;
        }
        for ops in cuts {
            let args = p2p::args(
                &base,
                &ops,
                layout.p2p_slot,
                self.cfg.p2p_lines_max(self.nranks),
            );
            let n = self.p2p_calls;
            let what = What::p2p(&ops);
            // SAFETY: the caller's contract; the device is bound.
            let r = unsafe { self.queue_p2p(&args, mode, stream, n, what) };
            if let Err(e) = r {
                // The peers' kernels pair messages by count: the communicator breaks.
                let e = PluginError::new(
                    e.code(),
                    format!(
                        "ce point-to-point call #{n} ({what}) on rank {}: {}",
                        self.rank,
                        e.message()
                    ),
                );
                self.watchdog.break_with(e.clone());
                return Err(e);
            }
            self.p2p_calls += 1;
        }
        self.bounded = self.self_timed();
        Ok(())
    }

    /// One point-to-point kernel on `stream`, ordered after ce's earlier
    /// calls and tracked by the watchdog like an exchange kernel.
    ///
    /// # Safety
    /// As [`p2p_launch`](Self::p2p_launch); the device is bound.
    unsafe fn queue_p2p(
        &mut self,
        args: &ferrocx_sdk::kernels::p2p::P2pArgs,
        mode: Mode,
        stream: sys::CUstream,
        n: u64,
        what: What,
    ) -> PluginResult<()> {
        // SAFETY: the caller's contract.
        unsafe { self.before_kernel(mode, stream) }?;
        let k = self
            .kernels
            .as_ref()
            .ok_or_else(|| PluginError::internal("a point-to-point call without kernels"))?;
        // SAFETY: the ops' buffers per the caller; the regions and control
        // words are this rank's flag buffer and the peers' as mapped until
        // comm_destroy; both ends of every message size it alike (the op's
        // bytes and the agreed slot), and cut their groups alike (p2p::kernels).
        unsafe {
            k.p2p(
                args,
                select::simple_blocks(None, self.nranks, self.cfg.simple_blocks),
                stream,
            )
        }
        .map_err(issue::kernel_error)?;
        // SAFETY: as above.
        unsafe { chain_after(&mut self.chain, &self.api, mode, stream) }?;
        if mode == Mode::Graph {
            // Replays are not tracked: the kernel gives up at its deadline.
            return Ok(());
        }
        // SAFETY: as above.
        unsafe {
            self.watchdog
                .track(stream, watch::P2P_SEQ | n, what, Vec::new(), None)
        }
    }

    /// `comm_destroy`: wait (bounded) for queued collectives, stop the
    /// watchdog, close the peers' flags, barrier, free ours.
    pub fn destroy(mut self) -> PluginResult<()> {
        let _bound = self.dev.bind();
        // Graph replays are not tracked: the chain's tip covers them too.
        let timeout = self.host.timeout();
        if !self.watchdog.drain(timeout) || !self.chain.settle(timeout) {
            self.host.warn(format!(
                "ce on rank {}: the communicator is destroyed while collectives are still queued",
                self.rank
            ));
            // LL kernels still waiting store into the peers' buffers about to be
            // unmapped: end them first.
            if let Some(f) = &self.flags {
                if let Err(e) = f.raise_ll_abort() {
                    self.host
                        .warn(format!("ce on rank {}: {}", self.rank, e.message()));
                }
                self.watchdog.drain(std::time::Duration::from_secs(1));
                self.chain.settle(std::time::Duration::from_secs(1));
            }
        }
        self.watchdog.stop();
        // Its event goes while the context is bound.
        self.chain = Chain::default();
        self.side = None;
        let mut flags = self.flags.take();
        if let Some(f) = flags.as_mut() {
            f.close_peers();
        }
        let barrier = self.oob.barrier();
        drop(flags);
        barrier
    }
}
