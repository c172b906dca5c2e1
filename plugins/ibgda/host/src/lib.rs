//! # ferrocx-ibgda-host — the ibgda plugin's host side
//!
//! The `ferrocx_devnet_v1` table (`sdk/include/ferrocx_devnet.h`) of the ibgda
//! plugin with its **proxy NIC handler**: a kernel posts records into
//! per-peer request rings in pinned host memory (`ferrocx_ibgda.h`); a host
//! thread of this rank (`thread.rs`) takes them, routes each through the
//! per-(me, peer) path health machine of `ferrocx-ibgda`, carries it
//! (`carrier.rs`: copy-engine streams to peers of this host, one per path) and
//! writes one completion per request back.
//!
//! What this handler does not do yet (docs/IBGDA.md): peers on other hosts
//! (the carriers over net-socket and net-ib), and the mlx5 handler where a GPU
//! rings the NIC itself. `comm_init` says so (`FX_UNSUPPORTED`) rather than
//! pretend.

mod carrier;
mod clock;
mod config;
mod mapped;
mod nics;
mod thread;
mod view;

pub use carrier::SIGNAL_WINDOW;
pub use view::{View, VIEW_HEADER_BYTES, VIEW_MAGIC, VIEW_PEER_BYTES, VIEW_VERSION};

use carrier::{SameHost, Win, Windows};
use config::Config;
use ferrocx_ibgda::fault::FaultInjector;
use ferrocx_ibgda::health::{Path, PeerId};
use ferrocx_ibgda::proxy::{Proxy, ProxyConfig, QueueId};
use ferrocx_ibgda::queue::{CompletionQueue, RequestQueue};
use ferrocx_sdk::abi::{FxDevnetStats, FX_DEVNET_CAP_CUDA_MEM};
use ferrocx_sdk::collective::{CommInfo, Oob, WindowDesc};
use ferrocx_sdk::cuda::Context;
use ferrocx_sdk::device::Driver;
use ferrocx_sdk::devnet::DevNet;
use ferrocx_sdk::{Host, MemKind, PluginError, PluginResult};
use mapped::{DeviceBlock, Pinned, Signals, Words};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use thread::Shared;
use view::PeerQueues;

/// Names of the signal segments in /dev/shm: `ferrocx-ibgda-<pid>-<comm>-<rank>`.
const SIGNALS_PREFIX: &str = "ferrocx-ibgda-";

/// The plugin context.
pub struct Ibgda {
    host: Host,
}

/// One communicator's side.
pub struct IbgdaComm {
    rank: usize,
    nranks: usize,
    cfg: Config,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    windows: Windows,
    view: DeviceBlock,
    /// The host's GPU↔NIC pairing from sysfs, for `describe` ([`nics`]).
    nics: String,
    // Dropped after the thread stopped (field order: the thread is joined in
    // comm_destroy / Drop first).
    _rings: Arc<Pinned>,
    _signals: Vec<Arc<Signals>>,
    _ctx: Arc<Context>,
}

impl Drop for IbgdaComm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sys(what: &str, e: impl std::fmt::Display) -> PluginError {
    PluginError::system(format!("{what}: {e}"))
}

impl DevNet for Ibgda {
    type Comm = IbgdaComm;
    const NAME: &'static str = "ibgda";
    const CAPS: u64 = FX_DEVNET_CAP_CUDA_MEM;

    fn init(host: Host) -> PluginResult<Self> {
        Ok(Ibgda { host })
    }

