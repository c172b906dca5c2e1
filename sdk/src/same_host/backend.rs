//! What a copy back end supplies to the same-host transport: the one place a
//! transport between processes of one host differs from another.
//!
//! | | shm (host memory) | p2p (CUDA device memory) |
//! |---|---|---|
//! | FIFO bytes | in the segment ([`FifoPlace::Segment`]) | receiver's GPU, opened by the sender through its IPC handle ([`FifoPlace::Allocated`]) |
//! | engine | [`HostCopy`](crate::copy::HostCopy) (`memcpy`, synchronous) | a CUDA stream (copy engines, events) |
//! | small chunks | inline in the slot header | through the FIFO |
//! | direct target | the receive buffer's address | its allocation's IPC handle + offset |
//! | direct write | `process_vm_writev` into the receiver | `cuMemcpyAsync` through the opened handle |
//! | revocations | none | deregistered or freed allocations |
//!
//! Everything else — segments, connection setup, the send and receive state
//! machines, the `P2pRegInfo` handshake, watching the peer, teardown — is one
//! implementation in this module's siblings.

use super::config::RingConfig;
use super::ops::RecvOp;
use super::regslot::WriteTarget;
use super::revoke::{Revocations, Revoked};
use super::segment::Segment;
use crate::abi::FxPeerInfo;
use crate::blob::Blob;
use crate::copy::Engine;
use crate::device::{BindGuard, IpcHandle};
use crate::error::{PluginError, PluginResult};
use crate::proc::Peer;
use crate::transport::MemKind;
use crate::Host;

/// Where a connection's FIFO bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FifoPlace {
    /// In the shared segment, after the flags (host memory both ends map).
    Segment,
    /// In memory the receiver's back end allocates and exports; the sender
    /// maps it through its handle.
    Allocated,
}

/// What the sender learns at `connect`, for its back end.
pub struct SenderEnd<'a, T: WriteTarget> {
    /// The receiver (rank, pid).
    pub peer: Peer,
    /// The receiver is this process (its addresses are ours).
    pub same_process: bool,
    /// The receiver's blob.
    pub info: &'a super::blob::RecvInfo,
    /// The mapped segment.
    pub seg: &'a Segment<T>,
}

