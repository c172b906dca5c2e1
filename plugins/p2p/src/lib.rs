//! # ferrocx-p2p — GPU to GPU on one host: CUDA IPC and copy engines
//!
//! Moves CUDA device memory between ranks of the same host whose GPUs reach
//! each other (`cuDeviceCanAccessPeer`, or the same GPU), e.g. over NVLink:
//! the SDK's same-host transport (`ferrocx_sdk::same_host`, shared with shm)
//! over a device copy back end. Data moves only by copy engines
//! (`cuMemcpyAsync` on plugin-owned non-blocking streams, completion polled
//! with events in `test`): no kernel is launched, no SM is used, no
//! multicast object is created. One connection is one direction (sender →
//! receiver) with its own stream on each end, so the core's channels
//! (several connections per peer) copy in parallel.
//!
//! ## Connecting: only plain bytes cross
//!
//! * The **receiver** allocates a FIFO of `FERROCX_P2P_NSLOTS` slots of
//!   `FERROCX_P2P_CHUNK_SIZE` bytes in its GPU memory (`cuMemAlloc`), exports
//!   it (`cuIpcGetMemHandle`), and creates the POSIX shared-memory segment for
//!   the flags. Its blob holds the segment's name, the FIFO's 64-byte IPC
//!   handle and geometry, its pid, its GPU's PCI location and a per-process
//!   token — never a pointer, stream, event or descriptor.
//! * The **sender** maps the segment by name and **opens the receiver's
//!   handle itself** (`cuIpcOpenMemHandle`, lazily enabling peer access) in
//!   its own process, then raises `sender_attached`; both ends unlink the
//!   segment's name. Streams and events are made by each end for itself.
//! * Two ends in the same process (equal tokens) use each other's addresses:
//!   CUDA refuses to open a process's own IPC handles.
//!
//! ## Moving a message
//!
//! Messages match in order per connection (the n-th `isend` feeds the n-th
//! `irecv`) and complete in order.
//!
//! * **FIFO**: the sender reserves a free slot, queues `cuMemcpyAsync` from
//!   its buffer (device or host) into that slot of the receiver's FIFO and an
//!   event; when the event completed it publishes the slot header. The
//!   receiver sees it, queues `cuMemcpyAsync` from the slot into its buffer,
//!   and hands the slot back when that copy's event completed. Up to
//!   `NSLOTS` chunks, of any number of messages, are in flight. A message
//!   longer than its receive is drained and fails that receive alone.
//! * **Direct** (zero copy): the receiver publishes every posted receive in
//!   a `P2pRegInfo` slot — for a receive of at least `FERROCX_P2P_DIRECT_MIN`
//!   bytes into a registered buffer, or by default (`FERROCX_P2P_DIRECT=1`)
//!   into any `cuMemAlloc`'d device buffer, with the IPC handle of its
//!   allocation ([`target`]: cached per allocation and identity), the offset
//!   and the size. A sender with a message at least that large waits for the
//!   slot, opens the handle (cached, at most `FERROCX_P2P_IPC_CACHE` per
//!   connection, [`writer`]), raises `copy_started`, copies straight into the
//!   receiver's buffer with one `cuMemcpyAsync`, and raises `copy_done` when
//!   its event completed. Receives without a target (host memory, VMM or
//!   managed allocations, small messages) take the FIFO.
//! * **Revocations**: when the receiver deregisters a buffer, sees that an
//!   exported allocation was freed (same address, new
//!   `CU_POINTER_ATTRIBUTE_BUFFER_ID`) or drops one from its export cache, it
//!   writes the handle into the segment's revocation ring; the sender closes
//!   that mapping at its next progress round, or when a copy in flight
//!   through it completes. Freeing a connection closes all of its mappings.
//!   `cuIpcCloseMemHandle` itself runs on a thread of its own: unmapping may
//!   wait for the whole device, and the progress thread must never block on a
//!   device whose user stream waits for its plan. Exported receive
//!   allocations get `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`, so a synchronous
//!   copy into them (e.g. from pageable memory) has landed before it returns
//!   and cannot overwrite a peer's later direct write.
//!
//! Host buffers (pinned or pageable) work too, through unified addressing,
//! always by the FIFO: correct but slower than the shm transport, which the
//! core uses for host buffers when it reaches the peer (host memory has its
//! own channels where ranks have GPUs: `docs/ARCHITECTURE.md`, Connections).
//!
//! ## Failures, waits and threads
//!
//! Every hook binds the connection's device (primary) context on the calling
//! thread first, restoring another context a caller had. A peer that exits or
//! is killed makes pending requests fail with an error naming its rank and
//! pid within about 50 ms of no progress. `test` never blocks; `free` waits
//! for its own copies at most `Host::timeout()` and stops when the
//! communicator is aborted. A receiving end keeps its FIFO until the sender
//! closed its mapping of it (CUDA leaves freeing memory that another process
//! maps undefined); `finalize` waits for that at most 5 s, then frees it.
//!
//! ## Environment (see [`config`])
//!
//! | variable | default |
//! |---|---|
//! | `FERROCX_P2P_DISABLE` | `0` |
//! | `FERROCX_P2P_CHUNK_SIZE` | `1048576` (1 MiB) |
//! | `FERROCX_P2P_NSLOTS` | `8` |
//! | `FERROCX_P2P_DIRECT` | `1` (any device buffer; `registered`, `0`) |
//! | `FERROCX_P2P_DIRECT_MIN` | `16384` (16 KiB) |
//! | `FERROCX_P2P_IPC_CACHE` | `64` |
//! | `FERROCX_P2P_EXPORT_CACHE` | `256` |
//! | `FERROCX_P2P_INVISIBLE` | `1` |
//!
//! ## Tests
//!
//! `tests/` drives the transport through its `Transport` trait on the SDK's
//! host-memory stand-in for the GPU (`ferrocx_sdk::device::fake`) and, when
//! present, on CUDA: both ends in one process, and two processes (the test
//! binary re-runs itself as the peer rank).
#![warn(missing_docs)]