    fn comm_init(&self, info: &CommInfo, oob: Oob) -> PluginResult<IbgdaComm> {
        let cfg = Config::from_env(&|n| self.host.env(n));
        // Every rank learns every rank's outcome before anything is shared,
        // so one rank's refusal is everyone's (no rank waits in a later step).
        let me = &info.peers[info.rank];
        let local = match (&cfg, info.cuda_device) {
            (Err(e), _) => Err(e.to_string()),
            (_, None) => Err(format!("rank {} has no GPU", info.rank)),
            _ => match info.peers.iter().find(|p| p.host_hash != me.host_hash) {
                Some(p) => Err(format!(
                    "rank {} is on another host: the proxy handler carries between ranks of one host only (its net-socket and net-ib carriers are not built)",
                    p.rank
                )),
                None => Ok(()),
            },
        };
        let word = |ok: &Result<(), String>| [ok.is_ok() as u8];
        let all = oob.all_gather(&word(&local))?;
        if let Err(why) = local {
            let cfg_error = cfg.is_err();
            return Err(if cfg_error {
                PluginError::invalid(why)
            } else {
                PluginError::unsupported(why)
            });
        }
        if let Some(r) = all.iter().position(|v| v.first() != Some(&1)) {
            return Err(PluginError::unsupported(format!(
                "rank {r} cannot use ibgda (see its log)"
            )));
        }
        let cfg = cfg.expect("checked above");
        let dev = info.cuda_device.expect("checked above");
        let ctx = Arc::new(Context::primary(dev)?);
        ctx.bind()?;
        let (rank, n) = (info.rank, info.nranks);

        // Signal words: this rank's segment, then the peers' opened here. The
        // name carries the creator's pid, so a segment left by a process that
        // died before the unlink below is swept by the next job.
        ferrocx_sdk::sweep::sweep_stale(
            std::path::Path::new(ferrocx_sdk::sweep::SHM_DIR),
            &[SIGNALS_PREFIX],
        );
        let name = |r: usize| {
            format!(
                "/{SIGNALS_PREFIX}{}-{:016x}-{r}",
                info.peers[r].pid, info.comm_hash
            )
        };
        let mut own = Signals::create(&name(rank), cfg.signal_bytes)?;
        oob.barrier()?;
        let mut signals = Vec::with_capacity(n);
        let mut opened = Ok(());
        for r in 0..n {
            if r == rank {
                continue;
            }
            match Signals::open(&name(r), cfg.signal_bytes) {
                Ok(s) => signals.push((r, Arc::new(s))),
                Err(e) => {
                    opened = Err(e);
                    break;
                }
            }
        }
        let all = oob.all_gather(&[opened.is_ok() as u8])?;
        own.unlink();
        opened?;
        if let Some(r) = all.iter().position(|v| v.first() != Some(&1)) {
            return Err(PluginError::system(format!(
                "rank {r} could not open the signal words of its peers (see its log)"
            )));
        }
        let signals_device = own.device().expect("own segment is mapped");
        signals.push((rank, Arc::new(own)));
        signals.sort_by_key(|s| s.0);
        let signals: Vec<Arc<Signals>> = signals.into_iter().map(|s| s.1).collect();

        // Rings: per peer a request ring and a completion ring, in pinned memory.
        let pcfg = ProxyConfig {
            health: cfg.health,
            sq_slots: cfg.slots,
            cq_slots: cfg.slots,
            max_owed: 16 * cfg.slots,
            ..ProxyConfig::default()
        };
        let sq_bytes = RequestQueue::new(cfg.slots)
            .map_err(|e| sys("request ring", e))?
            .ring()
            .bytes();
        let cq_bytes = CompletionQueue::new(cfg.slots)
            .map_err(|e| sys("completion ring", e))?
            .ring()
            .bytes();
        let pair = sq_bytes + cq_bytes;
        let rings = Pinned::new(pair * n)?;
        // Per peer two words (claim counter, cached consumer index), then the view.
        let view_at = 16 * n;
        let view = DeviceBlock::new(view_at + View::bytes_for(n))?;
        let mut proxy = Proxy::new(PeerId(rank as u32), pcfg).map_err(|e| sys("proxy", e))?;
        let mut peers = vec![PeerQueues::default(); n];
        for (r, q) in peers.iter_mut().enumerate().filter(|(r, _)| *r != rank) {
            let at = r * pair;
            let owner: Arc<dyn Send + Sync> = rings.clone();
            // SAFETY: both rings lie inside the pinned allocation (pair * n
            // bytes, page-aligned base, ring sizes multiples of 16), which
            // `owner` keeps alive; this process reads them only through Words.
            let (sqm, cqm) = unsafe {
                (
                    Words::new(owner.clone(), rings.host(), at, sq_bytes),
                    Words::new(owner, rings.host(), at + sq_bytes, cq_bytes),
                )
            };
            let id = QueueId {
                peer: PeerId(r as u32),
                path: Path::Primary,
            };
            proxy
                .add_queue_in(id, true, Box::new(sqm), Box::new(cqm))
                .map_err(|e| sys("queue", e))?;
            *q = PeerQueues {
                sq: rings.device() + at as u64,
                claimed: view.addr() + 16 * r as u64,
                cq: rings.device() + (at + sq_bytes) as u64,
            };
        }
        let v = View {
            rank: rank as u32,
            signals: signals_device,
            signal_bytes: cfg.signal_bytes as u64,
            peers,
        };
        view.write(view_at, &v.encode())?;

        let drv = ferrocx_sdk::device::cuda::CudaDriver;
        let device = drv.device(dev)?;
        let paths = [device.queue()?, device.queue()?];
        let windows: Windows = Arc::default();
        let pids = info.peers.iter().map(|p| p.pid).collect();
        let carrier = SameHost::new(
            paths,
            windows.clone(),
            signals.clone(),
            pids,
            FaultInjector::new(cfg.faults.clone()),
        );
        let shared = Arc::new(Shared::default());
        let thread = thread::spawn(ctx.clone(), proxy, carrier, shared.clone(), self.host, rank)
            .map_err(|e| sys("starting the proxy thread", e))?;
        let own = ferrocx_sdk::cuda::pci_id(dev)
            .ok()
            .map(ferrocx_sdk::device::pci_name);
        let comm = IbgdaComm {
            rank,
            nranks: n,
            cfg,
            shared,
            thread: Some(thread),
            windows,
            view,
            nics: nics::describe(&ferrocx_sdk::sysfs::Sysfs::system(), own.as_deref()),
            _rings: rings,
            _signals: signals,
            _ctx: ctx,
        };
        let all = oob.all_gather(&[1])?;
        debug_assert_eq!(all.len(), n);
        self.host.info(format!("ibgda: {}", self.describe(&comm)));
        Ok(comm)
    }

