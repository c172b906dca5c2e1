//! One communicator of ce: setup (`comm_init`), windows, launches, teardown.

use crate::config::Config;
use crate::driver::{self, Api};
use crate::flags::Flags;
use crate::issue::{self, Xfer};
use crate::plan::{self, Batching, Shape};
use crate::select::{self, Window};
use crate::setup::{self, Hello};
use crate::sync::{FlagLayout, Mode, Sequencer, Step};
use crate::watch::Expect;
use crate::watchdog::{Reader, Watchdog};
use ferrocx_sdk::collective::{Coll, CollDesc, CommInfo, Oob, WindowDesc};
use ferrocx_sdk::cuda::{self, sys, Stream};
use ferrocx_sdk::device::cuda::CudaDriver;
use ferrocx_sdk::device::{Device, Driver, Reach};
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
    // Dropped in this order: the watchdog (its events), the flags, the device.
    watchdog: Watchdog,
    flags: Option<Flags>,
    dev: Arc<dyn Device>,
}

/// What this rank set up before telling the others.
struct Local {
    api: Api,
    stream: Stream,
    flags: Flags,
    dev: Arc<dyn Device>,
}

fn local_setup(info: &CommInfo, layout: FlagLayout) -> PluginResult<Local> {
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
    let flags = Flags::alloc(&dev, layout, info.rank, &stream)?;
    Ok(Local {
        api,
        stream,
        flags,
        dev,
    })
}

fn rooted(c: Coll) -> bool {
    matches!(c, Coll::Broadcast | Coll::Gather | Coll::Scatter)
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
        let layout = FlagLayout { nranks };
        let local = local_setup(info, layout);
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
        match (started, agreed) {
            (Ok(watchdog), Ok(())) => Ok(CeComm {
                host,
                cfg,
                rank,
                nranks,
                oob,
                api,
                seq: Sequencer::new(rank, nranks),
                watchdog,
                flags: Some(flags),
                dev,
            }),
            (started, agreed) => {
                let _bound = dev.bind();
                drop(started);
                // Peers may have opened our flags: everyone closes, then frees.
                flags.close_peers();
                let _ = oob.barrier();
                drop(flags);
                Err(agreed
                    .err()
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
        if !self.watchdog.drain(self.host.timeout()) {
            self.host.warn(format!(
                "ce on rank {}: a window is deregistered while collectives on it are still queued",
                self.rank
            ));
        }
        Ok(())
    }

    /// `can_run`.
    pub fn can_run(&self, d: &CollDesc<'_, Window>) -> i32 {
        select::bid(self.cfg.priority, self.nranks, d).unwrap_or(0)
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
        self.watchdog.status()?;
        if self.host.aborted() {
            return Err(PluginError::remote("the communicator was aborted"));
        }
        select::bid(self.cfg.priority, self.nranks, d).map_err(|why| {
            PluginError::invalid(format!("ce cannot run this {}: {why}", d.coll.name()))
        })?;
        if d.count == 0 {
            return Ok(());
        }
        let (Some(sw), Some(rw)) = (&d.send_win, &d.recv_win) else {
            return Err(PluginError::internal("bid without windows"));
        };
        let block = d.count * d.elem;
        let _bound = self.dev.bind()?;
        let stream = stream as sys::CUstream;
        // SAFETY: the caller's contract.
        let capturing = d.capturing || unsafe { driver::is_capturing(stream) }?;
        let mode = if capturing { Mode::Graph } else { Mode::Eager };
        let shape = Shape {
            coll: d.coll,
            nranks: self.nranks,
            rank: self.rank,
            root: d.root,
            block,
            in_place: d.in_place,
        };
        let how = Batching {
            batch: self.cfg.batch,
            min_bytes: self.cfg.batch_bytes,
        };
        let mut seq = self.seq.clone();
        let steps = seq.collective(mode, plan::batches(&shape, &how));
        let src = sw.win.base + sw.offset;
        let resolve = |p: &plan::Push| Xfer {
            dst: rw.win.peer_bases[p.dst_rank] + rw.offset + p.dst as u64,
            src: src + p.src as u64,
            bytes: p.bytes,
        };
        let batch = self.cfg.memcpy_batch
            && self.api.memcpy_batch.is_some()
            && !capturing
            && !driver::is_legacy(stream);
        let what = format!(
            "{} of {block} bytes per rank{}",
            d.coll.name(),
            if rooted(d.coll) {
                format!(", root {}", d.root)
            } else {
                String::new()
            }
        );
        let flags = self
            .flags
            .as_ref()
            .ok_or_else(|| PluginError::internal("no flags"))?;
        if mode == Mode::Eager {
            // SAFETY: the caller's contract; the device is bound.
            unsafe { self.watchdog.order(stream) }?;
        }
        let mut queued = false;
        let mut issued = Ok(());
        for step in &steps {
            issued = match step {
                Step::Sync(b) if b.ops.is_empty() => Ok(()),
                // SAFETY: the caller's contract; the flags stay mapped until comm_destroy.
                Step::Sync(b) => unsafe { issue::memops(&self.api, stream, flags, &b.ops) },
                Step::Copies(v) => {
                    let xs: Vec<Xfer> = v.iter().map(resolve).filter(|x| x.src != x.dst).collect();
                    // SAFETY: sources lie in this rank's send window, destinations in
                    // the receive windows (the core keeps the peers' mapped until
                    // window_deregister); the bid checked the ranges.
                    unsafe { issue::copies(&self.api, stream, &xs, batch) }
                }
            };
            if issued.is_err() {
                break;
            }
            queued = true;
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
                    if let Err(e) = unsafe { self.watchdog.track(stream, d.seq, what, expects) } {
                        // Queued but untracked: nothing could release it.
                        self.watchdog.break_with(e.clone());
                        return Err(e);
                    }
                }
                Ok(())
            }
            Err(e) => {
                let e = PluginError::new(
                    e.code(),
                    format!(
                        "ce collective #{} ({what}) on rank {}: {}",
                        d.seq,
                        self.rank,
                        e.message()
                    ),
                );
                if queued {
                    // Part of it is on the stream: the ranks' barriers no longer line
                    // up. Break, and let the watchdog release what was queued.
                    self.seq = seq;
                    if mode == Mode::Eager {
                        // SAFETY: as above.
                        let _ = unsafe { self.watchdog.track(stream, d.seq, what, expects) };
                    }
                    self.watchdog.break_with(e.clone());
                }
                Err(e)
            }
        }
    }

    /// `comm_destroy`: wait (bounded) for queued collectives, stop the
    /// watchdog, close the peers' flags, barrier, free ours.
    pub fn destroy(mut self) -> PluginResult<()> {
        let _bound = self.dev.bind();
        if !self.watchdog.drain(self.host.timeout()) {
            self.host.warn(format!(
                "ce on rank {}: the communicator is destroyed while collectives are still queued",
                self.rank
            ));
        }
        self.watchdog.stop();
        let mut flags = self.flags.take();
        if let Some(f) = flags.as_mut() {
            f.close_peers();
        }
        let barrier = self.oob.barrier();
        drop(flags);
        barrier
    }
}