pub mod config;
pub mod target;
pub mod writer;

pub use config::{Config, Direct};
pub use ferrocx_sdk::same_host::{ConnStats, CtxStats, P2pRegInfo};

use ferrocx_sdk::abi::{FxPeerInfo, FX_CAP_CUDA_MEM, FX_CAP_HOST_MEM, FX_CAP_REGISTER};
use ferrocx_sdk::device::export::ExportCache;
use ferrocx_sdk::device::open::{ConnMappings, Mapping};
use ferrocx_sdk::device::HANDLE_BYTES;
use ferrocx_sdk::device::{BindGuard, Device, Driver, IpcHandle, Located, Queue, Reach};
use ferrocx_sdk::same_host::{
    Backend, FifoPlace, RecvOp, Revocations, RingConfig, SameHost, SenderEnd,
};
use ferrocx_sdk::{Blob, Host, MemKind, PluginError, PluginResult};
use std::sync::{Arc, Mutex, PoisonError};
use target::Target;
use writer::IpcWriter;

/// Score `can_connect` gives a reachable GPU on the same host (above shm's 100).
pub const SAME_HOST_SCORE: i32 = 200;

/// Export-cache entries checked for freed allocations on every export.
const VALIDATE_PER_EXPORT: usize = 2;

/// The p2p transport: one value per plugin context.
pub type P2p = SameHost<P2pBackend>;
/// One end of a p2p connection.
pub type P2pConn = ferrocx_sdk::same_host::Conn<P2pBackend>;
/// A posted p2p send or receive.
pub type P2pRequest = ferrocx_sdk::same_host::Request<P2pBackend>;

/// A context on CUDA with an explicit configuration (`init` reads it from
/// the environment).
pub fn with_config(host: Host, cfg: Config) -> PluginResult<P2p> {
    with_driver(host, cfg, Arc::new(ferrocx_sdk::device::cuda::CudaDriver))
}

/// A context on any driver (tests use `ferrocx_sdk::device::fake::FakeDriver`).
pub fn with_driver(host: Host, cfg: Config, driver: Arc<dyn Driver>) -> PluginResult<P2p> {
    Ok(SameHost::new(host, P2pBackend::new(host, cfg, driver)?))
}

ferrocx_sdk::shareable! {
    /// A registration as other processes may use it: the allocation's handle
    /// and where the registered bytes lie in it.
    pub struct RegInfo {
        /// [`REG_MAGIC`].
        pub magic: u64,
        /// Offset of the registered bytes in the allocation.
        pub offset: u64,
        /// Registered bytes.
        pub len: u64,
        /// The allocation's size.
        pub alloc_size: u64,
        /// The allocation's IPC handle.
        pub handle: [u8; HANDLE_BYTES],
    }
}

/// Magic of a registration blob ("FXP2PMR1").
pub const REG_MAGIC: u64 = u64::from_le_bytes(*b"FXP2PMR1");

/// A registration: device memory whose allocation's IPC handle is exported.
pub struct P2pMem {
    addr: u64,
    len: usize,
    reg: RegRef,
    id: u64,
}

/// What a registration tells a posted receive.
#[derive(Debug, Clone, Copy)]
pub struct RegRef {
    /// The allocation's handle.
    pub handle: IpcHandle,
    /// The allocation's base address.
    pub base: u64,
    /// The allocation's size.
    pub size: u64,
}

/// CUDA device memory: the FIFO in the receiver's GPU, copy engines, CUDA IPC.
pub struct P2pBackend {
    host: Host,
    cfg: Config,
    driver: Arc<dyn Driver>,
    exports: Mutex<ExportCache>,
}

