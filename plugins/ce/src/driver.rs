//! The CUDA driver entry points ce needs beyond `ferrocx_sdk::cuda`, looked
//! up with `dlsym` in the already loaded `libcuda.so.1` (cudarc's dynamic
//! bindings panic when a symbol is missing; a symbol looked up here is
//! simply absent):
//!
//! * `cuStreamBatchMemOp_v2` (CUDA ≥ 11.7; what `cuStreamBatchMemOp` means
//!   in the 12.x headers): required.
//! * `cuMemcpyBatchAsync` with the 12.8 signature (`failIdx` before the
//!   stream; 13.x drivers keep that symbol, their new signature is
//!   `cuMemcpyBatchAsync_v2`): used when the driver is ≥ 12.8.
//!
//! * `cuStreamGetCaptureInfo_v2` and `cuStreamUpdateCaptureDependencies`
//!   (CUDA ≥ 11.3): used, when present, to order a communicator's launches
//!   captured on forked streams of one capture (`chain.rs`).
//!
//! Plus two questions about a user stream: is it being captured, is it the
//! legacy default stream.

use ferrocx_sdk::cuda::{check, sys};
use ferrocx_sdk::{PluginError, PluginResult};
use std::ffi::{c_uint, c_void, CStr};

/// `cuStreamBatchMemOp_v2`.
pub type BatchMemOpFn = unsafe extern "C" fn(
    sys::CUstream,
    c_uint,
    *mut sys::CUstreamBatchMemOpParams,
    c_uint,
) -> sys::CUresult;

/// `cuMemcpyBatchAsync` as declared by the CUDA 12.8 headers.
pub type MemcpyBatchFn = unsafe extern "C" fn(
    *mut sys::CUdeviceptr,
    *mut sys::CUdeviceptr,
    *mut usize,
    usize,
    *mut sys::CUmemcpyAttributes,
    *mut usize,
    usize,
    *mut usize,
    sys::CUstream,
) -> sys::CUresult;

/// `cuStreamGetCaptureInfo_v2`.
pub type CaptureInfoFn = unsafe extern "C" fn(
    sys::CUstream,
    *mut sys::CUstreamCaptureStatus,
    *mut u64,
    *mut sys::CUgraph,
    *mut *const sys::CUgraphNode,
    *mut usize,
) -> sys::CUresult;

/// `cuStreamUpdateCaptureDependencies`.
pub type UpdateDepsFn =
    unsafe extern "C" fn(sys::CUstream, *mut sys::CUgraphNode, usize, c_uint) -> sys::CUresult;

/// The two capture entry points, found together or not at all.
#[derive(Clone, Copy)]
pub struct CaptureApi {
    /// `cuStreamGetCaptureInfo_v2`.
    pub info: CaptureInfoFn,
    /// `cuStreamUpdateCaptureDependencies`.
    pub update: UpdateDepsFn,
}

/// First driver version with `cuMemcpyBatchAsync`.
pub const MEMCPY_BATCH_VERSION: i32 = 12080;

/// `CU_STREAM_LEGACY`: the legacy default stream by name (`(CUstream)0x1`).
const CU_STREAM_LEGACY: usize = 0x1;

/// The looked-up entry points.
#[derive(Clone, Copy)]
pub struct Api {
    /// `cuStreamBatchMemOp_v2`.
    pub batch_memop: BatchMemOpFn,
    /// `cuMemcpyBatchAsync` (12.8 signature), when the driver is ≥ 12.8 and has it.
    pub memcpy_batch: Option<MemcpyBatchFn>,
    /// `cuDriverGetVersion`, e.g. 12080.
    pub version: i32,
    /// The capture entry points, when the driver has both.
    pub capture: Option<CaptureApi>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("version", &self.version)
            .field("memcpy_batch", &self.memcpy_batch.is_some())
            .field("capture", &self.capture.is_some())
            .finish()
    }
}

/// `symbol` in the loaded CUDA driver, or null.
fn lookup(symbol: &CStr) -> *mut c_void {
    for lib in [c"libcuda.so.1", c"libcuda.so"] {
        // SAFETY: RTLD_NOLOAD only returns a library that is already loaded (taking
        // a reference we give back below); nothing is initialized or run.
        let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_NOW) };
        if h.is_null() {
            continue;
        }
        // SAFETY: `h` is a live handle, `symbol` NUL-terminated.
        let p = unsafe { libc::dlsym(h, symbol.as_ptr()) };
        // SAFETY: gives back the reference dlopen took; the library stays loaded
        // (cudarc holds it for the life of the process), so `p` stays valid.
        unsafe { libc::dlclose(h) };
        if !p.is_null() {
            return p;
        }
    }
    std::ptr::null_mut()
}

impl Api {
    /// Look the entry points up (the driver must be initialized:
    /// `ferrocx_sdk::cuda::available()` succeeded).
    pub fn load() -> PluginResult<Api> {
        let mut version = 0;
        // SAFETY: the driver is loaded and initialized (caller's contract); valid out pointer.
        let r = unsafe { sys::cuDriverGetVersion(&mut version) };
        check(r, "cuDriverGetVersion")?;
        let memop = lookup(c"cuStreamBatchMemOp_v2");
        if memop.is_null() {
            return Err(PluginError::unsupported(format!(
                "the CUDA driver ({}) has no cuStreamBatchMemOp_v2 (stream memory operations need a driver for CUDA 11.7 or newer)",
                version_name(version)
            )));
        }
        let batch = lookup(c"cuMemcpyBatchAsync");
        let (info, update) = (
            lookup(c"cuStreamGetCaptureInfo_v2"),
            lookup(c"cuStreamUpdateCaptureDependencies"),
        );
        let capture = (!info.is_null() && !update.is_null()).then(|| CaptureApi {
            // SAFETY: the driver's symbols of these names have exactly these C
            // signatures (CUDA 11.3 and later; 13.x drivers keep them).
            info: unsafe { std::mem::transmute::<*mut c_void, CaptureInfoFn>(info) },
            // SAFETY: as above.
            update: unsafe { std::mem::transmute::<*mut c_void, UpdateDepsFn>(update) },
        });
        Ok(Api {
            // SAFETY: the driver's symbol of that name has exactly this C signature.
            batch_memop: unsafe { std::mem::transmute::<*mut c_void, BatchMemOpFn>(memop) },
            memcpy_batch: (version >= MEMCPY_BATCH_VERSION && !batch.is_null()).then(|| {
                // SAFETY: the driver's `cuMemcpyBatchAsync` symbol is the 12.8
                // signature (13.x kept it and named the new one `_v2`).
                unsafe { std::mem::transmute::<*mut c_void, MemcpyBatchFn>(batch) }
            }),
            version,
            capture,
        })
    }
}

/// `12080` → "12.8".
pub fn version_name(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Whether `stream` is the legacy default stream (null or `CU_STREAM_LEGACY`),
/// which `cuMemcpyBatchAsync` refuses.
pub fn is_legacy(stream: sys::CUstream) -> bool {
    stream.is_null() || stream as usize == CU_STREAM_LEGACY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_streams() {
        assert_eq!(version_name(12080), "12.8");
        assert_eq!(version_name(13000), "13.0");
        assert!(is_legacy(std::ptr::null_mut()));
        assert!(is_legacy(1 as sys::CUstream));
        assert!(!is_legacy(2 as sys::CUstream), "per-thread default stream");
        // Without a driver the lookup finds nothing (and never panics).
        if ferrocx_sdk::cuda::available().is_err() {
            assert!(lookup(c"cuStreamBatchMemOp_v2").is_null());
        }
    }
}
