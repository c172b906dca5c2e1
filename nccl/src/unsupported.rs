//! NCCL calls ferrocx does not implement: each one is exported (a program
//! linked against them loads and runs), returns ncclInvalidUsage and says why
//! in `ncclGetLastError`. docs/NCCL.md lists them.

use crate::codes::INVALID_USAGE;
use crate::comm::{fail, rank_of, NcclComm};
use std::ffi::c_void;

/// `ncclGroupSimulateEnd`: ferrocx has no cost model to report.
#[no_mangle]
pub extern "C" fn ncclGroupSimulateEnd(_sim_info: *mut c_void) -> i32 {
    fail(
        "ncclGroupSimulateEnd",
        None,
        INVALID_USAGE,
        "not supported by ferrocx (no simulation of a group's time); end the group with ncclGroupEnd",
    )
}

/// `ncclCommGetUniqueId`: growing a communicator is not supported.
#[no_mangle]
pub extern "C" fn ncclCommGetUniqueId(comm: *mut NcclComm, _id: *mut c_void) -> i32 {
    fail(
        "ncclCommGetUniqueId",
        rank_of(comm),
        INVALID_USAGE,
        "not supported by ferrocx (communicators do not grow; use ncclGetUniqueId and a new communicator)",
    )
}

/// `ncclCommGrow`.
///
/// # Safety
/// `newcomm` null or writable.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGrow(
    comm: *mut NcclComm,
    _nranks: i32,
    _id: *const c_void,
    _rank: i32,
    newcomm: *mut *mut NcclComm,
    _config: *mut c_void,
) -> i32 {
    // SAFETY: the C caller's contract: null or writable.
    if let Some(n) = unsafe { newcomm.as_mut() } {
        *n = std::ptr::null_mut();
    }
    fail(
        "ncclCommGrow",
        rank_of(comm),
        INVALID_USAGE,
        "not supported by ferrocx (communicators do not grow; create a new one)",
    )
}

/// `ncclCommSuspend`.
#[no_mangle]
pub extern "C" fn ncclCommSuspend(comm: *mut NcclComm, _flags: i32) -> i32 {
    fail(
        "ncclCommSuspend",
        rank_of(comm),
        INVALID_USAGE,
        "not supported by ferrocx (its memory is not released while a communicator lives)",
    )
}

/// `ncclCommResume`.
#[no_mangle]
pub extern "C" fn ncclCommResume(comm: *mut NcclComm) -> i32 {
    fail(
        "ncclCommResume",
        rank_of(comm),
        INVALID_USAGE,
        "not supported by ferrocx (communicators are never suspended)",
    )
}

/// `ncclCommRevoke`.
#[no_mangle]
pub extern "C" fn ncclCommRevoke(comm: *mut NcclComm, _flags: i32) -> i32 {
    fail(
        "ncclCommRevoke",
        rank_of(comm),
        INVALID_USAGE,
        "not supported by ferrocx: use ncclCommAbort (it tells the peers and stops every wait)",
    )
}

/// `ncclDevCommCreate` (NCCL 2.28's device API, which PyTorch's symmetric
/// memory asks for): not supported.
#[no_mangle]
pub extern "C" fn ncclDevCommCreate(
    comm: *mut NcclComm,
    _requirements: *const c_void,
    _dev_comm: *mut c_void,
) -> i32 {
    fail(
        "ncclDevCommCreate",
        rank_of(comm),
        INVALID_USAGE,
        "not supported by ferrocx (NCCL's device API; ferrocx's device-side interface is its own)",
    )
}

/// `ncclDevCommDestroy`.
#[no_mangle]
pub extern "C" fn ncclDevCommDestroy(comm: *mut NcclComm, _dev_comm: *const c_void) -> i32 {
    fail(
        "ncclDevCommDestroy",
        rank_of(comm),
        INVALID_USAGE,
        "not supported by ferrocx (NCCL's device API)",
    )
}
