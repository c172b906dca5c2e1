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
pub(crate) struct Flags(Arc<Slots>);

/// Raising it releases the stream that waits on it. Dropping an unfired signal fires
/// it (a failed or cancelled operation must never leave a GPU stream stuck).
pub(crate) struct Signal {
    flags: Arc<Slots>,
    slot: usize,
    gen: u32,
    fired: bool,
}

impl Flags {
    /// Pinned, device-mapped flag memory (the caller bound the context).
    pub fn new() -> Result<Self> {
        let mem = std::mem::ManuallyDrop::new(PinnedHost::new(SLOTS * 4).map_err(Error::cuda)?);
        Ok(Flags(Arc::new(Slots {
            mem,
            gens: Mutex::new((vec![0; SLOTS], vec![false; SLOTS], 0)),
        })))
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
        let addr = self.0.mem.device() + (slot * 4) as sys::CUdeviceptr;
        // SAFETY: `addr` is mapped pinned memory owned by the flags (alive while any
        // signal is); the stream is live by the caller's contract.
        let r = unsafe {
            sys::cuStreamWaitValue32_v2(
                stream,
                addr,
                gen,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        };
        let sig = Signal {
            flags: self.0.clone(),
            slot,
            gen,
            fired: false,
        };
        cuda::check(r, "cuStreamWaitValue32").map_err(Error::cuda)?;
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
