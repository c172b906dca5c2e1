//! Device memory the engine owns (scratch for device collectives, staged inputs) and
//! copies on a stream. Raw CUDA calls, hence this module's `unsafe`.

use crate::error::{Error, Result};
use ferrocx_sdk::cuda::{self, sys};

/// A device allocation (`cuMemAlloc`), freed on drop.
pub(crate) struct DevBuf {
    ptr: sys::CUdeviceptr,
    len: usize,
}

// SAFETY: a device address is usable from any thread of the process.
unsafe impl Send for DevBuf {}
// SAFETY: as above; the value is an address and a length.
unsafe impl Sync for DevBuf {}

impl DevBuf {
    /// `len` bytes (at least 256) on the current context's device.
    pub fn new(len: usize) -> Result<Self> {
        let mut ptr = 0;
        cuda::check(
            // SAFETY: the caller bound a context; `ptr` is a valid out pointer.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(256)) },
            "cuMemAlloc",
        )
        .map_err(Error::cuda)?;
        Ok(DevBuf {
            ptr,
            len: len.max(256),
        })
    }

    /// Device address.
    pub fn ptr(&self) -> usize {
        self.ptr as usize
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once. Work using it was waited for by
        // its owner (runners free scratch only after their last event).
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Queue a copy of `bytes` from `src` to `dst` on `stream` (unified addressing: device,
/// or pinned host memory on either side).
///
/// # Safety
/// Both ranges must stay valid until the stream has run the copy, and `stream` must be
/// a live stream of the current context.
pub(crate) unsafe fn copy_async(
    dst: usize,
    src: usize,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    if bytes == 0 || dst == src {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    cuda::check(
        unsafe {
            sys::cuMemcpyAsync(
                dst as sys::CUdeviceptr,
                src as sys::CUdeviceptr,
                bytes,
                stream,
            )
        },
        "cuMemcpyAsync",
    )
    .map_err(Error::cuda)
}