/// A copy back end. One value per plugin context.
pub trait Backend: Sized + Send + Sync + 'static {
    /// Plugin name (at most 31 bytes), e.g. `"shm"`.
    const NAME: &'static str;
    /// `FX_CAP_*` bits.
    const CAPS: u64;
    /// Where the FIFO's bytes live.
    const FIFO: FifoPlace;
    /// Chunks of at most [`INLINE_BYTES`](super::layout::INLINE_BYTES) ride
    /// in their slot header (needs a synchronous engine and buffers the CPU
    /// reads and writes).
    const INLINE: bool;
    /// The receiver may withdraw published targets (the segment then carries
    /// a revocation ring).
    const REVOCATIONS: bool;
    /// Progress a connection as soon as a request is posted: queueing an
    /// asynchronous copy costs the poster nothing, while a synchronous engine
    /// would copy inside the post (and before the core posts its receives).
    const PROGRESS_AT_POST: bool;

    /// Where a receiver wants a message written.
    type Target: WriteTarget + Send + Sync + 'static;
    /// What a registration tells a posted receive.
    type Reg: Copy + Send + Sync + std::fmt::Debug + 'static;
    /// A registration (the transport's `MemHandle`).
    type MemHandle: Send + Sync + 'static;
    /// What a connection holds of its device (its GPU; `()` for host memory).
    type Device: Clone + Send + Sync + 'static;
    /// A connection's copy queue.
    type Engine: Engine;
    /// A sending connection's direct-write path.
    type Writer: Writer<Target = Self::Target, Engine = Self::Engine>;

    /// Read the configuration and set up (`Transport::init`).
    fn init(host: &Host) -> PluginResult<Self>;
    /// The ring settings.
    fn config(&self) -> &RingConfig;
    /// One line for the log at `init`: what this context will do.
    fn describe(&self) -> String;
    /// Score for `me` → `peer` (both known to be on one host, transport
    /// enabled): 0 = cannot, higher = preferred.
    fn can_connect(&self, host: &Host, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32;

    /// Register memory (`out`: what other processes may use of it).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid memory of `kind` until `deregister`.
    unsafe fn register(
        &self,
        revocations: &Revocations,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        out: &mut Blob,
    ) -> PluginResult<Self::MemHandle>;
    /// Release a registration; true if handles were revoked (the transport
    /// then forwards them to its receiving connections at once).
    fn deregister(&self, revocations: &Revocations, mem: Self::MemHandle) -> bool;
    /// What `mem` tells a receive of `len` bytes at `addr`, if it covers it.
    fn registration(mem: &Self::MemHandle, addr: u64, len: usize) -> Option<Self::Reg>;

    /// The device of a connection between `me` and `peer` (checked at `setup`).
    fn device(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> PluginResult<Self::Device>;
    /// Make `dev` current on the calling thread until the guard drops.
    fn bind(dev: &Self::Device) -> PluginResult<BindGuard>;
    /// A new copy queue on `dev` (bound).
    fn engine(dev: &Self::Device) -> PluginResult<Self::Engine>;
    /// [`FifoPlace::Allocated`]: allocate and export `bytes` on `dev` (bound):
    /// (address, handle).
    fn alloc_fifo(&self, dev: &Self::Device, bytes: usize) -> PluginResult<(u64, IpcHandle)> {
        let _ = (dev, bytes);
        Err(PluginError::internal(format!(
            "{} keeps its FIFO in the segment",
            Self::NAME
        )))
    }
    /// Free what [`alloc_fifo`](Self::alloc_fifo) returned (nobody maps it any more).
    fn free_fifo(dev: &Self::Device, addr: u64) {
        let _ = (dev, addr);
    }
    /// A freed sending end lets go of `keep` (its segment, whose liveness lock
    /// tells the receiver it may free its FIFO) only once the mappings it
    /// closed are really unmapped: a back end that unmaps on another thread
    /// holds it until then.
    fn after_unmap(dev: &Self::Device, keep: Box<dyn Send>) {
        let _ = dev;
        drop(keep);
    }

    /// Receiver: where the sender may write `op` directly, or `None` (the FIFO).
    fn offer(
        &self,
        revocations: &Revocations,
        dev: &Self::Device,
        op: &RecvOp<Self::Reg>,
    ) -> Option<Self::Target>;
    /// Sender at `connect`: the receiver's FIFO as addressable here (for
    /// [`FifoPlace::Allocated`]; ignored otherwise) and the direct-write path.
    fn writer(
        &self,
        dev: &Self::Device,
        end: &SenderEnd<'_, Self::Target>,
    ) -> PluginResult<(u64, Self::Writer)>;

    /// (export-cache entries, IPC handles open in this process), for leak checks.
    fn holdings(&self) -> (usize, usize) {
        (0, 0)
    }
}

/// Why a direct write did not happen.
#[derive(Debug)]
pub enum WriteError {
    /// Nothing was written and the path will not work on this connection
    /// (the kernel refuses cross-process writes): use the FIFO from now on.
    Refused(String),
    /// The write failed; the connection is unusable.
    Failed(PluginError),
}

/// A sending connection's direct-write path.
pub trait Writer: Send + 'static {
    /// Where a receiver wants a message written.
    type Target: WriteTarget;
    /// The connection's copy queue.
    type Engine: Engine;
    /// A target resolved for writing (holds whatever keeps it writable, e.g.
    /// the mapping, until the write completed).
    type Dest: Send + 'static;
    /// Bytes written directly per progress round: a synchronous write holds
    /// the progress thread, so one huge message is cut into rounds.
    const BUDGET: usize;

    /// Resolve `t`; an error turns the direct path off for this connection
    /// (with the reason in the log).
    fn open(&mut self, t: &Self::Target) -> Result<Self::Dest, String>;
    /// Write `n` bytes at `src` (this process) to offset `off` of `dest`.
    ///
    /// # Safety
    /// `src..src+n` stays valid until a mark made after this call completes
    /// (for a synchronous engine: until the call returns).
    unsafe fn write(
        &mut self,
        engine: &mut Self::Engine,
        dest: &Self::Dest,
        off: u64,
        src: u64,
        n: usize,
    ) -> Result<(), WriteError>;
    /// The receiver withdrew a handle (back ends with revocations).
    fn revoke(&mut self, _r: Revoked) {}
    /// Peer allocations held open now.
    fn mappings(&self) -> usize {
        0
    }
    /// The connection is freed: let go of every mapping; `drained` says
    /// whether the engine finished every copy (if not, mappings a copy may
    /// still use must never be closed).
    fn shutdown(&mut self, _drained: bool) {}
}
