//! Stream ordering. A device operation starts after the work already queued on the
//! user's stream — the engine polls an event recorded there (`cuEventQuery`, never a
//! blocking call) — and the user's stream resumes only after the operation: at launch
//! the stream is made to wait (`cuStreamWaitValue32`, `GEQ`) on a 32-bit flag in mapped
//! pinned host memory, which the engine raises when the plan ends. No host callback ever
//! blocks a CUDA thread, and many operations queue on one stream without host
//! synchronization.
//!
//! Flags are slots with a generation each: a slot is reused only after its last signal
//! fired, and its value only grows, so a stale waiter can never be released early.
//!
//! How the stream waits (`FERROCX_DEVICE_WAIT`): `kernel` (default when NVRTC is
//! available) queues a one-thread kernel that polls the flag (`__nanosleep` between
//! reads); `memop` uses `cuStreamWaitValue32`. The kernel exists because a
//! semaphore wait that is not satisfied at once can leave the stream descheduled
//! for milliseconds (measured on H200: sendrecv iterations of 20 µs turned into
//! 5–8 ms ones); a polling thread resumes within a microsecond.

use crate::error::{Error, Result};
use ferrocx_sdk::cuda::{self, sys, PinnedHost};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Slots per communicator: operations in flight at once on device streams.
const SLOTS: usize = 4096;

struct Slots {
    /// Never freed: a stream may still be reading a flag it was just released by, so
    /// the (16 KiB) pinned page lives as long as the process.
    mem: std::mem::ManuallyDrop<PinnedHost>,
    /// Per slot: last generation handed out, and whether its signal is pending.
    gens: Mutex<(Vec<u32>, Vec<bool>, usize)>,
}

/// The flags of one communicator.
#[derive(Clone)]
pub(crate) struct Flags(Arc<Slots>, Option<Arc<WaitKernel>>);

/// The polling kernel, loaded once per communicator.
struct WaitKernel {
    func: sys::CUfunction,
}

// SAFETY: a CUfunction handle may be used from any thread of its context's process.
unsafe impl Send for WaitKernel {}
// SAFETY: as above; immutable.
unsafe impl Sync for WaitKernel {}

const WAIT_SOURCE: &str = r#"
extern "C" __global__ void fx_wait_geq(const volatile unsigned int* flag, unsigned int gen) {
    while ((int)(*flag - gen) < 0) { __nanosleep(256); }
}
"#;

impl WaitKernel {
    /// Compile (NVRTC: CUBIN for the device, else PTX) and load it.
    fn load(device: i32) -> std::result::Result<Self, String> {
        let func = super::kernels::load_source(device, WAIT_SOURCE, "fx_wait.cu", "fx_wait_geq")?;
        Ok(WaitKernel { func })
    }
}

/// Raising it releases the stream that waits on it. Dropping an unfired signal fires
/// it (a failed or cancelled operation must never leave a GPU stream stuck).
pub(crate) struct Signal {
    flags: Arc<Slots>,
    slot: usize,
    gen: u32,
    fired: bool,
}

impl Flags {
    /// Pinned, device-mapped flag memory (the caller bound `device`'s context).
    pub fn new(device: i32) -> Result<Self> {
        let mem = std::mem::ManuallyDrop::new(PinnedHost::new(SLOTS * 4).map_err(Error::cuda)?);
        let mode = std::env::var("FERROCX_DEVICE_WAIT").unwrap_or_default();
        let kernel = match mode.trim() {
            "memop" => None,
            "" | "kernel" => match WaitKernel::load(device) {
                Ok(k) => Some(Arc::new(k)),
                Err(e) if mode.trim().is_empty() => {
                    tracing::warn!(target: "ferrocx::device", "stream waits fall back to cuStreamWaitValue32, which can hold other streams of the context back for milliseconds (no polling kernel: {e})");
                    None
                }
                Err(e) => {
                    return Err(Error::Unsupported(format!(
                        "FERROCX_DEVICE_WAIT=kernel: {e}"
                    )))
                }
            },
            other => {
                return Err(Error::Config {
                    var: "FERROCX_DEVICE_WAIT".into(),
                    message: format!("'{other}' is not kernel or memop"),
                })
            }
        };
        Ok(Flags(
            Arc::new(Slots {
                mem,
                gens: Mutex::new((vec![0; SLOTS], vec![false; SLOTS], 0)),
            }),
            kernel,
        ))
    }

