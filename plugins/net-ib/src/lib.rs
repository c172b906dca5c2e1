//! # ferrocx-net-ib — the RDMA verbs transport
//!
//! Moves host memory between ranks with RDMA over InfiniBand or RoCE, through the
//! [`sideway`] crate (which dlopens `libibverbs.so.1` at run time). Loaded as a plugin
//! (`libferrocx_plugin_net_ib.so` with `FERROCX_PLUGINS`); never a built-in of the core.
//!
//! * **Devices** ([`topo`], [`device`]): at `init`, the ports that are ACTIVE and allowed
//!   by `FERROCX_IB_HCA` are ranked by PCI distance from the process's NUMA node; the
//!   closest becomes the primary rail, and its backup is another port of the same NIC
//!   (dual-port cards) or the adjacent NIC (even ↔ odd, reference note 004). With no
//!   library, no device or no usable port, `init` says so at info level and
//!   `can_connect` answers 0.
//! * **Connections** ([`conn`]): one control region and one RC QP per rail per end; the
//!   connect blob ([`blob`]) carries QPN, PSN, LID, GID, MTU and the region's remote
//!   key per rail. Receivers announce posted buffers to the sender (address and remote
//!   key per rail, [`ctrl`]); senders fill them with RDMA WRITE and complete them with
//!   a WRITE WITH IMM of a completion record.
//! * **Failover** ([`rails`]): on a failed completion the unacknowledged chunks are
//!   redone on the backup rail (after an RDMA READ decides whether a lost completion
//!   record landed); the failed path is re-armed and probed after a quiet window and
//!   taken back. Health is per (my port, peer port) path, shared by all connections.
//! * **Registration** ([`mr_cache`]): `register` pins a range on every device of the
//!   context; transfers inside it reuse it, others register per transfer (small ones
//!   go through bounce slots). GPU memory (dma-buf MRs) is designed in but not done:
//!   `register` of CUDA memory answers "unsupported".
//!
//! ## Environment (see [`config`])
//!
//! `FERROCX_IB_DISABLE`, `FERROCX_IB_HCA`, `FERROCX_IB_TIMEOUT`, `FERROCX_IB_RETRY_CNT`,
//! `FERROCX_IB_GID_INDEX`, `FERROCX_IB_BACKUP`, `FERROCX_IB_RECOVERY_MS`,
//! `FERROCX_IB_CHUNK_BYTES`, `FERROCX_IB_REG_CACHE`.
#![warn(missing_docs)]

pub mod blob;
pub mod config;
pub mod conn;
pub mod ctrl;
pub mod device;
mod execute;
pub mod mr_cache;
pub mod qp;
pub mod rails;
pub mod region;
pub mod topo;

pub use config::{Config, HcaSpec};
pub use conn::{IbConn, IbMemHandle, IbRequest};

use device::{Device, PdRegistrar};
use ferrocx_sdk::abi::{FxPeerInfo, FX_CAP_CROSS_HOST, FX_CAP_HOST_MEM, FX_CAP_REGISTER};
use ferrocx_sdk::failover::PathHealth;
use ferrocx_sdk::{
    Blob, ConnReq, ConnectState, Host, MemKind, PluginError, PluginResult, Transport,
};
use mr_cache::MrCache;
use rails::PathKey;
use std::sync::Arc;
use topo::{Anchor, BackupKind, Sysfs};

/// Score for a peer on the same host (shm, at 100, wins there).
pub const SAME_HOST_SCORE: i32 = 2;
/// Score for a peer on another host (above net-socket's 50).
pub const OTHER_HOST_SCORE: i32 = 80;

/// One rail of the context: a port of an open device.
#[derive(Debug, Clone)]
pub struct RailSpec {
    /// Index into [`Shared::devices`].
    pub dev: usize,
    /// Port number.
    pub port: u8,
    /// GID index used on that port.
    pub gid_index: u8,
}

/// What every connection of a context shares.
pub struct Shared {
    /// The core's services.
    pub host: Host,
    /// Configuration.
    pub cfg: Config,
    /// Open devices (one, or two when the backup is on another NIC).
    pub devices: Vec<Device>,
    /// One registration cache per device.
    pub caches: Vec<MrCache<PdRegistrar>>,
    /// Primary rail, then the backup when there is one.
    pub rails: Vec<RailSpec>,
    /// Health of every (my port, peer port) path.
    pub health: Arc<PathHealth<PathKey>>,
}

