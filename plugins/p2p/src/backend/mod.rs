//! What the protocol needs from a GPU, behind two traits so the same protocol
//! code runs on CUDA ([`cuda`]) and, for tests on machines without a GPU, on a
//! host-memory stand-in ([`fake`]) whose "IPC handles" are shared-memory names.
//!
//! * [`Backend`]: process-level questions — can this GPU reach that one, is
//!   this address device memory and of which allocation.
//! * [`Device`]: one GPU as this process sees it — bind its context on the
//!   calling thread, allocate the FIFO, export and open IPC handles, make
//!   copy engines.
//! * [`Engine`]: one connection's copy queue (a CUDA stream): copies run in
//!   the order queued; a [`Mark`] (an event) completes once every copy queued
//!   before it has.
//!
//! Nothing here is ever put in a blob except [`IpcHandle`], which is bytes made
//! to be exported (`CUipcMemHandle`).

pub mod cuda;
pub mod fake;

use crate::ipc_cache::OpenTable;
use ferrocx_sdk::abi::FxPeerInfo;
use ferrocx_sdk::PluginResult;
use std::sync::Arc;
use std::time::Instant;

/// Bytes of an IPC handle (`sizeof(CUipcMemHandle)`).
pub const HANDLE_BYTES: usize = 64;

/// An exported allocation's handle: opaque bytes that mean the same in every
/// process of the host (a `CUipcMemHandle`, or the stand-in's segment name).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcHandle(pub [u8; HANDLE_BYTES]);

impl IpcHandle {
    /// All zero: "no handle".
    pub const NONE: IpcHandle = IpcHandle([0; HANDLE_BYTES]);

    /// The handle as eight little-endian words (how the shared segment stores it).
    pub fn to_words(&self) -> [u64; HANDLE_BYTES / 8] {
        let mut w = [0u64; HANDLE_BYTES / 8];
        for (i, c) in self.0.chunks_exact(8).enumerate() {
            w[i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        w
    }

    /// Inverse of [`to_words`](Self::to_words).
    pub fn from_words(words: &[u64; HANDLE_BYTES / 8]) -> Self {
        let mut h = [0u8; HANDLE_BYTES];
        for (i, w) in words.iter().enumerate() {
            h[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        IpcHandle(h)
    }

    /// Whether this is [`NONE`](Self::NONE).
    pub fn is_none(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }
}

impl std::fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The first bytes are enough to tell handles apart in logs.
        write!(f, "IpcHandle(")?;
        for b in &self.0[..12] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// The allocation an address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// Start of the allocation (what IPC exports).
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
    /// An identity that differs between two allocations at the same address
    /// (`CU_POINTER_ATTRIBUTE_BUFFER_ID`): a freed and reallocated buffer is a new one.
    pub id: u64,
    /// Device ordinal in this process.
    pub device: i32,
    /// Whether a legacy IPC handle can be made for it (`cuMemAlloc` memory:
    /// yes; `cuMemCreate`/VMM, managed memory: no).
    pub ipc: bool,
}

impl Located {
    /// Whether `addr..addr+len` lies inside the allocation.
    pub fn covers(&self, addr: u64, len: usize) -> bool {
        addr >= self.base
            && (addr - self.base)
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.size)
    }
}

/// Can this rank's GPU write into the peer's?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Yes (`cuDeviceCanAccessPeer`, or the same GPU).
    Yes,
    /// No, and why.
    No(String),
    /// The peer's GPU is not visible in this process (`CUDA_VISIBLE_DEVICES`); why.
    Invisible(String),
}

/// Restores the calling thread's previous CUDA context when dropped (if binding changed it).
#[must_use = "the context stays bound only while the guard lives"]
pub struct BindGuard {
    prev: usize,
    restore: Option<fn(usize)>,
}

impl BindGuard {
    /// Nothing to restore.
    pub fn noop() -> Self {
        BindGuard {
            prev: 0,
            restore: None,
        }
    }

    /// Call `restore(prev)` on drop.
    pub fn restoring(prev: usize, restore: fn(usize)) -> Self {
        BindGuard {
            prev,
            restore: Some(restore),
        }
    }
}

impl Drop for BindGuard {
    fn drop(&mut self) {
        if let Some(f) = self.restore {
            f(self.prev)
        }
    }
}

/// A point in an [`Engine`]'s queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark(pub u32);

/// Process-level GPU questions.
pub trait Backend: Send + Sync + 'static {
    /// "cuda" or "fake", for messages.
    fn kind(&self) -> &'static str;
    /// Whether the backend can run here, or why not.
    fn available(&self) -> Result<(), String>;
    /// The device with this ordinal (shared by every user in the process).
    fn device(&self, ordinal: i32) -> PluginResult<Arc<dyn Device>>;
    /// Whether `me`'s GPU can write into `peer`'s (both on this host).
    fn reach(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> Reach;
    /// The device allocation holding `addr`, or `None` for host memory.
    fn locate(&self, addr: u64) -> Option<Located>;
    /// IPC handles opened in this process on every live device (leak checks).
    fn open_handles(&self) -> usize;
}

/// One GPU as this process sees it.
pub trait Device: Send + Sync + 'static {
    /// Ordinal in this process.
    fn ordinal(&self) -> i32;
    /// Make this device's context current on the calling thread until the guard drops.
    fn bind(&self) -> PluginResult<BindGuard>;
    /// A new copy queue (the context must be bound).
    fn engine(&self) -> PluginResult<Box<dyn Engine>>;
    /// Allocate `bytes` of device memory and export it: (address, handle).
    fn alloc(&self, bytes: usize) -> PluginResult<(u64, IpcHandle)>;
    /// Free memory from [`alloc`](Self::alloc) (nobody may use it any more).
    fn free(&self, addr: u64);
    /// The IPC handle of the allocation starting at `base`.
    fn export(&self, base: u64) -> PluginResult<IpcHandle>;
    /// Map a peer's handle; the mapped base address. Called once per handle
    /// at a time through [`OpenTable`].
    fn open(&self, handle: &IpcHandle) -> PluginResult<u64>;
    /// Unmap what [`open`](Self::open) returned.
    fn close(&self, addr: u64);
    /// The process-wide table of handles opened on this device.
    fn opens(&self) -> &OpenTable;
}

/// One connection's ordered copy queue.
pub trait Engine: Send {
    /// Queue `len` bytes from `src` to `dst` (addresses of this process, host
    /// or device) behind everything queued before.
    ///
    /// # Safety
    /// Both ranges must stay valid until a [`Mark`] made after this call completes.
    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> PluginResult<()>;
    /// A mark that completes once everything queued so far has; `None` when
    /// every mark is in use (poll and release some, then retry).
    fn mark(&mut self) -> PluginResult<Option<Mark>>;
    /// Whether the mark completed (never blocks).
    fn poll(&mut self, mark: Mark) -> PluginResult<bool>;
    /// Give a mark back.
    fn release(&mut self, mark: Mark);
    /// Wait until everything queued completed, polling until `deadline` or
    /// until `stop()` says so; `Ok(false)` if it gave up.
    fn drain(&mut self, deadline: Instant, stop: &dyn Fn() -> bool) -> PluginResult<bool>;
}