impl P2pBackend {
    /// A back end on `driver` with `cfg` (validated).
    pub fn new(host: Host, cfg: Config, driver: Arc<dyn Driver>) -> PluginResult<Self> {
        let cfg = cfg.validated()?;
        Ok(P2pBackend {
            host,
            exports: Mutex::new(ExportCache::new(cfg.export_cache)),
            cfg,
            driver,
        })
    }

    /// The whole configuration (the ring's part is `Backend::config`).
    pub fn p2p_config(&self) -> &Config {
        &self.cfg
    }

    /// The IPC handle of `loc`'s allocation (exported on first use; `pin`
    /// counts a registration). The caller bound a context of `dev`.
    fn export(
        &self,
        revocations: &Revocations,
        dev: &dyn Device,
        loc: &Located,
        pin: bool,
    ) -> PluginResult<IpcHandle> {
        let mut revoked = Vec::new();
        let r = {
            let mut cache = self.exports.lock().unwrap_or_else(PoisonError::into_inner);
            // Notice a few freed allocations on every export, so senders let go of them soon.
            let d = &self.driver;
            cache.validate(
                VALIDATE_PER_EXPORT,
                |base, id| d.locate(base).is_some_and(|l| l.base == base && l.id == id),
                &mut revoked,
            );
            cache.handle(loc, pin, |base| dev.export(base), &mut revoked)
        };
        revocations.push(revoked);
        r
    }
}

impl Backend for P2pBackend {
    const NAME: &'static str = "p2p";
    const CAPS: u64 = FX_CAP_CUDA_MEM | FX_CAP_HOST_MEM | FX_CAP_REGISTER;
    const FIFO: FifoPlace = FifoPlace::Allocated;
    const INLINE: bool = false;
    const REVOCATIONS: bool = true;
    const PROGRESS_AT_POST: bool = true;

    type Target = Target;
    type Reg = RegRef;
    type MemHandle = P2pMem;
    type Device = Arc<dyn Device>;
    type Engine = Box<dyn Queue>;
    type Writer = IpcWriter;

    fn init(host: &Host) -> PluginResult<Self> {
        Self::new(
            *host,
            Config::from_host(host)?,
            Arc::new(ferrocx_sdk::device::cuda::CudaDriver),
        )
    }

    fn config(&self) -> &RingConfig {
        &self.cfg.ring
    }

    fn describe(&self) -> String {
        if let Err(why) = self.driver.available() {
            return format!("not available ({why}); never selected");
        }
        let r = &self.cfg.ring;
        format!(
            "({}) FIFO of {} × {} B per connection in the receiver's GPU memory; direct writes into receives of ≥ {} B: {}",
            self.driver.kind(),
            r.nslots,
            r.chunk_size,
            r.direct_min,
            r.direct_summary()
        )
    }

