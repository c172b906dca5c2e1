//! Memory: buffer registration (`ncclCommRegister`), symmetric windows
//! (`ncclCommWindowRegister`), and `ncclMemAlloc` / `ncclMemFree`.

use crate::comm::{call, handle, on_inner, out, rank_of, NcclComm};
use crate::cuda;
use ferrocx::window::Window;
use ferrocx::Error;
use std::ffi::c_void;

/// `ncclCommRegister`: register a buffer with the transports (host or device memory).
///
/// # Safety
/// `comm` a handle of this library; `buf..buf+size` allocated until deregistered;
/// `handle_out` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommRegister(
    comm: *mut NcclComm,
    buf: *mut c_void,
    size: usize,
    handle_out: *mut *mut c_void,
) -> i32 {
    // SAFETY: the caller's contract, passed on.
    on_inner("ncclCommRegister", comm, |c| unsafe {
        ferrocx_c::ferrocx_register(c, buf, size, handle_out)
    })
}

/// `ncclCommDeregister`.
///
/// # Safety
/// `comm` a handle of this library; `h` from `ncclCommRegister` on it, not used again.
#[no_mangle]
pub unsafe extern "C" fn ncclCommDeregister(comm: *mut NcclComm, h: *mut c_void) -> i32 {
    // SAFETY: the caller's contract, passed on.
    on_inner("ncclCommDeregister", comm, |c| unsafe {
        ferrocx_c::ferrocx_deregister(c, h)
    })
}

/// `ncclCommWindowRegister`: a symmetric window (collective: every rank
/// registers the same size). `ncclWindow_t` points to ferrocx's window.
///
/// # Safety
/// `comm` a handle of this library; `buf..buf+size` allocated until the window is
/// deregistered; `win` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: *mut NcclComm,
    buf: *mut c_void,
    size: usize,
    win: *mut *mut Window,
    _flags: i32,
) -> i32 {
    call("ncclCommWindowRegister", rank_of(comm), || {
        out(win, "win", std::ptr::null_mut())?;
        // SAFETY: the caller's contract.
        let c = unsafe { ferrocx_c::communicator(handle(comm)?.inner()?) }?;
        if buf.is_null() || size == 0 {
            return Err(Error::InvalidArgument(format!(
                "window of {size} bytes at {buf:?}"
            )));
        }
        let w = if ferrocx_sdk::cuda::device_of(buf as usize).is_some() {
            // SAFETY: the caller's contract: allocated until deregistered.
            unsafe { c.window_register_device(buf as u64, size) }?
        } else {
            // SAFETY: the caller's contract: `size` bytes of host memory, kept.
            c.window_register(unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size) })?
        };
        out(win, "win", Box::into_raw(Box::new(w)))
    })
}

/// `ncclCommWindowDeregister` (collective).
///
/// # Safety
/// `comm` a handle of this library; `win` from `ncclCommWindowRegister` on it, not used again.
#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowDeregister(comm: *mut NcclComm, win: *mut Window) -> i32 {
    call("ncclCommWindowDeregister", rank_of(comm), || {
        // SAFETY: the caller's contract.
        let c = unsafe { ferrocx_c::communicator(handle(comm)?.inner()?) }?;
        if win.is_null() {
            return Err(Error::InvalidArgument("the window is NULL".into()));
        }
        // SAFETY: a window of ncclCommWindowRegister, freed once.
        let w = unsafe { Box::from_raw(win) };
        c.window_deregister(*w)
    })
}

/// `ncclMemAlloc`: device memory on the current device.
///
/// # Safety
/// `ptr` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> i32 {
    call("ncclMemAlloc", None, || {
        out(ptr, "ptr", std::ptr::null_mut())?;
        out(ptr, "ptr", cuda::alloc(size)? as *mut c_void)
    })
}

/// `ncclMemFree`.
///
/// # Safety
/// `ptr` from `ncclMemAlloc`, not freed yet; no queued work uses it.
#[no_mangle]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> i32 {
    call("ncclMemFree", None, || {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { cuda::free(ptr as usize) }
    })
}
