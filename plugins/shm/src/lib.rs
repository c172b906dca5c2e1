//! # ferrocx-shm — the shared-memory transport
//!
//! Moves host memory between ranks of the same host. One connection is one
//! direction (sender → receiver) over one POSIX shared-memory segment that the
//! receiver creates:
//!
//! * **Ring** (module `ring`): `nslots` slots of `chunk` bytes. A message of L bytes
//!   is cut into ⌈L / chunk⌉ chunks (a 0-byte message is one empty chunk), each
//!   slot headed by (sequence number, total length, offset, chunk length).
//!   The sender fills free slots while the receiver drains earlier ones.
//! * **Single copy** ([`regslot`], module `cma`): for a receive of at least
//!   `FERROCX_SHM_SINGLE_COPY_MIN` bytes (registered, or any buffer with the
//!   default `FERROCX_SHM_SINGLE_COPY=1`) the receiver publishes its buffer
//!   address in a [`P2pRegInfo`] slot and the sender writes the message
//!   straight into it with `process_vm_writev`, then raises `copy_done` (the
//!   SDK's handshake, `ferrocx_sdk::same_host::regslot`, shared with p2p).
//!   Where the kernel refuses (ptrace policy, seccomp) the sender logs once and
//!   uses the ring.
//!
//! Messages match in order per connection (the nth `isend` feeds the nth
//! `irecv`); `test` does one non-blocking round of progress on the request's
//! connection, so requests complete in any order the core tests them. A peer
//! that exits or fails is detected within about 50 ms of no progress.
//! Segment names leave /dev/shm as soon as both ends have mapped them, and
//! `init` removes leftovers of processes that died before that.
//!
//! ## Environment (see [`config`])
//!
//! | variable | default |
//! |---|---|
//! | `FERROCX_SHM_DISABLE` | `0` |
//! | `FERROCX_SHM_CHUNK_SIZE` | `524288` (512 KiB) |
//! | `FERROCX_SHM_NSLOTS` | `8` |
//! | `FERROCX_SHM_SINGLE_COPY` | `1` (any buffer; `registered`, `0`) |
//! | `FERROCX_SHM_SINGLE_COPY_MIN` | `16384` (16 KiB) |
#![warn(missing_docs)]

// Shared with the other same-host transport (paths stay `crate::ops` etc.).
pub(crate) use ferrocx_sdk::same_host::{ops, proc, watchdog};
mod blobs;
mod cma;
pub mod config;
mod conn;
mod ctx;
mod layout;
mod mem;
mod recv;
pub mod regslot;
mod ring;
mod segment;
mod send;
mod stats;
mod sweep;
mod userbuf;

#[cfg(test)]
mod tests;

pub use config::Config;
pub use conn::{ShmConn, ShmRequest};
pub use mem::ShmMem;
pub use regslot::P2pRegInfo;
pub use stats::ConnStats;

use ctx::Ctx;
use ferrocx_sdk::abi::{FxPeerInfo, FX_CAP_HOST_MEM, FX_CAP_REGISTER};
use ferrocx_sdk::{
    Blob, ConnReq, ConnectState, Host, MemKind, PluginError, PluginResult, Transport,
};
use recv::RecvOp;
use std::path::Path;
use std::sync::Arc;
use userbuf::{RecvBuf, SendBuf};

/// Score `can_connect` gives a peer on the same host.
pub const SAME_HOST_SCORE: i32 = 100;

/// The shm transport: one value per plugin context.
pub struct Shm {
    ctx: Arc<Ctx>,
}

impl Shm {
    /// A context with an explicit configuration (`init` reads it from the
    /// environment). Removes stale segments of exited processes.
    pub fn with_config(host: Host, cfg: Config) -> PluginResult<Self> {
        Ok(Shm {
            ctx: Arc::new(Self::make_ctx(host, cfg)?),
        })
    }

