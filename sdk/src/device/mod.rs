//! GPU memory that processes of one host share: devices, their copy queues,
//! and CUDA IPC handles — exported by the owner, opened by the peer's side in
//! its own process, cached and closed ([`open`], [`export`]). Any plugin may
//! build on it (p2p's FIFO and direct writes; symmetric windows).
//!
//! Two traits keep the callers independent of the driver, so the same code
//! runs on CUDA ([`cuda`], feature `cuda`) and, on machines without a GPU, on
//! a host-memory stand-in (`fake`, feature `testing`) whose "IPC handles" are
//! shared-memory names:
//!
//! * [`Driver`]: process-level questions — can this GPU reach that one, is
//!   this address device memory and of which allocation.
//! * [`Device`]: one GPU as this process sees it — bind its context on the
//!   calling thread, allocate and free exported memory, export and open IPC
//!   handles, make copy queues ([`Queue`]: a CUDA stream, an ordered
//!   [`Engine`]).
//!
//! Nothing here is ever put in a blob except [`IpcHandle`], which is bytes made
//! to be exported (`CUipcMemHandle`).

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod export;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod open;

use crate::abi::FxPeerInfo;
use crate::copy::{Engine, Mark};
use crate::error::PluginResult;
use open::OpenTable;
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

/// A PCI location as `domain:bus:device.function`.
pub fn pci_name(pci: i32) -> String {
    let p = pci as u32;
    format!(
        "{:04x}:{:02x}:{:02x}.{}",
        p >> 16,
        (p >> 8) & 0xff,
        (p >> 3) & 0x1f,
        p & 7
    )
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

/// Process-level GPU questions.
pub trait Driver: Send + Sync + 'static {
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
    fn queue(&self) -> PluginResult<Box<dyn Queue>>;
    /// Allocate `bytes` of device memory and export it: (address, handle).
    fn alloc(&self, bytes: usize) -> PluginResult<(u64, IpcHandle)>;
    /// Free memory from [`alloc`](Self::alloc) (nobody may use it any more).
    fn free(&self, addr: u64);
    /// The IPC handle of the allocation starting at `base`.
    fn export(&self, base: u64) -> PluginResult<IpcHandle>;
    /// Map a peer's handle; the mapped base address. Called once per handle
    /// at a time through [`OpenTable`].
    fn open(&self, handle: &IpcHandle) -> PluginResult<u64>;
    /// Unmap what [`open`](Self::open) returned (possibly later, on a thread
    /// of its own: see [`after_closes`](Self::after_closes)).
    fn close(&self, addr: u64);
    /// Drop `keep` once every [`close`](Self::close) asked for so far has
    /// happened: what tells the exporter its memory is no longer mapped here
    /// (a liveness lock) must not go before the mappings do.
    fn after_closes(&self, keep: Box<dyn Send>) {
        drop(keep);
    }
    /// The process-wide table of handles opened on this device.
    fn opens(&self) -> &OpenTable;
}

/// One connection's ordered copy queue on a device: an asynchronous
/// [`Engine`] that can be boxed (the driver is chosen at run time).
pub trait Queue: Send + 'static {
    /// Queue `len` bytes from `src` to `dst` (addresses of this process, host
    /// or device) behind everything queued before.
    ///
    /// # Safety
    /// Both ranges must stay valid until a [`Mark`] made after this call completes.
    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> PluginResult<()>;
    /// A mark that completes once everything queued so far has (an error
    /// when every mark is in use).
    fn mark(&mut self) -> PluginResult<Mark>;
    /// Whether the mark completed (never blocks).
    fn poll(&mut self, mark: Mark) -> PluginResult<bool>;
    /// Give a mark back.
    fn release(&mut self, mark: Mark);
    /// Wait until everything queued completed, polling until `deadline` or
    /// until `stop()` says so; `Ok(false)` if it gave up.
    fn drain(&mut self, deadline: Instant, stop: &dyn Fn() -> bool) -> PluginResult<bool>;
}

impl Engine for Box<dyn Queue> {
    const SYNC: bool = false;

    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> PluginResult<()> {
        // SAFETY: the same contract, passed on.
        unsafe { (**self).copy(dst, src, len) }
    }

    fn mark(&mut self) -> PluginResult<Option<Mark>> {
        (**self).mark().map(Some)
    }

    fn poll(&mut self, mark: Mark) -> PluginResult<bool> {
        (**self).poll(mark)
    }

    fn release(&mut self, mark: Mark) {
        (**self).release(mark)
    }

    fn drain(&mut self, deadline: Instant, stop: &dyn Fn() -> bool) -> PluginResult<bool> {
        (**self).drain(deadline, stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_words_round_trip() {
        let mut b = [0u8; HANDLE_BYTES];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 ^ 0xa5;
        }
        let h = IpcHandle(b);
        assert_eq!(IpcHandle::from_words(&h.to_words()), h);
        assert!(IpcHandle::NONE.is_none() && !h.is_none());
    }
}
