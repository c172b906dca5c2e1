//! `ncclRedOpCreatePreMulSum` and `ncclRedOpDestroy` (the operators: `premul.rs`).

use crate::comm::{call, handle, out, rank_of, NcclComm};
use crate::premul::PreMul;
use std::ffi::c_void;

/// `ncclRedOpCreatePreMulSum`.
///
/// # Safety
/// `op` writable; `scalar` one element of `datatype`; `comm` a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut i32,
    scalar: *mut c_void,
    datatype: i32,
    residence: i32,
    comm: *mut NcclComm,
) -> i32 {
    call("ncclRedOpCreatePreMulSum", rank_of(comm), || {
        // SAFETY: the caller's contract.
        let c = unsafe { handle(comm) }?;
        let p = PreMul::new(scalar, datatype, residence)?;
        out(op, "op", c.ops.add(p))
    })
}

/// `ncclRedOpDestroy`.
///
/// # Safety
/// `comm` a handle of this library.
#[no_mangle]
pub unsafe extern "C" fn ncclRedOpDestroy(op: i32, comm: *mut NcclComm) -> i32 {
    call("ncclRedOpDestroy", rank_of(comm), || {
        // SAFETY: the caller's contract.
        unsafe { handle(comm) }?.ops.remove(op)
    })
}