    fn make_ctx(host: Host, cfg: Config) -> PluginResult<Ctx> {
        let cfg = cfg.validated()?;
        let removed = sweep::sweep_stale(Path::new(sweep::SHM_DIR));
        if !removed.is_empty() {
            host.info(format!(
                "shm: removed {} stale segment(s) of exited processes: {removed:?}",
                removed.len()
            ));
        }
        if cfg.disabled {
            host.info("shm: disabled by FERROCX_SHM_DISABLE");
        } else {
            host.info(format!(
                "shm: ring of {} × {} B per connection; single copy (process_vm_writev) into receives of ≥ {} B: {}",
                cfg.nslots,
                cfg.chunk_size,
                cfg.single_copy_min,
                match (cfg.single_copy, cfg.single_copy_unregistered) {
                    (false, _) => "off (FERROCX_SHM_SINGLE_COPY=0)",
                    (true, false) => "registered buffers only (FERROCX_SHM_SINGLE_COPY=registered)",
                    (true, true) => "any buffer",
                }
            ));
        }
        Ok(Ctx::new(host, cfg))
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.ctx.cfg
    }
}

impl Transport for Shm {
    type Conn = ShmConn;
    type Request = ShmRequest;
    type MemHandle = ShmMem;

    const NAME: &'static str = "shm";
    const CAPS: u64 = FX_CAP_HOST_MEM | FX_CAP_REGISTER;

    fn init(host: Host) -> PluginResult<Self> {
        let cfg = Config::from_host(&host)?;
        Self::with_config(host, cfg)
    }

    fn can_connect(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32 {
        if self.ctx.cfg.disabled || me.host_hash != peer.host_hash {
            return 0;
        }
        SAME_HOST_SCORE
    }

    fn setup(&self, req: &ConnReq, out: &mut Blob) -> PluginResult<ShmConn> {
        ShmConn::setup(&self.ctx, req, out)
    }

    fn connect(&self, conn: &mut ShmConn, peer: &Blob) -> PluginResult<ConnectState> {
        conn.connect(peer)
    }

    // SAFETY: the caller keeps `ptr..ptr+len` valid until deregister (Transport::register's contract).
    unsafe fn register(
        &self,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        _out: &mut Blob,
    ) -> PluginResult<ShmMem> {
        match kind {
            MemKind::Host => Ok(ShmMem {
                addr: ptr as usize,
                len,
            }),
            MemKind::Cuda => Err(PluginError::unsupported(
                "shm moves host memory only; CUDA buffers cannot be registered",
            )),
        }
    }

    // SAFETY: the caller keeps the buffer valid until the request completes (Transport::isend's contract).
    unsafe fn isend(
        &self,
        conn: &mut ShmConn,
        data: *const u8,
        len: usize,
        _mhandle: Option<&ShmMem>,
    ) -> PluginResult<Option<ShmRequest>> {
        // SAFETY: this fn's contract: `data..data+len` stays valid and unmodified until completion.
        let buf = unsafe { SendBuf::new(data, len) };
        conn.post_send(buf)
    }

    // SAFETY: the caller keeps the buffer valid and unaliased until the request completes (Transport::irecv's contract).
    unsafe fn irecv(
        &self,
        conn: &mut ShmConn,
        data: *mut u8,
        len: usize,
        mhandle: Option<&ShmMem>,
    ) -> PluginResult<Option<ShmRequest>> {
        let registered = mhandle.is_some_and(|m| m.contains(data as usize, len));
        // SAFETY: this fn's contract: `data..data+len` stays valid and ours until completion.
        let buf = unsafe { RecvBuf::new(data, len) };
        conn.post_recv(RecvOp::new(buf, registered))
    }

    fn test(&self, req: &mut ShmRequest) -> PluginResult<Option<usize>> {
        req.test()
    }

    fn free(&self, conn: ShmConn) -> PluginResult<()> {
        // Dropping reports to the peer, cancels what is pending, unmaps and unlinks.
        drop(conn);
        Ok(())
    }
}

ferrocx_sdk::register_builtin!(Shm);