/// The net-ib transport: one value per plugin context.
pub struct NetIb {
    cfg: Config,
    /// `None` when there is nothing to offer (disabled, no library, no device).
    shared: Option<Arc<Shared>>,
    why_not: String,
}

/// Local rank from the launchers' variables (for spreading ranks over equally close NICs).
fn local_rank(host: &Host) -> usize {
    [
        "FERROCX_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "SLURM_LOCALID",
        "LOCAL_RANK",
    ]
    .iter()
    .find_map(|v| host.env(v).and_then(|s| s.trim().parse().ok()))
    .unwrap_or(0)
}

/// NUMA node of the CPU this thread runs on.
fn current_numa(sysfs: &Sysfs) -> Anchor {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    match (cpu >= 0).then(|| sysfs.cpu_numa(cpu as usize)).flatten() {
        Some(n) => Anchor::Numa(n),
        None => Anchor::Unknown,
    }
}

impl NetIb {
    /// A context over an explicit sysfs tree and configuration (`init` uses `/sys` and
    /// the environment).
    pub fn with_config(host: Host, cfg: Config, sysfs: &Sysfs) -> PluginResult<Self> {
        let off = |why: String| {
            host.info(format!("net-ib: {why}; net-ib will not be offered"));
            Ok(NetIb {
                cfg: cfg.clone(),
                shared: None,
                why_not: why,
            })
        };
        if cfg.disabled {
            return off("disabled by FERROCX_IB_DISABLE".into());
        }
        let names = match device::list() {
            Ok(n) => n,
            Err(why) => return off(why),
        };
        let nics: Vec<topo::Nic> = sysfs
            .scan()
            .unwrap_or_default()
            .into_iter()
            .filter(|n| names.contains(&n.name))
            .collect();
        let usable = topo::usable(&nics, cfg.hca.as_ref());
        if usable.is_empty() {
            let spec = match &cfg.hca {
                Some(_) => " matching FERROCX_IB_HCA",
                None => "",
            };
            return off(format!(
                "no ACTIVE port{spec} on the RDMA devices found ({})",
                names.join(", ")
            ));
        }
        let anchor = current_numa(sysfs);
        let lr = local_rank(&host);
        let Some(choice) = topo::choose(&usable, cfg.hca.as_ref(), &anchor, lr, cfg.backup) else {
            return off("no RDMA port could be chosen".into());
        };
        let mut picks = vec![(choice.primary.clone(), None)];
        if let Some((b, kind)) = &choice.backup {
            picks.push((b.clone(), Some(*kind)));
        }
        let mut devices: Vec<Device> = Vec::new();
        let mut rails = Vec::new();
        for (pick, _) in &picks {
            let dev = match devices.iter().position(|d| d.name == pick.dev) {
                Some(i) => i,
                None => {
                    devices.push(Device::open(&pick.dev)?);
                    devices.len() - 1
                }
            };
            let port = usable[pick.nic]
                .ports
                .iter()
                .find(|p| p.port == pick.port)
                .expect("chosen port is usable");
            let Some(gid) = topo::choose_gid(port, cfg.gid_index) else {
                return Err(PluginError::invalid(format!(
                    "net-ib: {pick} has no GID{}",
                    cfg.gid_index
                        .map(|i| format!(" at FERROCX_IB_GID_INDEX={i}"))
                        .unwrap_or_default()
                )));
            };
            rails.push(RailSpec {
                dev,
                port: pick.port,
                gid_index: gid.index,
            });
        }
        let backup = match &choice.backup {
            Some((b, BackupKind::SameNicPort)) => {
                format!(", backup {b} (other port of the same NIC)")
            }
            Some((b, BackupKind::AdjacentNic)) => format!(", backup {b} (adjacent NIC)"),
            Some((b, BackupKind::OtherNic)) => format!(", backup {b} (closest other NIC)"),
            None if !cfg.backup => ", no backup (FERROCX_IB_BACKUP=0)".into(),
            None => ", no backup (no second port or NIC)".into(),
        };
        host.info(format!(
            "net-ib: using {} ({:?} from {:?}){backup}; QP timeout {} retry {} (a dead path fails in about {:.0} s)",
            choice.primary,
            choice.primary.distance.class,
            anchor,
            cfg.timeout,
            cfg.retry_cnt,
            cfg.detect_time().as_secs_f64()
        ));
        let caches = devices
            .iter()
            .map(|d| {
                MrCache::new(
                    PdRegistrar {
                        dev: d.name.clone(),
                        pd: d.pd.clone(),
                    },
                    cfg.reg_cache,
                )
            })
            .collect();
        let shared = Arc::new(Shared {
            host,
            cfg: cfg.clone(),
            devices,
            caches,
            rails,
            health: Arc::new(PathHealth::new(cfg.recovery)),
        });
        Ok(NetIb {
            cfg,
            shared: Some(shared),
            why_not: String::new(),
        })
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Whether the transport has a device to offer.
    pub fn available(&self) -> bool {
        self.shared.is_some()
    }

    /// Why it has none (empty when available).
    pub fn why_unavailable(&self) -> &str {
        &self.why_not
    }

    fn shared(&self) -> PluginResult<&Arc<Shared>> {
        self.shared.as_ref().ok_or_else(|| {
            PluginError::unsupported(format!("net-ib: not available: {}", self.why_not))
        })
    }
}

impl Transport for NetIb {
    type Conn = IbConn;
    type Request = IbRequest;
    type MemHandle = IbMemHandle;

