//! The caller's buffers of posted sends and receives.
//!
//! `isend`/`irecv` are `unsafe fn`s whose callers promise the buffer stays
//! valid (and, for a receive, untouched by others) until the request
//! completes. These wrappers capture that promise once, at post time, so the
//! state machines can take bounds-checked slices without further `unsafe`.

use std::ptr::NonNull;

/// A posted send's source bytes.
#[derive(Debug)]
pub struct SendBuf {
    ptr: NonNull<u8>,
    len: usize,
}

/// A posted receive's destination bytes.
#[derive(Debug)]
pub struct RecvBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffers are plain memory of this process; the poster's contract
// makes them ours until the request completes, whichever thread progresses it.
unsafe impl Send for SendBuf {}
// SAFETY: as above.
unsafe impl Send for RecvBuf {}

/// A zero-length buffer may come with a null pointer; slices need a non-null one.
fn non_null(ptr: *mut u8, len: usize) -> NonNull<u8> {
    match NonNull::new(ptr) {
        Some(p) if len > 0 => p,
        _ => NonNull::dangling(),
    }
}

impl SendBuf {
    /// # Safety
    /// `ptr..ptr+len` must be readable and unmodified until the request completes or is dropped.
    pub unsafe fn new(ptr: *const u8, len: usize) -> Self {
        SendBuf {
            ptr: non_null(ptr as *mut u8, len),
            len,
        }
    }

    /// Message length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes `off..off+n`.
    pub fn bytes(&self, off: usize, n: usize) -> &[u8] {
        assert!(
            off.checked_add(n).is_some_and(|end| end <= self.len),
            "send buffer range out of bounds"
        );
        // SAFETY: in bounds (checked); readable and stable by the contract of `new`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), n) }
    }
}

impl RecvBuf {
    /// # Safety
    /// `ptr..ptr+len` must be writable and used by nobody else until the request completes or is dropped.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        RecvBuf {
            ptr: non_null(ptr, len),
            len,
        }
    }

    /// Posted size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Start address, as published to the sender for a direct copy.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    /// Bytes `off..off+n`, for copying a ring chunk in.
    pub fn bytes_mut(&mut self, off: usize, n: usize) -> &mut [u8] {
        assert!(
            off.checked_add(n).is_some_and(|end| end <= self.len),
            "receive buffer range out of bounds"
        );
        // SAFETY: in bounds (checked); exclusively ours by the contract of `new`.
        // A direct copy never targets the same message's buffer while the ring
        // path writes it: the sender picks exactly one path per message.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_length_null_is_fine_and_bounds_are_checked() {
        // SAFETY: zero-length buffers touch no memory.
        let s = unsafe { SendBuf::new(std::ptr::null(), 0) };
        assert_eq!(s.bytes(0, 0), &[] as &[u8]);
        let mut v = vec![0u8; 4];
        // SAFETY: `v` outlives `r` and is not used meanwhile.
        let mut r = unsafe { RecvBuf::new(v.as_mut_ptr(), 4) };
        r.bytes_mut(1, 3).copy_from_slice(&[1, 2, 3]);
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            r.bytes_mut(2, 3);
        }))
        .is_err());
        assert_eq!(v, [0, 1, 2, 3]);
    }
}
