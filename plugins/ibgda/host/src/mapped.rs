//! Memory shared with the GPU and with the peers' processes: the queue rings
//! in pinned host memory, the signal words in a named shared-memory segment
//! that this rank's GPU also maps, and a small device block (claim counters,
//! the view). The only module of this crate with `unsafe`.

use ferrocx_ibgda::queue::QueueMemory;
use ferrocx_sdk::cuda::{check, sys};
use ferrocx_sdk::region::Region;
use ferrocx_sdk::{PluginError, PluginResult};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A ring's bytes inside memory the GPU writes concurrently: every access is a
/// whole aligned 8-byte atomic, so neither side reads a torn index or stamp.
pub struct Words {
    ptr: *mut u8,
    len: usize,
    /// Keeps the allocation alive.
    _owner: Arc<dyn Send + Sync>,
}

// SAFETY: the memory is only touched through atomics; the owner keeps it alive.
unsafe impl Send for Words {}

impl Words {
    /// `len` bytes at `offset` of `owner`'s memory at `base`.
    ///
    /// # Safety
    /// `base + offset .. + len` must lie inside memory `owner` keeps mapped,
    /// 8-byte aligned, used by this process only through atomics.
    pub unsafe fn new(
        owner: Arc<dyn Send + Sync>,
        base: *mut u8,
        offset: usize,
        len: usize,
    ) -> Words {
        Words {
            // SAFETY: the caller's contract.
            ptr: unsafe { base.add(offset) },
            len,
            _owner: owner,
        }
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(
            at.is_multiple_of(8) && at + 8 <= self.len,
            "ring word {at} outside {} bytes",
            self.len
        );
        // SAFETY: in bounds and aligned (checked; the base is 8-aligned), live
        // while `self` is; accessed only atomically.
        unsafe { AtomicU64::from_ptr(self.ptr.add(at).cast()) }
    }
}

impl QueueMemory for Words {
    fn len_bytes(&self) -> usize {
        self.len
    }

    fn load(&self, at: usize) -> u64 {
        u64::from_le(self.word(at).load(Ordering::Acquire))
    }

    fn store(&mut self, at: usize, v: u64) {
        self.word(at).store(v.to_le(), Ordering::Release)
    }
}

/// Pinned host memory mapped for this rank's device (the rings).
pub struct Pinned(ferrocx_sdk::cuda::PinnedHost);

// SAFETY: plain memory; users go through atomics (`Words`).
unsafe impl Send for Pinned {}
// SAFETY: as above.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// `len` zeroed bytes (the caller bound the device's context).
    pub fn new(len: usize) -> PluginResult<Arc<Pinned>> {
        Ok(Arc::new(Pinned(ferrocx_sdk::cuda::PinnedHost::new(len)?)))
    }
    /// Host address.
    pub fn host(&self) -> *mut u8 {
        self.0.host()
    }
    /// Device address of the same bytes.
    pub fn device(&self) -> u64 {
        self.0.device()
    }
}

/// Signal words: this rank's (a segment its GPU maps, which the peers' proxies
/// update with host atomics) or a peer's (opened here to update it).
pub struct Signals {
    region: Region,
    /// The device address of the segment, for this rank's own only.
    device: Option<u64>,
}

// SAFETY: the segment is touched only through atomics.
unsafe impl Send for Signals {}
// SAFETY: as above.
unsafe impl Sync for Signals {}

impl Signals {
    /// Create this rank's segment `name` and map it for the bound device.
    pub fn create(name: &str, len: usize) -> PluginResult<Signals> {
        let region = Region::create(name, len, 0)
            .map_err(|e| PluginError::system(format!("signal words {name}: {e}")))?;
        let p = region.base() as *mut c_void;
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: a live mapping of `len` bytes, page-aligned (mmap); the caller bound a context.
        let r = unsafe { sys::cuMemHostRegister_v2(p, len, flags) };
        check(r, "cuMemHostRegister")?;
        let mut dev = 0;
        // SAFETY: registered just above with DEVICEMAP.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) };
        if let Err(e) = check(r, "cuMemHostGetDevicePointer") {
            // SAFETY: registered above, unregistered once.
            unsafe { sys::cuMemHostUnregister(p) };
            return Err(e);
        }
        Ok(Signals {
            region,
            device: Some(dev),
        })
    }

    /// Open a peer's segment.
    pub fn open(name: &str, len: usize) -> PluginResult<Signals> {
        let region = Region::open(name, Some(len))
            .map_err(|e| PluginError::system(format!("a peer's signal words {name}: {e}")))?;
        Ok(Signals {
            region,
            device: None,
        })
    }

    /// The device address (own segment only).
    pub fn device(&self) -> Option<u64> {
        self.device
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Forget the name (the peers have opened it).
    pub fn unlink(&mut self) {
        let _ = self.region.unlink();
    }

    /// The word at byte `at` (8-aligned, in bounds: the caller checked).
    pub fn word(&self, at: u64) -> &AtomicU64 {
        let at = at as usize;
        assert!(
            at.is_multiple_of(8) && at + 8 <= self.region.len(),
            "signal word {at} outside the segment"
        );
        // SAFETY: in bounds and aligned, inside a mapping that lives as long as
        // `self`; every process touches it only atomically (the GPU with
        // system-scope loads).
        unsafe { AtomicU64::from_ptr(self.region.base().add(at).cast()) }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        if self.device.is_some() {
            // SAFETY: registered in `create`, unregistered once, before the unmap.
            unsafe { sys::cuMemHostUnregister(self.region.base() as *mut c_void) };
        }
    }
}

/// A zeroed device allocation (claim counters and the view).
pub struct DeviceBlock {
    ptr: u64,
    len: usize,
}

impl DeviceBlock {
    /// `len` zeroed bytes on the bound device.
    pub fn new(len: usize) -> PluginResult<DeviceBlock> {
        let mut ptr = 0;
        // SAFETY: valid out pointer; the caller bound a context.
        let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(8)) };
        check(r, "cuMemAlloc")?;
        let b = DeviceBlock { ptr, len };
        // SAFETY: the allocation just made, `len` bytes.
        check(unsafe { sys::cuMemsetD8_v2(ptr, 0, len) }, "cuMemsetD8")?;
        Ok(b)
    }

    /// Device address.
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    /// Copy `bytes` to offset `at` (synchronous).
    pub fn write(&self, at: usize, bytes: &[u8]) -> PluginResult<()> {
        assert!(
            at + bytes.len() <= self.len,
            "device block write out of bounds"
        );
        // SAFETY: in bounds of the allocation (checked); the host bytes live across the call.
        check(
            unsafe {
                sys::cuMemcpyHtoD_v2(self.ptr + at as u64, bytes.as_ptr().cast(), bytes.len())
            },
            "cuMemcpyHtoD",
        )
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}
