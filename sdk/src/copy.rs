//! Ordered copy engines: what moves the bytes of a same-host transport.
//!
//! An [`Engine`] is one connection's copy queue. Copies run in the order they
//! were queued; a [`Mark`] made after some copies completes once all of them
//! have. A synchronous engine ([`Engine::SYNC`], the CPU's [`HostCopy`]) has
//! finished a copy when `copy` returns and needs no marks; an asynchronous one
//! (a CUDA stream driving copy engines, `device::Queue`) reports completion
//! through marks (events) that the transport polls and never waits on.

use crate::error::PluginResult;
use std::time::Instant;

/// A point in an engine's queue (an event slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark(pub u32);

/// One connection's ordered copy queue.
pub trait Engine: Send + 'static {
    /// Copies are done when [`copy`](Self::copy) returns: [`mark`](Self::mark)
    /// answers `None`, and data may be staged in memory that lives only for
    /// the call (the inline words of a slot header).
    const SYNC: bool;

    /// Queue `len` bytes from `src` to `dst` (addresses of this process)
    /// behind everything queued before.
    ///
    /// # Safety
    /// Both ranges must stay valid until a [`Mark`] made after this call
    /// completes (for a synchronous engine: until the call returns), and must
    /// not overlap.
    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> PluginResult<()>;

    /// A mark that completes once everything queued so far has; `None` when
    /// there is nothing to wait for (a synchronous engine). Running out of
    /// marks is an error.
    fn mark(&mut self) -> PluginResult<Option<Mark>>;

    /// Whether the mark completed (never blocks).
    fn poll(&mut self, mark: Mark) -> PluginResult<bool>;

    /// Give a mark back.
    fn release(&mut self, mark: Mark);

    /// Wait until everything queued completed, polling until `deadline` or
    /// until `stop()` says so; `Ok(false)` if it gave up.
    fn drain(&mut self, deadline: Instant, stop: &dyn Fn() -> bool) -> PluginResult<bool>;
}

/// The CPU as a copy engine: `memcpy` on the calling thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostCopy;

impl Engine for HostCopy {
    const SYNC: bool = true;

    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> PluginResult<()> {
        if len > 0 {
            // SAFETY: the caller's contract: both ranges are valid for `len`
            // bytes for the duration of the call and do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src as usize as *const u8,
                    dst as usize as *mut u8,
                    len,
                )
            };
        }
        Ok(())
    }

    fn mark(&mut self) -> PluginResult<Option<Mark>> {
        Ok(None)
    }

    fn poll(&mut self, _mark: Mark) -> PluginResult<bool> {
        Ok(true)
    }

    fn release(&mut self, _mark: Mark) {}

    fn drain(&mut self, _deadline: Instant, _stop: &dyn Fn() -> bool) -> PluginResult<bool> {
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_copies_are_done_on_return() {
        let src = [1u8, 2, 3, 4];
        let mut dst = [0u8; 4];
        let mut e = HostCopy;
        // SAFETY: both arrays live across the call and do not overlap.
        unsafe { e.copy(dst.as_mut_ptr() as u64, src.as_ptr() as u64, 4) }.unwrap();
        assert_eq!(dst, src);
        assert_eq!(e.mark().unwrap(), None);
        // SAFETY: zero bytes touch nothing, whatever the addresses.
        unsafe { e.copy(0, 0, 0) }.unwrap();
    }
}