    fn comm_destroy(&self, mut comm: IbgdaComm) -> PluginResult<()> {
        comm.shared.stop.store(true, Ordering::Release);
        if let Some(t) = comm.thread.take() {
            t.join()
                .map_err(|_| PluginError::internal("the ibgda proxy thread panicked"))?;
        }
        Ok(())
    }

    fn window_register(&self, comm: &mut IbgdaComm, desc: &WindowDesc) -> PluginResult<u32> {
        if desc.mem != MemKind::Cuda {
            return Err(PluginError::unsupported(
                "ibgda windows are device memory (register the window with window_register_device)",
            ));
        }
        if let Some(r) = (0..comm.nranks).find(|&r| desc.peer_bases[r] == 0) {
            return Err(PluginError::unsupported(format!(
                "rank {r}'s window is not mapped in this process (CUDA IPC failed or another host)"
            )));
        }
        let mut wins = comm.windows.write();
        wins.push(Some(Win {
            base: desc.base,
            bytes: desc.bytes,
            peer_bases: desc.peer_bases.clone(),
        }));
        Ok((wins.len() - 1) as u32)
    }

    fn window_deregister(&self, comm: &mut IbgdaComm, id: u32) -> PluginResult<()> {
        let mut wins = comm.windows.write();
        match wins.get_mut(id as usize) {
            Some(w @ Some(_)) => {
                *w = None;
                Ok(())
            }
            _ => Err(PluginError::invalid(format!(
                "window {id} is not registered with ibgda"
            ))),
        }
    }

    fn device_view(&self, comm: &IbgdaComm) -> PluginResult<u64> {
        Ok(comm.view.addr() + 16 * comm.nranks as u64)
    }

    fn status(&self, comm: &IbgdaComm) -> PluginResult<()> {
        match comm.shared.error.lock().as_ref() {
            Some(e) => Err(PluginError::remote(e.clone())),
            None => Ok(()),
        }
    }

    fn stats(&self, comm: &IbgdaComm) -> FxDevnetStats {
        *comm.shared.stats.lock()
    }

    fn describe(&self, comm: &IbgdaComm) -> String {
        let faults = if comm.cfg.faults.is_empty() {
            String::new()
        } else {
            let f = &comm.cfg.faults;
            let more = if f.len() > 2 {
                format!("; … ({} plans)", f.len())
            } else {
                String::new()
            };
            let list: Vec<String> = f.iter().take(2).map(|p| p.to_string()).collect();
            format!(
                ", injected faults (FERROCX_IBGDA_FAULT): {}{more}",
                list.join("; ")
            )
        };
        format!(
            "rank {}: proxy handler (no mlx5 handler is built; every peer is on this host): a host thread takes the kernels' requests, two copy-engine streams per rank are the primary and backup paths, signals and fetch-adds are host atomics on the peer's signal words; completion timeout {:?}, recovery {:?} (up to {:?} for a flapping path), {} slots per ring, {} signal bytes{faults}; NIC pairing from sysfs (for the mlx5 handler, unused by the proxy): {}",
            comm.rank, comm.cfg.health.timeout, comm.cfg.health.recovery, comm.cfg.health.max_recovery, comm.cfg.slots, comm.cfg.signal_bytes, comm.nics
        )
    }
}

ferrocx_sdk::register_builtin_devnet!(Ibgda);
