//! # ferrocx-p2p — GPU to GPU on one host: CUDA IPC and copy engines
//!
//! Moves CUDA device memory between ranks of the same host whose GPUs reach
//! each other (`cuDeviceCanAccessPeer`, or the same GPU), e.g. over NVLink.
//! Data moves only by copy engines (`cuMemcpyAsync` on plugin-owned
//! non-blocking streams, completion polled with events in `test`): no kernel
//! is launched, no SM is used, no multicast object is created. One connection
//! is one direction (sender → receiver) with its own stream on each end, so
//! the core's channels (several connections per peer) copy in parallel.
//!
//! ## Connecting: only plain bytes cross
//!
//! * The **receiver** allocates a FIFO of `FERROCX_P2P_NSLOTS` slots of
//!   `FERROCX_P2P_CHUNK_SIZE` bytes in its GPU memory (`cuMemAlloc`), exports
//!   it (`cuIpcGetMemHandle`), and creates a POSIX shared-memory segment for
//!   the flags (module `layout`). Its blob holds the segment's name, the FIFO's
//!   64-byte IPC handle and geometry, its pid, its GPU's PCI location and a
//!   per-process token — never a pointer, stream, event or descriptor
//!   (module [`blob`], checked by `ferrocx_sdk::shareable!`).
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
//! * **FIFO** (module `fifo`): the sender reserves a free slot, queues
//!   `cuMemcpyAsync` from its buffer (device or host) into that slot of the
//!   receiver's FIFO and an event; when the event completed it publishes the
//!   slot header (sequence number, total, offset, length) with a stamp in the
//!   shared segment. The receiver sees the stamp, queues `cuMemcpyAsync` from
//!   the slot (local GPU memory) into its buffer, and hands the slot back
//!   (`tail`) when that copy's event completed. Up to `NSLOTS` chunks, of any
//!   number of messages, are in flight. A message longer than its receive is
//!   drained and fails that receive alone.
//! * **Direct** (zero copy, module [`regslot`]): the receiver publishes every
//!   posted receive in a `P2pRegInfo { copy_started, copy_done,
//!   receiver_ready, receiver_reg_addr, receiver_reg_bytes }` slot of the
//!   segment — for a receive of at least `FERROCX_P2P_DIRECT_MIN` bytes into a
//!   registered buffer, or by default (`FERROCX_P2P_DIRECT=1`) into any
//!   `cuMemAlloc`'d device buffer, with the IPC handle of its allocation
//!   (`cuMemGetAddressRange`-style base from `cuPointerGetAttributes`, cached
//!   per allocation and identity), the offset and the size. A sender with a
//!   message at least that large waits for the slot, opens the handle (cached
//!   by handle bytes, at most `FERROCX_P2P_IPC_CACHE` per connection), raises
//!   `copy_started`, copies straight into the receiver's buffer with one
//!   `cuMemcpyAsync`, and raises `copy_done` when its event completed; the
//!   receive then completes. The handshake is the SDK's one implementation
//!   (`ferrocx_sdk::same_host::regslot`), shared with the shm transport's
//!   single copy; only the copy back end differs (CUDA IPC + copy engine
//!   instead of `process_vm_writev`). Receives without a target (host memory, VMM or
//!   managed allocations, small messages) take the FIFO.
//! * **Revocations** (module [`revoke`]): when the receiver deregisters a
//!   buffer, sees that an exported allocation was freed (same address, new
//!   `CU_POINTER_ATTRIBUTE_BUFFER_ID`) or drops one from its export cache, it
//!   writes the handle into the segment's revocation ring; the sender closes
//!   that mapping (`cuIpcCloseMemHandle`) at its next progress round, or when
//!   a copy in flight through it completes. Freeing a connection closes all
//!   of its mappings. Each handle is opened at most once per process and
//!   closed when its last user lets go (module [`ipc_cache`]). On CUDA the
//!   `cuIpcCloseMemHandle` itself runs on a plugin thread (`ferrocx-p2p-close`):
//!   unmapping may wait for the whole device, and the progress thread must
//!   never block on a device whose user stream waits for its plan. Exported
//!   receive allocations get `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`, so a
//!   synchronous copy into them (e.g. from pageable memory) has landed before
//!   it returns and cannot overwrite a peer's later direct write.
//!
//! ## Host memory
//!
//! Buffers in host memory (pinned or pageable) work too: the same
//! `cuMemcpyAsync` calls take host addresses through unified addressing
//! (a copy from the FIFO into pageable memory returns once done, so it is
//! synchronous). They always take the FIFO (host memory has no IPC handle).
//! It is correct but slower than the shm transport, which the core should
//! prefer for host buffers.
//!
//! ## Failures, waits and threads
//!
//! Every hook binds the connection's device (primary) context on the calling
//! thread first, restoring another context a caller had. Each end holds a
//! lock on one byte of the segment (`F_OFD_SETLK`); the kernel drops it when
//! the process dies, so a peer that exits or is killed makes pending requests
//! fail with an error naming its rank and pid within about 50 ms of no
//! progress (module `segment`). `test` never blocks; `free` waits for its own
//! copies at most `Host::timeout()` and stops when the communicator is
//! aborted; an aborted communicator fails every pending request. A receiving
//! end keeps its FIFO until the sender closed its mapping of it (CUDA leaves
//! freeing memory that another process maps undefined); `finalize` waits for
//! that at most 5 s (bounded by `Host::timeout()`, stopped by an abort), then
//! frees it anyway.
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
//! The crate carries a host-memory stand-in for the GPU ([`backend::fake`]):
//! shared-memory "device buffers" whose IPC handles are their names, and copy
//! queues that copy only when a later mark is polled complete. Every test is
//! in the library's test binary (`cargo test -p ferrocx-p2p --lib`): the
//! protocol in one process on the stand-in; CUDA in one process (skipped,
//! with the reason printed, without a driver); and two processes — the binary
//! re-runs itself as the peer and the two exchange blobs as hex text — on the
//! stand-in and, when present, on CUDA (sizes 0 to 256 MiB, 300 messages in
//! flight, FIFO, direct, registered, pageable host memory, a killed peer,
//! register/transfer/deregister/free cycles that must leave no mapping open
//! and no GPU memory used).
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod backend;
pub mod blob;
pub mod config;
// Shared with the other same-host transport (paths stay `crate::ops` etc.).
pub(crate) use ferrocx_sdk::same_host::{ops, proc, watchdog};
mod conn;
mod ctx;
mod export;
mod fifo;
pub mod ipc_cache;
mod layout;
mod pipeline;
mod recv;
pub mod regslot;
pub mod revoke;
mod segment;
mod send;
mod stats;
mod sweep;

