//! The control region of one connection end in memory: a zeroed, page-aligned
//! allocation of [`ctrl::region_len`] bytes, registered on every device of the context.
//! The peer reads and writes it with RDMA at any time, so this process only touches it
//! through volatile reads and writes of whole [`Shareable`] values.

use crate::ctrl;
use crate::device::{self, Device};
use ferrocx_sdk::{PluginError, PluginResult, Shareable};
use sideway::ibverbs::memory_region::MemoryRegion;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// One control region. See the module documentation.
pub struct Region {
    base: NonNull<u8>,
    layout: Layout,
    /// One registration per device, in the context's device order.
    mrs: Vec<Arc<MemoryRegion>>,
}

// SAFETY: the region is plain memory owned by this value; concurrent access by the NIC
// is the point, and this process accesses it only through the volatile helpers below
// under the connection's lock.
unsafe impl Send for Region {}

impl Region {
    /// Allocate and register on every device of `devices`.
    pub fn new(devices: &[Device]) -> PluginResult<Region> {
        let layout = Layout::from_size_align(ctrl::region_len(), 4096)
            .map_err(|e| PluginError::internal(format!("net-ib: control region layout: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let base = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            PluginError::new(
                ferrocx_sdk::abi::FX_SYSTEM,
                format!("net-ib: allocating a {}-byte control region", layout.size()),
            )
        })?;
        let mut r = Region {
            base,
            layout,
            mrs: Vec::new(),
        };
        for d in devices {
            // SAFETY: the allocation is mapped and outlives the MR (dropped first in Drop).
            let mr = unsafe {
                d.pd.reg_mr(base.as_ptr() as usize, layout.size(), device::access())
            }
            .map_err(|e| {
                PluginError::new(
                    ferrocx_sdk::abi::FX_SYSTEM,
                    format!(
                        "net-ib: registering the control region on {}: {e:?}",
                        d.name
                    ),
                )
            })?;
            r.mrs.push(mr);
        }
        Ok(r)
    }

    /// Virtual address of byte `off`.
    pub fn addr(&self, off: usize) -> u64 {
        self.base.as_ptr() as u64 + off as u64
    }

    /// Local key on device `dev`.
    pub fn lkey(&self, dev: usize) -> u32 {
        self.mrs[dev].lkey()
    }

    /// Remote key on device `dev`.
    pub fn rkey(&self, dev: usize) -> u32 {
        self.mrs[dev].rkey()
    }

    /// Read the value at `off` (as the NIC last wrote it), with acquire ordering.
    pub fn read<T: Shareable>(&self, off: usize) -> T {
        assert!(off + std::mem::size_of::<T>() <= self.layout.size());
        // SAFETY: in bounds (checked), any bit pattern is a valid T (Shareable);
        // read_volatile because the NIC writes behind the compiler's back, unaligned-safe
        // because every offset used is a multiple of 8 and T's alignment is at most 8.
        let v = unsafe { std::ptr::read_volatile(self.base.as_ptr().add(off) as *const T) };
        fence(Ordering::Acquire);
        v
    }

    /// Write `v` at `off` (to be sent by the NIC), with release ordering.
    pub fn write<T: Shareable>(&self, off: usize, v: T) {
        assert!(off + std::mem::size_of::<T>() <= self.layout.size());
        fence(Ordering::Release);
        // SAFETY: in bounds (checked); volatile for the same reason as `read`.
        unsafe { std::ptr::write_volatile(self.base.as_ptr().add(off) as *mut T, v) }
    }

    /// Copy `len` bytes from `src` into the region at `off`.
    ///
    /// # Safety
    /// `src..src+len` must be readable.
    pub unsafe fn copy_in(&self, off: usize, src: *const u8, len: usize) {
        assert!(off + len <= self.layout.size());
        // SAFETY: destination in bounds (checked), source readable (caller), and the
        // two cannot overlap (the region is this value's own allocation).
        unsafe { std::ptr::copy_nonoverlapping(src, self.base.as_ptr().add(off), len) };
    }

    /// Copy `len` bytes out of the region at `off` into `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` must be writable.
    pub unsafe fn copy_out(&self, off: usize, dst: *mut u8, len: usize) {
        assert!(off + len <= self.layout.size());
        fence(Ordering::Acquire);
        // SAFETY: source in bounds (checked), destination writable (caller), no overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr().add(off), dst, len) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Deregister before freeing the memory.
        self.mrs.clear();
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}
