//! Device calls complete before they return (`FERROCX_NCCL_BLOCKING=1`, the
//! default). NCCL returns once a call is enqueued; ferrocx's device operations
//! are driven by a host progress thread that makes CUDA calls while the
//! operation is in flight, and a program that meanwhile blocks in a
//! synchronous copy to pageable memory waiting on that operation (PyTorch's
//! `tensor.cpu()` or `.item()` right after a collective) holds a driver lock
//! those calls need: the operation, the copy and the program stall until
//! `FERROCX_TIMEOUT` (seen on an H100, docs/NCCL.md). Waiting for the stream
//! here (every rank enqueued its part already) closes that window at the cost
//! of the host-side overlap. `FERROCX_NCCL_BLOCKING=0` returns at once, as
//! NCCL does, for programs that wait with `cudaStreamSynchronize` /
//! `cudaDeviceSynchronize` (which hold no such lock). Streams being captured
//! into a graph are never waited for.

use ferrocx::{Error, Result};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::OnceLock;

thread_local! {
    /// Streams of the device calls queued in this thread's open group.
    static PENDING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// `FERROCX_NCCL_BLOCKING` (read once): `0` off, anything else (or unset) on.
fn blocking() -> bool {
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| std::env::var("FERROCX_NCCL_BLOCKING").map_or(true, |v| v.trim() != "0"))
}

/// A device call on `stream` was issued: wait for it now, or at the group's end.
pub fn issued(stream: *mut c_void) -> Result<()> {
    if !blocking() {
        return Ok(());
    }
    if ferrocx_c::group_depth() > 0 {
        PENDING.with(|p| p.borrow_mut().push(stream as usize));
        return Ok(());
    }
    finish(stream as usize)
}

/// The outermost group ended (`ok`: its calls were issued): wait for their streams.
pub fn group_ended(ok: bool) -> Result<()> {
    let mut streams = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if !ok {
        return Ok(());
    }
    streams.sort_unstable();
    streams.dedup();
    streams.into_iter().try_for_each(finish)
}

fn finish(stream: usize) -> Result<()> {
    // SAFETY: a stream the caller passed to a call that accepted it.
    if unsafe { crate::cuda::capturing(stream) } {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { crate::cuda::synchronize(stream) }.map_err(|e| match e {
        Error::Cuda(m) => Error::Cuda(format!("waiting for the call to complete: {m}")),
        e => e,
    })
}
