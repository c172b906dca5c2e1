//! Device calls that may wait for a host thread complete before they return
//! (`FERROCX_NCCL_BLOCKING=1`, the default). NCCL returns once a call is
//! enqueued; some of ferrocx's device operations are driven by a host thread
//! while in flight (the core's progress thread, ce's watchdog releasing a
//! barrier a dead peer left waiting), and a program that meanwhile blocks in
//! a synchronous copy to pageable memory waiting on that operation
//! (PyTorch's `tensor.cpu()` or `.item()` right after a collective) holds a
//! driver lock those threads need: the operation, the copy and the program
//! stall until `FERROCX_TIMEOUT` (seen on an H100, docs/NCCL.md). Waiting for
//! the stream here (every rank enqueued its part already) closes that window
//! at the cost of the host-side overlap. Calls that ran as self-timed kernels
//! (ce's LL, Simple and point-to-point kernels: they give up on the device at
//! the timeout) need no host thread, so they return at once as NCCL's do; the
//! core counts the others (`Communicator::host_bound_calls`), read before and
//! after each call. `FERROCX_NCCL_BLOCKING=0` never waits, for programs that
//! wait with `cudaStreamSynchronize` / `cudaDeviceSynchronize` (which hold no
//! such lock). Streams being captured into a graph are never waited for.

use ferrocx::{Error, Result};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::OnceLock;

thread_local! {
    /// The device calls queued in this thread's open group: stream, the C
    /// API's communicator and its host-bound count before the call.
    static PENDING: RefCell<Vec<(usize, usize, Option<u64>)>> = const { RefCell::new(Vec::new()) };
}

/// `FERROCX_NCCL_BLOCKING` (read once): `0` off, anything else (or unset) on.
fn blocking() -> bool {
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| std::env::var("FERROCX_NCCL_BLOCKING").map_or(true, |v| v.trim() != "0"))
}

/// The host-bound count of `inner` (`Communicator::host_bound_calls`), to
/// read before a call; `None` where it cannot be read (the call then waits).
pub fn mark(inner: *mut ferrocx_c::FerrocxComm) -> Option<u64> {
    if !blocking() {
        return None;
    }
    // SAFETY: a handle the C API gave out (or an error when it is no longer live).
    unsafe { ferrocx_c::communicator(inner) }
        .ok()
        .map(|c| c.host_bound_calls())
}

/// Whether the calls on `inner` since `before` ([`mark`]) may wait for a host thread.
fn host_bound(inner: usize, before: Option<u64>) -> bool {
    before.is_none() || mark(inner as *mut ferrocx_c::FerrocxComm) != before
}

/// A device call on `stream` of `inner` was issued (`before`: [`mark`]
/// before it): wait for it now where it may need a host thread, or at the
/// group's end.
pub fn issued(
    inner: *mut ferrocx_c::FerrocxComm,
    before: Option<u64>,
    stream: *mut c_void,
) -> Result<()> {
    if !blocking() {
        return Ok(());
    }
    if ferrocx_c::group_depth() > 0 {
        PENDING.with(|p| {
            p.borrow_mut()
                .push((stream as usize, inner as usize, before))
        });
        return Ok(());
    }
    if !host_bound(inner as usize, before) {
        return Ok(());
    }
    finish(stream as usize)
}

/// The outermost group ended (`ok`: its calls were issued): wait for the
/// streams of its calls that may need a host thread.
pub fn group_ended(ok: bool) -> Result<()> {
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if !ok {
        return Ok(());
    }
    let mut streams: Vec<usize> = pending
        .into_iter()
        .filter(|&(_, inner, before)| host_bound(inner, before))
        .map(|(stream, ..)| stream)
        .collect();
    streams.sort_unstable();
    streams.dedup();
    streams.into_iter().try_for_each(finish)
}

fn finish(stream: usize) -> Result<()> {
    tracing::debug!(target: "ferrocx::nccl", "waiting for stream {stream:#x}: a call on it may need a host thread (FERROCX_NCCL_BLOCKING)");
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
