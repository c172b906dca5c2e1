//! The few CUDA driver calls NCCL's API needs beyond the core: the caller's
//! current device (NCCL's communicators use it), waiting for a stream (host
//! buffers given with a stream), and `ncclMemAlloc`'s memory.

use ferrocx::{Error, Result};
use ferrocx_sdk::cuda::{self, sys};

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda(format!("{what}: {}", cuda::name(r))))
    }
}

/// The device of the calling thread's current CUDA context (what
/// `cudaSetDevice` chose), or `None` without CUDA or without a current context.
pub fn current_device() -> Option<i32> {
    cuda::available().ok()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the driver is initialized (available); `ctx` is a valid out pointer.
    let r = unsafe { sys::cuCtxGetCurrent(&mut ctx) };
    if r != sys::CUresult::CUDA_SUCCESS || ctx.is_null() {
        return None;
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a current context exists; `dev` is a valid out pointer.
    let r = unsafe { sys::cuCtxGetDevice(&mut dev) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(dev)
}

/// Wait until the work queued on `stream` (a `CUstream` of the caller's) is done.
///
/// # Safety
/// `stream` must be a live stream of the current context, or null (the legacy stream).
pub unsafe fn synchronize(stream: usize) -> Result<()> {
    cuda::available().map_err(|why| {
        Error::InvalidArgument(format!(
            "a stream was given with host buffers, but CUDA is not usable here ({why}): pass a NULL stream"
        ))
    })?;
    // SAFETY: the caller's contract on the stream.
    let r = unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) };
    check(r, "cuStreamSynchronize on the call's stream")
}

/// `bytes` of device memory on the current device (`ncclMemAlloc`).
pub fn alloc(bytes: usize) -> Result<usize> {
    cuda::available()
        .map_err(|why| Error::Unsupported(format!("ncclMemAlloc needs CUDA: {why}")))?;
    if current_device().is_none() {
        return Err(Error::InvalidArgument(
            "ncclMemAlloc: no current CUDA device (call cudaSetDevice first)".into(),
        ));
    }
    // torch allocates in its graph pools during a capture (global mode by
    // default), which would forbid this allocation: NCCL relaxes it too.
    let _relaxed = cuda::RelaxedCapture::enter();
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: a current context exists; `p` is a valid out pointer. Plain
    // cuMemAlloc memory, so that peers can open it through CUDA IPC handles.
    let r = unsafe { sys::cuMemAlloc_v2(&mut p, bytes.max(1)) };
    check(r, "cuMemAlloc")?;
    Ok(p as usize)
}

/// Free memory of [`alloc`].
///
/// # Safety
/// `p` from [`alloc`], not freed yet, no longer used by queued work.
pub unsafe fn free(p: usize) -> Result<()> {
    cuda::available()
        .map_err(|why| Error::Unsupported(format!("ncclMemFree needs CUDA: {why}")))?;
    let _relaxed = cuda::RelaxedCapture::enter();
    // SAFETY: the caller's contract.
    let r = unsafe { sys::cuMemFree_v2(p as sys::CUdeviceptr) };
    check(r, "cuMemFree")
}

/// Whether `stream` is being captured into a CUDA graph (it must not be waited for then).
///
/// # Safety
/// `stream` a live stream of the current context, or null.
pub unsafe fn capturing(stream: usize) -> bool {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller's contract; `st` is a valid out pointer.
    let r = unsafe { sys::cuStreamIsCapturing(stream as sys::CUstream, &mut st) };
    r != sys::CUresult::CUDA_SUCCESS
        || st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}
