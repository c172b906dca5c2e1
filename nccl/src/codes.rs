//! NCCL's numbers (results, data types, reduction operators) and what they
//! are in ferrocx's C API. NCCL orders types and operators differently from
//! ferrocx (`ncclFloat32` is 7, `FERROCX_FLOAT32` 8; `ncclMax` is 2,
//! `FERROCX_MAX` 3): every number crosses this table, never a cast.

use ferrocx::{DataType, RedOp};
use ferrocx_c as fx;

/// `ncclSuccess`.
pub const SUCCESS: i32 = 0;
/// `ncclUnhandledCudaError`: a CUDA call failed.
pub const UNHANDLED_CUDA_ERROR: i32 = 1;
/// `ncclSystemError`.
pub const SYSTEM_ERROR: i32 = 2;
/// `ncclInternalError`.
pub const INTERNAL_ERROR: i32 = 3;
/// `ncclInvalidArgument`.
pub const INVALID_ARGUMENT: i32 = 4;
/// `ncclInvalidUsage`: also what every call ferrocx does not support returns.
pub const INVALID_USAGE: i32 = 5;
/// `ncclRemoteError`: a peer failed, went away or did not answer in time.
pub const REMOTE_ERROR: i32 = 6;
/// `ncclInProgress` (never returned: creation is always blocking here).
pub const IN_PROGRESS: i32 = 7;

/// NCCL's result for a result of ferrocx's C API.
pub fn result_of(fx_code: i32) -> i32 {
    match fx_code {
        fx::FERROCX_SUCCESS => SUCCESS,
        fx::FERROCX_INVALID_ARGUMENT => INVALID_ARGUMENT,
        fx::FERROCX_UNSUPPORTED | fx::FERROCX_DESTROYED => INVALID_USAGE,
        // A timeout is a peer that did not answer: NCCL reports those as remote
        // errors (its own ncclTimeout is newer than the API level answered here).
        fx::FERROCX_REMOTE_ERROR | fx::FERROCX_TIMEOUT => REMOTE_ERROR,
        fx::FERROCX_INTERNAL_ERROR => INTERNAL_ERROR,
        _ => SYSTEM_ERROR,
    }
}

/// `ncclGetErrorString`'s text.
pub fn error_string(result: i32) -> &'static [u8] {
    match result {
        SUCCESS => b"no error\0",
        UNHANDLED_CUDA_ERROR => b"unhandled cuda error (run with FERROCX_DEBUG=info for details)\0",
        SYSTEM_ERROR => b"unhandled system error (see ncclGetLastError)\0",
        INTERNAL_ERROR => b"internal error - please report this issue to the ferrocx developers\0",
        INVALID_ARGUMENT => b"invalid argument (see ncclGetLastError)\0",
        INVALID_USAGE => b"invalid usage (see ncclGetLastError)\0",
        REMOTE_ERROR => b"remote process exited or there was a network error\0",
        IN_PROGRESS => b"NCCL operation in progress\0",
        _ => b"unknown result code\0",
    }
}

/// An NCCL data type as ferrocx moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Type {
    /// NCCL's name, for messages.
    pub name: &'static str,
    /// How ferrocx moves and reduces it.
    pub fx: DataType,
    /// Bytes per element.
    pub size: usize,
}

/// The NCCL type `raw` (`ncclInt8` 0 … `ncclFloat8e5m2` 11).
pub fn dtype(raw: i32) -> Result<Type, String> {
    let t = |name, fx, size| Type { name, fx, size };
    Ok(match raw {
        0 => t("ncclInt8", DataType::I8, 1),
        1 => t("ncclUint8", DataType::U8, 1),
        2 => t("ncclInt32", DataType::I32, 4),
        3 => t("ncclUint32", DataType::U32, 4),
        4 => t("ncclInt64", DataType::I64, 8),
        5 => t("ncclUint64", DataType::U64, 8),
        6 => t("ncclFloat16", DataType::F16, 2),
        7 => t("ncclFloat32", DataType::F32, 4),
        8 => t("ncclFloat64", DataType::F64, 8),
        9 => t("ncclBfloat16", DataType::Bf16, 2),
        10 => t("ncclFloat8e4m3", DataType::F8E4M3, 1),
        11 => t("ncclFloat8e5m2", DataType::F8E5M2, 1),
        _ => {
            return Err(format!(
                "unknown data type {raw} (ncclInt8 0 .. ncclFloat8e5m2 11)"
            ))
        }
    })
}

/// `ncclNumOps`: operators from this number on are made by `ncclRedOpCreatePreMulSum`.
pub const NUM_OPS: i32 = 5;

/// A reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// One of NCCL's own.
    Builtin(RedOp),
    /// The `n`-th operator made by `ncclRedOpCreatePreMulSum` on the communicator.
    Custom(usize),
}

/// The NCCL operator `raw`.
pub fn op(raw: i32) -> Result<Op, String> {
    Ok(Op::Builtin(match raw {
        0 => RedOp::Sum,
        1 => RedOp::Prod,
        2 => RedOp::Max,
        3 => RedOp::Min,
        4 => RedOp::Avg,
        r if r >= NUM_OPS => return Ok(Op::Custom((r - NUM_OPS) as usize)),
        _ => return Err(format!("unknown reduction operator {raw}")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_operators_map_by_name_not_by_number() {
        assert_eq!(dtype(7).unwrap().fx, DataType::F32);
        assert_eq!(dtype(8).unwrap().fx, DataType::F64);
        assert_eq!(dtype(9).unwrap().fx, DataType::Bf16);
        assert_eq!(dtype(6).unwrap().fx, DataType::F16);
        assert_eq!(dtype(10).unwrap().fx, DataType::F8E4M3);
        assert_eq!(dtype(11).unwrap().fx, DataType::F8E5M2);
        assert!(dtype(12).unwrap_err().contains("unknown data type 12"));
        assert!(dtype(-1).is_err());
        assert_eq!(op(2), Ok(Op::Builtin(RedOp::Max)));
        assert_eq!(op(3), Ok(Op::Builtin(RedOp::Min)));
        assert_eq!(op(4), Ok(Op::Builtin(RedOp::Avg)));
        assert_eq!(op(7), Ok(Op::Custom(2)));
        assert!(op(-3).is_err());
    }

    #[test]
    fn every_ferrocx_result_has_an_nccl_result() {
        assert_eq!(result_of(fx::FERROCX_SUCCESS), SUCCESS);
        assert_eq!(result_of(fx::FERROCX_INVALID_ARGUMENT), INVALID_ARGUMENT);
        assert_eq!(result_of(fx::FERROCX_UNSUPPORTED), INVALID_USAGE);
        assert_eq!(result_of(fx::FERROCX_DESTROYED), INVALID_USAGE);
        assert_eq!(result_of(fx::FERROCX_TIMEOUT), REMOTE_ERROR);
        assert_eq!(result_of(fx::FERROCX_REMOTE_ERROR), REMOTE_ERROR);
        assert_eq!(result_of(fx::FERROCX_AUTH_ERROR), SYSTEM_ERROR);
        assert_eq!(result_of(fx::FERROCX_INTERNAL_ERROR), INTERNAL_ERROR);
        for r in 0..=IN_PROGRESS {
            assert_ne!(error_string(r), b"unknown result code\0");
        }
    }
}