    /// Make `stream` wait for the returned signal.
    ///
    /// # Safety
    /// `stream` must be a live stream of the flags' context.
    pub unsafe fn wait_on(&self, stream: sys::CUstream) -> Result<Signal> {
        let (slot, gen) = {
            let mut g = self.0.gens.lock();
            let (gens, busy, next) = &mut *g;
            let start = *next;
            let slot = (0..SLOTS)
                .map(|i| (start + i) % SLOTS)
                .find(|&s| !busy[s])
                .ok_or_else(|| {
                    Error::Unsupported(format!(
                        "more than {SLOTS} device operations in flight on one communicator"
                    ))
                })?;
            *next = (slot + 1) % SLOTS;
            gens[slot] = gens[slot].wrapping_add(1).max(1);
            busy[slot] = true;
            (slot, gens[slot])
        };
        let mut addr = self.0.mem.device() + (slot * 4) as sys::CUdeviceptr;
        let r = match &self.1 {
            Some(k) => {
                let mut g = gen;
                let mut params = [
                    &mut addr as *mut sys::CUdeviceptr as *mut std::ffi::c_void,
                    &mut g as *mut u32 as *mut std::ffi::c_void,
                ];
                // SAFETY: a loaded kernel taking (pointer, u32); the parameters live for
                // the call; the flag is mapped pinned memory that is never freed; the
                // stream is live by the caller's contract.
                unsafe { super::kernels::launch(k.func, 1, 1, stream, &mut params) }
            }
            // SAFETY: as above.
            None => unsafe {
                sys::cuStreamWaitValue32_v2(
                    stream,
                    addr,
                    gen,
                    sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
                )
            },
        };
        let sig = Signal {
            flags: self.0.clone(),
            slot,
            gen,
            fired: false,
        };
        cuda::check(r, "queueing the stream wait (FERROCX_DEVICE_WAIT)").map_err(Error::cuda)?;
        Ok(sig)
    }
}

impl Signal {
    /// Release the waiting stream.
    pub fn fire(&mut self) {
        if self.fired {
            return;
        }
        self.fired = true;
        // SAFETY: the slot lies inside the pinned allocation (SLOTS × 4 bytes), which
        // lives as long as `self.flags`; 4-byte aligned.
        let word = unsafe { &*(self.flags.mem.host().add(self.slot * 4) as *const AtomicU32) };
        word.fetch_max(self.gen, Ordering::Release);
        self.flags.gens.lock().1[self.slot] = false;
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        self.fire();
    }
}

/// Whether `stream` is being captured into a CUDA graph (a collective plugin
/// that supports graphs issues capturable work then).
pub(crate) fn is_capturing(stream: super::RawStream) -> Result<bool> {
    use ferrocx_sdk::cuda::sys;
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: `stream` is a live stream of this device (the caller's contract);
    // `st` is a valid out pointer.
    let r = unsafe { sys::cuStreamIsCapturing(stream, &mut st) };
    ferrocx_sdk::cuda::check(r, "cuStreamIsCapturing").map_err(crate::Error::cuda)?;
    Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Make `stream` wait for the work `event` captured when it was recorded
/// (`cuStreamWaitEvent`). The event may be dropped right after: the wait
/// keeps what the record captured.
///
/// # Safety
/// `stream` must be a live stream (or null) of the event's context.
pub(crate) unsafe fn wait_event(stream: super::RawStream, event: &cuda::Event) -> Result<()> {
    // SAFETY: a live event (borrowed); the stream is live by the caller's contract.
    let r = unsafe { sys::cuStreamWaitEvent(stream, event.raw(), 0) };
    cuda::check(r, "cuStreamWaitEvent").map_err(Error::cuda)
}