    const NAME: &'static str = "net-ib";
    const CAPS: u64 = FX_CAP_HOST_MEM | FX_CAP_CROSS_HOST | FX_CAP_REGISTER;

    fn init(host: Host) -> PluginResult<Self> {
        let cfg = Config::from_host(&host)?;
        Self::with_config(host, cfg, &Sysfs::system())
    }

    fn can_connect(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32 {
        if self.shared.is_none() {
            0
        } else if me.host_hash == peer.host_hash {
            SAME_HOST_SCORE
        } else {
            OTHER_HOST_SCORE
        }
    }

    fn setup(&self, req: &ConnReq, out: &mut Blob) -> PluginResult<IbConn> {
        IbConn::setup(self.shared()?.clone(), req, out)
    }

    fn connect(&self, conn: &mut IbConn, peer: &Blob) -> PluginResult<ConnectState> {
        conn.connect(peer)
    }

    unsafe fn register(
        &self,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        _out: &mut Blob,
    ) -> PluginResult<IbMemHandle> {
        if kind == MemKind::Cuda {
            return Err(PluginError::unsupported(
                "net-ib: CUDA memory needs dma-buf MRs (mr_cache::Registrar::register_dmabuf), not implemented yet",
            ));
        }
        // SAFETY: Transport::register's contract keeps the range valid until deregister.
        unsafe { conn::register(self.shared()?, ptr as usize, len) }
    }

    fn deregister(&self, handle: IbMemHandle) -> PluginResult<()> {
        conn::deregister(handle);
        Ok(())
    }

    // SAFETY: the caller keeps the buffer valid and unmodified until the request
    // completes (Transport::isend's contract); the connection only reads it.
    unsafe fn isend(
        &self,
        conn: &mut IbConn,
        data: *const u8,
        len: usize,
        mhandle: Option<&IbMemHandle>,
    ) -> PluginResult<Option<IbRequest>> {
        // SAFETY: forwarded contract.
        unsafe { conn.post_send(data as usize, len, mhandle) }
    }

    // SAFETY: the caller keeps the buffer valid and unaliased until the request
    // completes (Transport::irecv's contract); at most `len` bytes are written.
    unsafe fn irecv(
        &self,
        conn: &mut IbConn,
        data: *mut u8,
        len: usize,
        mhandle: Option<&IbMemHandle>,
    ) -> PluginResult<Option<IbRequest>> {
        // SAFETY: forwarded contract.
        unsafe { conn.post_recv(data as usize, len, mhandle) }
    }

    fn test(&self, req: &mut IbRequest) -> PluginResult<Option<usize>> {
        req.test()
    }

    fn free(&self, conn: IbConn) -> PluginResult<()> {
        drop(conn);
        Ok(())
    }
}