#[cfg(test)]
mod tests;

pub use config::{Config, Direct};
pub use conn::{P2pConn, P2pRequest};
pub use regslot::P2pRegInfo;
pub use stats::{ConnStats, CtxStats};

use backend::{Backend, Reach};
use ctx::Ctx;
use ferrocx_sdk::abi::{FxPeerInfo, FX_CAP_CUDA_MEM, FX_CAP_HOST_MEM, FX_CAP_REGISTER};
use ferrocx_sdk::{
    Blob, ConnReq, ConnectState, Host, MemKind, PluginError, PluginResult, Transport,
};
use recv::{RecvOp, RegRef};
use send::SendOp;
use std::path::Path;
use std::sync::Arc;

/// Score `can_connect` gives a reachable GPU on the same host (above shm's 100).
pub const SAME_HOST_SCORE: i32 = 200;

/// The p2p transport: one value per plugin context.
pub struct P2p {
    ctx: Arc<Ctx>,
}

/// A registration: device memory whose allocation's IPC handle is exported.
pub struct P2pMem {
    addr: u64,
    len: usize,
    base: u64,
    size: u64,
    id: u64,
    handle: backend::IpcHandle,
}

impl P2pMem {
    fn covers(&self, addr: u64, len: usize) -> bool {
        addr >= self.addr
            && (addr - self.addr)
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len as u64)
    }
}

impl P2p {
    /// A context on CUDA with an explicit configuration (`init` reads it from
    /// the environment).
    pub fn with_config(host: Host, cfg: Config) -> PluginResult<Self> {
        Self::with_backend(host, cfg, Arc::new(backend::cuda::CudaBackend))
    }

    /// A context on any backend (tests use [`backend::fake::FakeBackend`]).
    pub fn with_backend(host: Host, cfg: Config, backend: Arc<dyn Backend>) -> PluginResult<Self> {
        let cfg = cfg.validated()?;
        let removed = sweep::sweep_stale(Path::new(sweep::SHM_DIR));
        if !removed.is_empty() {
            host.info(format!(
                "p2p: removed {} stale segment(s) of exited processes: {removed:?}",
                removed.len()
            ));
        }
        if cfg.disabled {
            host.info("p2p: disabled by FERROCX_P2P_DISABLE");
        } else if let Err(why) = backend.available() {
            host.info(format!("p2p: not available ({why}); never selected"));
        } else {
            host.info(format!(
                "p2p ({}): FIFO of {} × {} B per connection in the receiver's GPU memory; direct writes into receives of ≥ {} B: {}",
                backend.kind(),
                cfg.nslots,
                cfg.chunk_size,
                cfg.direct_min,
                match cfg.direct {
                    Direct::Off => "off (FERROCX_P2P_DIRECT=0)",
                    Direct::Registered => "registered buffers only (FERROCX_P2P_DIRECT=registered)",
                    Direct::Any => "any device buffer",
                }
            ));
        }
        Ok(P2p {
            ctx: Arc::new(Ctx::new(host, cfg, backend)),
        })
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.ctx.cfg
    }

