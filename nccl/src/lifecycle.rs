//! The rest of a communicator's life: finalize, destroy, abort, asynchronous
//! errors, queries; and the library's version and error texts.

use crate::codes;
use crate::comm::{call, free, handle, on_inner, out, rank_of, NcclComm};
use std::ffi::c_char;

/// `ncclGetVersion`: the NCCL API level this library answers
/// ([`crate::VERSION_CODE`]).
///
/// # Safety
/// `version` null or writable.
#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut i32) -> i32 {
    call("ncclGetVersion", None, || {
        out(version, "version", crate::VERSION_CODE)
    })
}

/// `ncclGetErrorString`.
#[no_mangle]
pub extern "C" fn ncclGetErrorString(result: i32) -> *const c_char {
    codes::error_string(result).as_ptr().cast()
}

/// `ncclGetLastError`: the calling thread's last error message (rank, call and
/// what was wrong), whatever the communicator.
#[no_mangle]
pub extern "C" fn ncclGetLastError(_comm: *mut NcclComm) -> *const c_char {
    ferrocx_c::ferrocx_get_last_error()
}

/// `ncclCommFinalize`: complete what is queued and release the resources
/// (later calls but destroy fail).
///
/// # Safety
/// `comm` a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ncclCommFinalize(comm: *mut NcclComm) -> i32 {
    // SAFETY: a live ferrocx handle of ours.
    on_inner("ncclCommFinalize", comm, |c| unsafe {
        ferrocx_c::ferrocx_comm_finalize(c)
    })
}

/// Release `comm`'s communicator (`abort` or destroy) and the handle.
unsafe fn release(comm: *mut NcclComm, name: &str, abort: bool) -> i32 {
    let rank = rank_of(comm);
    let mut code = ferrocx_c::FERROCX_SUCCESS;
    let r = call(name, rank, || {
        // SAFETY: the caller's contract.
        let c = unsafe { handle(comm) }?;
        if let Ok(inner) = c.inner() {
            // SAFETY: a live ferrocx handle of ours, released once (the NCCL
            // handle is freed right after).
            code = unsafe {
                if abort {
                    ferrocx_c::ferrocx_comm_abort(inner)
                } else {
                    ferrocx_c::ferrocx_comm_destroy(inner)
                }
            };
        }
        // SAFETY: checked above; not used again (the caller's contract).
        unsafe { free(comm) };
        Ok(())
    });
    if r != codes::SUCCESS {
        return r;
    }
    codes::result_of(code)
}

/// `ncclCommDestroy`.
///
/// # Safety
/// `comm` a handle of this library, not used again.
#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(comm: *mut NcclComm) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { release(comm, "ncclCommDestroy", false) }
}

/// `ncclCommAbort`: tell the peers, stop every wait, release everything.
///
/// # Safety
/// `comm` a handle of this library, not used again.
#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(comm: *mut NcclComm) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { release(comm, "ncclCommAbort", true) }
}

/// `ncclCommGetAsyncError`: the failure of a stream-ordered operation that
/// failed after its call returned, or of a creation deferred to a group's end.
///
/// # Safety
/// `comm` a handle of this library; `err` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(comm: *mut NcclComm, err: *mut i32) -> i32 {
    // SAFETY: the caller's contract.
    if let Some(code) = unsafe { handle(comm) }
        .ok()
        .and_then(|c| c.creation_error())
    {
        return call("ncclCommGetAsyncError", rank_of(comm), || {
            out(err, "asyncError", code)
        });
    }
    let mut fx = 0;
    // SAFETY: a live ferrocx handle; `fx` writable.
    let r = on_inner("ncclCommGetAsyncError", comm, |c| unsafe {
        ferrocx_c::ferrocx_comm_get_async_error(c, &mut fx)
    });
    if r != codes::SUCCESS {
        return r;
    }
    call("ncclCommGetAsyncError", rank_of(comm), || {
        out(err, "asyncError", codes::result_of(fx))
    })
}

/// `ncclCommCount`.
///
/// # Safety
/// `comm` a handle of this library; `count` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(comm: *mut NcclComm, count: *mut i32) -> i32 {
    call("ncclCommCount", rank_of(comm), || {
        // SAFETY: the caller's contract.
        out(count, "count", unsafe { handle(comm) }?.nranks)
    })
}

/// `ncclCommUserRank`.
///
/// # Safety
/// `comm` a handle of this library; `rank` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(comm: *mut NcclComm, rank: *mut i32) -> i32 {
    call("ncclCommUserRank", rank_of(comm), || {
        // SAFETY: the caller's contract.
        out(rank, "rank", unsafe { handle(comm) }?.rank)
    })
}

/// `ncclCommCuDevice`: the rank's CUDA device, −1 without one.
///
/// # Safety
/// `comm` a handle of this library; `device` writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(comm: *mut NcclComm, device: *mut i32) -> i32 {
    call("ncclCommCuDevice", rank_of(comm), || {
        // SAFETY: the caller's contract.
        out(device, "device", unsafe { handle(comm) }?.device)
    })
}
