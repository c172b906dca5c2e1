//! # ferrocx-ibgda-host — the ibgda plugin's host side
//!
//! The `ferrocx_devnet_v1` table (`sdk/include/ferrocx_devnet.h`) of the ibgda
//! plugin with its **proxy NIC handler**: a kernel posts records into
//! per-peer request rings in pinned host memory (`ferrocx_ibgda.h`); a host
//! thread of this rank (`thread.rs`) takes them, routes each through the
//! per-(me, peer) path health machine of `ferrocx-ibgda`, carries it
//! (`carrier.rs`: copy-engine streams to peers of this host, one per path;
//! `net/`: two TCP connections to peers of other hosts; `dispatch.rs`: which
//! serves which peer) and writes one completion per request back.
//!
//! What this handler does not do yet (docs/IBGDA.md): a carrier over RDMA
//! (net-ib), and the mlx5 handler where a GPU rings the NIC itself.

mod carrier;
mod clock;
mod config;
mod dispatch;
mod mapped;
mod mlx5;
mod net;
mod nics;
mod thread;
mod view;

pub use carrier::SIGNAL_WINDOW;
pub use view::{View, VIEW_HEADER_BYTES, VIEW_MAGIC, VIEW_PEER_BYTES, VIEW_VERSION};

use carrier::{Win, Windows};
use config::Config;
use dispatch::Route;
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
    /// How each rank is reached ([`dispatch`]).
    routes: Vec<Route>,
    /// Which carrier serves which peers, for `describe`.
    carriers: String,
    /// The mlx5 handler, where every rank brought it up; else why not.
    /// Before the signal words and the context: its MRs cover the former,
    /// its table and registrations need the latter.
    mlx5: Result<Box<mlx5::setup::Mlx5>, String>,
    /// The core's all-gather, for the mlx5 handler's window registration.
    oob: Oob,
    // Dropped after the thread stopped (field order: the thread is joined in
    // comm_destroy / Drop first).
    _rings: Arc<Pinned>,
    _signals: Vec<Option<Arc<Signals>>>,
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
        let local = match (&cfg, info.cuda_device) {
            (Err(e), _) => Err(e.to_string()),
            (_, None) => Err(format!("rank {} has no GPU", info.rank)),
            _ => Ok(()),
        };
        // Peers of other hosts (or all, FERROCX_IBGDA_CARRIER=net) go over
        // TCP; every rank must agree on the knob, or the routes would not pair.
        let force_net = cfg.as_ref().is_ok_and(|c| c.force_net);
        // So must the signal words' size: each rank checks the words a peer
        // names against its own (a mismatch would read as a network fault).
        let signal_bytes = cfg.as_ref().map_or(0, |c| c.signal_bytes as u64);
        let word = |ok: &Result<(), String>| {
            let mut w = vec![ok.is_ok() as u8, force_net as u8];
            w.extend_from_slice(&signal_bytes.to_le_bytes());
            w
        };
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
        if let Some(r) = all
            .iter()
            .position(|v| v.get(2..10) != Some(&signal_bytes.to_le_bytes()[..]))
        {
            return Err(PluginError::invalid(format!(
                "FERROCX_IBGDA_SIGNAL_BYTES differs between ranks: rank {} has {signal_bytes}, rank {r} another",
                info.rank
            )));
        }
        if let Some(r) = all
            .iter()
            .position(|v| v.get(1) != Some(&(force_net as u8)))
        {
            return Err(PluginError::invalid(format!(
                "FERROCX_IBGDA_CARRIER differs between ranks: rank {} has {}, rank {r} the other",
                info.rank,
                if force_net { "net" } else { "auto" }
            )));
        }
        let hosts: Vec<u64> = info.peers.iter().map(|p| p.host_hash).collect();
        let routes = dispatch::routes(info.rank, &hosts, force_net);
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
        // Only the same-host carrier writes a peer's words (the TCP carrier's
        // far side writes its own).
        for r in (0..n).filter(|&r| routes[r] == Route::SameHost) {
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
        let own_words = Arc::new(own);
        signals.push((rank, own_words.clone()));
        let mut by_rank: Vec<Option<Arc<Signals>>> = vec![None; n];
        for (r, s) in signals {
            by_rank[r] = Some(s);
        }
        let signals = by_rank;

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

        // The mlx5 handler (collective; FERROCX_IBGDA_HANDLER): its table's
        // device address goes to the view's reserved[0] (byte 32).
        let own_bdf = ferrocx_sdk::cuda::pci_id(dev)
            .ok()
            .map(ferrocx_sdk::device::pci_name);
        let words = (own_words.word(0).as_ptr() as u64, own_words.len() as u64);
        let mlx5 = match mlx5::setup::bring_up(rank, n, &cfg, own_bdf.as_deref(), words, &oob)? {
            mlx5::setup::Brought::Up(m) => {
                view.write(view_at + 32, &m.table().to_le_bytes())?;
                Ok(m)
            }
            mlx5::setup::Brought::Proxy(why) => Err(why),
        };

        let drv = ferrocx_sdk::device::cuda::CudaDriver;
        let device = drv.device(dev)?;
        let windows: Windows = Arc::default();
        // Collective (the TCP carrier connects every pair it serves).
        let (carrier, carriers) = dispatch::build(
            info,
            &cfg,
            &oob,
            &*device,
            &routes,
            windows.clone(),
            signals.clone(),
            own_words,
        )?;
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
            mlx5,
            oob,
            routes,
            carriers,
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
        let local = if desc.mem != MemKind::Cuda {
            Err(PluginError::unsupported(
                "ibgda windows are device memory (register the window with window_register_device)",
            ))
        } else {
            // The copy-engine carrier writes into the peers' windows mapped
            // here; the TCP carrier's far side writes into its own.
            let mapped = |r: usize| comm.routes[r] != Route::SameHost || desc.peer_bases[r] != 0;
            match (0..comm.nranks).find(|&r| !mapped(r)) {
                Some(r) => Err(PluginError::unsupported(format!(
                    "rank {r}'s window is not mapped in this process (CUDA IPC failed)"
                ))),
                None => Ok(()),
            }
        };
        let id = comm.windows.read().len() as u32;
        // The mlx5 table names one device window: the first registered while
        // none is. Collective whatever this rank met (its failure is its
        // outcome in the all-gather), so no rank waits alone.
        if let Ok(m) = &mut comm.mlx5 {
            let mine = local
                .as_ref()
                .map(|_| ())
                .map_err(|e| e.message().to_string());
            m.attach_window(id, desc.base, desc.bytes, mine, &comm.oob)?;
        }
        local?;
        comm.windows.write().push(Some(Win {
            base: desc.base,
            bytes: desc.bytes,
            peer_bases: desc.peer_bases.clone(),
        }));
        Ok(id)
    }

    fn window_deregister(&self, comm: &mut IbgdaComm, id: u32) -> PluginResult<()> {
        if let Ok(m) = &mut comm.mlx5 {
            m.detach_window(id)?;
        }
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
        let handler = match &comm.mlx5 {
            Ok(m) => format!(
                "{}; the header's ring API (fxg_put, …) is served by the proxy handler",
                m.describe()
            ),
            Err(why) => format!("proxy handler (mlx5 handler not used: {why})"),
        };
        format!(
            "rank {}: {handler}: a host thread takes the kernels' requests; {}; completion timeout {:?}, recovery {:?} (up to {:?} for a flapping path), {} slots per ring, {} signal bytes{faults}; NIC pairing from sysfs (for the mlx5 handler, unused by the proxy): {}",
            comm.rank, comm.carriers, comm.cfg.health.timeout, comm.cfg.health.recovery, comm.cfg.health.max_recovery, comm.cfg.slots, comm.cfg.signal_bytes, comm.nics
        )
    }
}

ferrocx_sdk::register_builtin_devnet!(Ibgda);