    /// What the context holds (caches, handles, connections), for leak checks
    /// (frees buried FIFOs whose sender let go first).
    pub fn stats(&self) -> CtxStats {
        self.ctx.reap(false);
        self.ctx.stats()
    }
}

impl Transport for P2p {
    type Conn = P2pConn;
    type Request = P2pRequest;
    type MemHandle = P2pMem;

    const NAME: &'static str = "p2p";
    const CAPS: u64 = FX_CAP_CUDA_MEM | FX_CAP_HOST_MEM | FX_CAP_REGISTER;

    fn init(host: Host) -> PluginResult<Self> {
        let cfg = Config::from_host(&host)?;
        Self::with_config(host, cfg)
    }

    fn can_connect(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32 {
        let cfg = &self.ctx.cfg;
        if cfg.disabled || me.host_hash != peer.host_hash {
            return 0;
        }
        if me.cuda_device < 0 || peer.cuda_device < 0 || me.cuda_pci == -1 || peer.cuda_pci == -1 {
            return 0;
        }
        if self.ctx.backend.available().is_err() {
            return 0;
        }
        match self.ctx.backend.reach(me, peer) {
            Reach::Yes => SAME_HOST_SCORE,
            Reach::Invisible(why) if cfg.invisible_peers => {
                self.ctx.host.debug(format!(
                    "p2p: rank {} → rank {}: {why}; assumed reachable (FERROCX_P2P_INVISIBLE=1)",
                    me.rank, peer.rank
                ));
                SAME_HOST_SCORE
            }
            Reach::Invisible(why) | Reach::No(why) => {
                self.ctx
                    .host
                    .debug(format!("p2p: rank {} → rank {}: {why}", me.rank, peer.rank));
                0
            }
        }
    }

    fn setup(&self, req: &ConnReq, out: &mut Blob) -> PluginResult<P2pConn> {
        P2pConn::setup(&self.ctx, req, out)
    }

    fn connect(&self, conn: &mut P2pConn, peer: &Blob) -> PluginResult<ConnectState> {
        conn.connect(peer)
    }

    // SAFETY: the caller keeps `ptr..ptr+len` valid until deregister (Transport::register's contract).
    unsafe fn register(
        &self,
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
        let b = &self.ctx.backend;
        let loc = b.locate(addr).ok_or_else(|| {
            PluginError::invalid(format!(
                "p2p register: {addr:#x} is not CUDA device memory ({} backend)",
                b.kind()
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
        let dev = b.device(loc.device)?;
        let _bound = dev.bind()?;
        let handle = self.ctx.export(dev.as_ref(), &loc, true)?;
        out.write(&blob::RegInfo {
            magic: blob::REG_MAGIC,
            offset: addr - loc.base,
            len: len as u64,
            alloc_size: loc.size,
            handle: handle.0,
        })?;
        Ok(P2pMem {
            addr,
            len,
            base: loc.base,
            size: loc.size,
            id: loc.id,
            handle,
        })
    }

    fn deregister(&self, mem: P2pMem) -> PluginResult<()> {
        self.ctx.unpin(mem.base, mem.id);
        Ok(())
    }

    // SAFETY: the caller keeps the buffer valid until the request completes (Transport::isend's contract).
    unsafe fn isend(
        &self,
        conn: &mut P2pConn,
        data: *const u8,
        len: usize,
        _mhandle: Option<&P2pMem>,
    ) -> PluginResult<Option<P2pRequest>> {
        conn.post_send(SendOp {
            src: data as u64,
            len,
        })
    }

    // SAFETY: the caller keeps the buffer valid and unaliased until the request completes (Transport::irecv's contract).
    unsafe fn irecv(
        &self,
        conn: &mut P2pConn,
        data: *mut u8,
        len: usize,
        mhandle: Option<&P2pMem>,
    ) -> PluginResult<Option<P2pRequest>> {
        let dst = data as u64;
        let reg = mhandle.filter(|m| m.covers(dst, len)).map(|m| RegRef {
            handle: m.handle,
            base: m.base,
            size: m.size,
        });
        conn.post_recv(RecvOp::new(dst, len, reg))
    }

    fn test(&self, req: &mut P2pRequest) -> PluginResult<Option<usize>> {
        req.test()
    }

    fn free(&self, conn: P2pConn) -> PluginResult<()> {
        // Dropping waits for our copies, closes mappings, reports to the peer,
        // releases (or parks) the FIFO, unmaps and unlinks.
        drop(conn);
        self.ctx.reap(false);
        Ok(())
    }

    fn finalize(self) -> PluginResult<()> {
        self.ctx.reap_at_finalize();
        Ok(())
    }
}

ferrocx_sdk::register_builtin!(P2p);
