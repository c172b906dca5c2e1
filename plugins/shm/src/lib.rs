//! # ferrocx-shm — the shared-memory transport
//!
//! Moves host memory between ranks of the same host: the SDK's same-host
//! transport (`ferrocx_sdk::same_host`) over a host-memory copy back end.
//! One connection is one direction (sender → receiver) over one POSIX
//! shared-memory segment that the receiver creates:
//!
//! * **Ring**: `nslots` slots of `chunk` bytes inside the segment. A message
//!   of L bytes is cut into ⌈L / chunk⌉ chunks (a 0-byte message is one
//!   empty chunk), each announced by its slot header; chunks of up to 24 B
//!   travel inside the header (one cache line per small message). The sender
//!   fills free slots with `memcpy` while the receiver drains earlier ones.
//! * **Single copy**: for a receive of at least `FERROCX_SHM_SINGLE_COPY_MIN`
//!   bytes (registered, or any buffer with the default
//!   `FERROCX_SHM_SINGLE_COPY=1`) the receiver publishes its buffer address
//!   in a `P2pRegInfo` slot and the sender writes the message straight into
//!   it with `process_vm_writev` (at most 16 MiB per progress round), then
//!   raises `copy_done` — the SDK's one implementation of the handshake,
//!   shared with p2p. Before its first write the sender reads back a token
//!   the receiver left in its memory, so a pid from another namespace, or a
//!   recycled pid, is never written to. Where the kernel refuses (ptrace
//!   policy, seccomp) the sender logs once and uses the ring.
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

pub mod cma;
pub mod config;

pub use config::Config;
pub use ferrocx_sdk::same_host::{ConnStats, P2pRegInfo};

use cma::{CmaWriter, CopyFn};
use ferrocx_sdk::abi::{FxPeerInfo, FX_CAP_HOST_MEM, FX_CAP_REGISTER};
use ferrocx_sdk::copy::HostCopy;
use ferrocx_sdk::device::BindGuard;
use ferrocx_sdk::env::ZeroCopy;
use ferrocx_sdk::same_host::{
    Backend, FifoPlace, RecvOp, Revocations, RingConfig, SameHost, SenderEnd,
};
use ferrocx_sdk::{Blob, Host, MemKind, PluginError, PluginResult};
use std::sync::atomic::Ordering;

/// Score `can_connect` gives a peer on the same host.
pub const SAME_HOST_SCORE: i32 = 100;

/// The shm transport: one value per plugin context.
pub type Shm = SameHost<ShmBackend>;
/// One end of an shm connection.
pub type ShmConn = ferrocx_sdk::same_host::Conn<ShmBackend>;
/// A posted shm send or receive.
pub type ShmRequest = ferrocx_sdk::same_host::Request<ShmBackend>;

/// A context with an explicit configuration (`init` reads it from the environment).
pub fn with_config(host: Host, cfg: Config) -> PluginResult<Shm> {
    Ok(SameHost::new(host, ShmBackend::new(cfg)?))
}

/// A registered host buffer. It carries no kernel state: `process_vm_writev`
/// needs only the address, which the receiver publishes per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmMem {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

impl ShmMem {
    /// Whether `addr..addr+len` lies inside the registration.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

/// Host memory: the ring in the segment, `memcpy`, and `process_vm_writev`.
pub struct ShmBackend {
    cfg: Config,
    copier: CopyFn,
}

impl ShmBackend {
    /// A back end with `cfg` (validated).
    pub fn new(cfg: Config) -> PluginResult<Self> {
        Ok(ShmBackend {
            cfg: cfg.validated()?,
            copier: cma::write_remote,
        })
    }

    /// The same with another cross-process write (tests: a refusing kernel).
    pub fn with_copier(cfg: Config, copier: CopyFn) -> PluginResult<Self> {
        Ok(ShmBackend {
            copier,
            ..Self::new(cfg)?
        })
    }
}

impl Backend for ShmBackend {
    const NAME: &'static str = "shm";
    const CAPS: u64 = FX_CAP_HOST_MEM | FX_CAP_REGISTER;
    const FIFO: FifoPlace = FifoPlace::Segment;
    const INLINE: bool = true;
    const REVOCATIONS: bool = false;
    const PROGRESS_AT_POST: bool = false;

    type Target = u64;
    type Reg = ();
    type MemHandle = ShmMem;
    type Device = ();
    type Engine = HostCopy;
    type Writer = CmaWriter;

    fn init(host: &Host) -> PluginResult<Self> {
        Self::new(config::from_host(host)?)
    }

    fn config(&self) -> &RingConfig {
        &self.cfg
    }

    fn describe(&self) -> String {
        format!(
            "ring of {} × {} B per connection; single copy (process_vm_writev) into receives of ≥ {} B: {}",
            self.cfg.nslots,
            self.cfg.chunk_size,
            self.cfg.direct_min,
            self.cfg.direct_summary()
        )
    }

    fn can_connect(&self, _host: &Host, _me: &FxPeerInfo, _peer: &FxPeerInfo) -> i32 {
        SAME_HOST_SCORE
    }

    unsafe fn register(
        &self,
        _revocations: &Revocations,
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

    fn deregister(&self, _revocations: &Revocations, _mem: ShmMem) -> bool {
        false
    }

    fn registration(mem: &ShmMem, addr: u64, len: usize) -> Option<()> {
        mem.contains(addr as usize, len).then_some(())
    }

    fn device(&self, _me: &FxPeerInfo, _peer: &FxPeerInfo) -> PluginResult<()> {
        Ok(())
    }

    fn bind(_dev: &()) -> PluginResult<BindGuard> {
        Ok(BindGuard::noop())
    }

    fn engine(_dev: &()) -> PluginResult<HostCopy> {
        Ok(HostCopy)
    }

    /// Any receive buffer qualifies by default, not only registered ones: CMA
    /// needs no per-buffer setup, and a posted receive keeps its buffer valid
    /// until it completes.
    fn offer(&self, _revocations: &Revocations, _dev: &(), op: &RecvOp<()>) -> Option<u64> {
        let c = &self.cfg;
        let eligible = match c.direct {
            ZeroCopy::Off => false,
            ZeroCopy::Registered => op.reg.is_some(),
            ZeroCopy::Any => true,
        };
        (eligible && op.len >= c.direct_min && op.dst != 0).then_some(op.dst)
    }

    fn writer(&self, _dev: &(), end: &SenderEnd<'_, u64>) -> PluginResult<(u64, CmaWriter)> {
        let info = &end.seg.header().info.0;
        let probe = (
            info.probe_addr.load(Ordering::Relaxed),
            info.probe_value.load(Ordering::Relaxed),
        );
        let writer = CmaWriter {
            peer: end.peer,
            probe,
            verified: None,
            copier: self.copier,
        };
        // The ring lies in the segment, which the sender maps itself.
        Ok((0, writer))
    }
}

ferrocx_sdk::register_builtin!(Shm);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_contain_their_ranges() {
        let m = ShmMem { addr: 100, len: 50 };
        assert!(m.contains(100, 50) && m.contains(120, 0) && m.contains(149, 1));
        assert!(!m.contains(99, 2) && !m.contains(140, 11) && !m.contains(usize::MAX, 2));
        assert_eq!(ShmBackend::registration(&m, 120, 10), Some(()));
        assert_eq!(ShmBackend::registration(&m, 120, 40), None);
    }
}