    fn can_connect(&self, host: &Host, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32 {
        if me.cuda_device < 0 || peer.cuda_device < 0 || me.cuda_pci == -1 || peer.cuda_pci == -1 {
            return 0;
        }
        if self.driver.available().is_err() {
            return 0;
        }
        match self.driver.reach(me, peer) {
            Reach::Yes => SAME_HOST_SCORE,
            Reach::Invisible(why) if self.cfg.invisible_peers => {
                host.debug(format!(
                    "p2p: rank {} → rank {}: {why}; assumed reachable (FERROCX_P2P_INVISIBLE=1)",
                    me.rank, peer.rank
                ));
                SAME_HOST_SCORE
            }
            Reach::Invisible(why) | Reach::No(why) => {
                host.debug(format!("p2p: rank {} → rank {}: {why}", me.rank, peer.rank));
                0
            }
        }
    }

    unsafe fn register(
        &self,
        revocations: &Revocations,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        out: &mut Blob,
    ) -> PluginResult<P2pMem> {
        let addr = ptr as u64;
        if kind == MemKind::Host {
            return Err(PluginError::unsupported(
                "p2p registers CUDA device memory only; host buffers go through its FIFO (shm suits them better)",
            ));
        }
        let d = &self.driver;
        let loc = d.locate(addr).ok_or_else(|| {
            PluginError::invalid(format!(
                "p2p register: {addr:#x} is not CUDA device memory ({} driver)",
                d.kind()
            ))
        })?;
        if !loc.covers(addr, len) {
            return Err(PluginError::invalid(format!(
                "p2p register: {len} bytes at {addr:#x} run past the end of their allocation ({} bytes at {:#x})",
                loc.size, loc.base
            )));
        }
        if !loc.ipc {
            return Err(PluginError::unsupported(format!(
                "p2p register: the allocation at {:#x} cannot be shared with CUDA IPC (cuMemCreate/VMM or managed memory); receives into it use the FIFO",
                loc.base
            )));
        }
        let dev = d.device(loc.device)?;
        let _bound = dev.bind()?;
        let handle = self.export(revocations, dev.as_ref(), &loc, true)?;
        out.write(&RegInfo {
            magic: REG_MAGIC,
            offset: addr - loc.base,
            len: len as u64,
            alloc_size: loc.size,
            handle: handle.0,
        })?;
        Ok(P2pMem {
            addr,
            len,
            reg: RegRef {
                handle,
                base: loc.base,
                size: loc.size,
            },
            id: loc.id,
        })
    }

    fn deregister(&self, revocations: &Revocations, mem: P2pMem) -> bool {
        let mut revoked = Vec::new();
        self.exports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unpin(mem.reg.base, mem.id, &mut revoked);
        revocations.push(revoked)
    }

    fn registration(mem: &P2pMem, addr: u64, len: usize) -> Option<RegRef> {
        let covers = addr >= mem.addr
            && (addr - mem.addr)
                .checked_add(len as u64)
                .is_some_and(|end| end <= mem.len as u64);
        covers.then_some(mem.reg)
    }

    fn device(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> PluginResult<Arc<dyn Device>> {
        if me.cuda_device < 0 {
            return Err(PluginError::invalid(format!(
                "p2p setup with rank {}: this rank ({}) has no GPU",
                peer.rank, me.rank
            )));
        }
        self.driver.device(me.cuda_device)
    }

    fn bind(dev: &Arc<dyn Device>) -> PluginResult<BindGuard> {
        dev.bind()
    }

    fn engine(dev: &Arc<dyn Device>) -> PluginResult<Box<dyn Queue>> {
        dev.queue()
    }

    fn alloc_fifo(&self, dev: &Arc<dyn Device>, bytes: usize) -> PluginResult<(u64, IpcHandle)> {
        dev.alloc(bytes)
    }

    fn free_fifo(dev: &Arc<dyn Device>, addr: u64) {
        dev.free(addr)
    }

    fn after_unmap(dev: &Arc<dyn Device>, keep: Box<dyn Send>) {
        dev.after_closes(keep)
    }

    fn offer(
        &self,
        revocations: &Revocations,
        dev: &Arc<dyn Device>,
        op: &RecvOp<RegRef>,
    ) -> Option<Target> {
        let c = &self.cfg.ring;
        if c.direct == Direct::Off || op.len < c.direct_min || op.len == 0 {
            return None;
        }
        if let Some(r) = op.reg {
            return Some(Target {
                addr: op.dst,
                handle: r.handle,
                offset: op.dst - r.base,
                alloc_size: r.size,
            });
        }
        if c.direct != Direct::Any {
            return None;
        }
        let loc = self.driver.locate(op.dst)?;
        if !loc.ipc || !loc.covers(op.dst, op.len) || loc.device != dev.ordinal() {
            return None;
        }
        match self.export(revocations, dev.as_ref(), &loc, false) {
            Ok(handle) => Some(Target {
                addr: op.dst,
                handle,
                offset: op.dst - loc.base,
                alloc_size: loc.size,
            }),
            Err(e) => {
                self.host.debug(format!(
                    "p2p: receive buffer at {:#x} not offered for direct writes: {}",
                    op.dst,
                    e.message()
                ));
                None
            }
        }
    }

    fn writer(
        &self,
        dev: &Arc<dyn Device>,
        end: &SenderEnd<'_, Target>,
    ) -> PluginResult<(u64, IpcWriter)> {
        let (fifo, map) = if end.same_process {
            let addr = end
                .seg
                .header()
                .info
                .0
                .fifo_addr
                .load(std::sync::atomic::Ordering::Relaxed);
            (addr, None)
        } else {
            let m = Mapping::open(dev, &end.info.fifo_handle()).map_err(|e| {
                PluginError::new(
                    e.code(),
                    format!(
                        "p2p connect to rank {}: cannot open the FIFO in its GPU memory ({} driver, GPU {} → peer GPU at PCI {}): {} (FERROCX_TRANSPORTS=^p2p avoids this transport)",
                        end.peer.rank,
                        self.driver.kind(),
                        dev.ordinal(),
                        ferrocx_sdk::device::pci_name(end.info.pci),
                        e.message()
                    ),
                )
            })?;
            (m.addr(), Some(m))
        };
        let writer = IpcWriter {
            dev: dev.clone(),
            same_process: end.same_process,
            fifo: map,
            maps: ConnMappings::new(self.cfg.ipc_cache),
        };
        Ok((fifo, writer))
    }

    fn holdings(&self) -> (usize, usize) {
        let exports = self
            .exports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        (exports, self.driver.open_handles())
    }
}

ferrocx_sdk::register_builtin!(P2p);
