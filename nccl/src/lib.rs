//! `libnccl.so.2`: NCCL's C API implemented on ferrocx, so that unmodified
//! NCCL programs (nccl-tests, `torch.distributed`'s `nccl` backend) run on it.
//!
//! A thin layer over ferrocx's C API (`capi/`): NCCL's numbers are mapped
//! ([`codes`]), `ncclComm_t` wraps a `ferrocx_comm_t` ([`comm`]), and every
//! call goes through the C API's entry points, so checks, groups and error
//! messages are the same in both. What ferrocx does not support returns
//! `ncclInvalidUsage` with a message in `ncclGetLastError`
//! ([`unsupported`]; `docs/NCCL.md` lists every call). `NCCL_*` variables
//! with a ferrocx meaning are honoured, the others reported ([`mod@env`]).
//!
//! Install: `scripts/install-nccl.sh PREFIX` (lib/libnccl.so.2, include/nccl.h).
//! Put a PyTorch job on ferrocx: `LD_PRELOAD=PREFIX/lib/libnccl.so.2 torchrun …`.

pub mod codes;
pub mod coll;
pub mod comm;
mod cuda;
pub mod env;
pub mod init;
pub mod lifecycle;
pub mod memory;
pub mod premul;
pub mod redop;
pub mod unsupported;
mod wait;

/// The NCCL API level answered (`NCCL_VERSION(2, 27, 0)`), as `ncclGetVersion`
/// says it and `include/nccl.h` declares it. 2.27 is the last level whose
/// header needs no device API (2.28's `nccl_device.h` is not implemented).
pub const VERSION_CODE: i32 = 22700;

/// The line `NCCL_DEBUG=VERSION` prints.
pub fn banner() -> String {
    format!(
        "NCCL version 2.27.0 (ferrocx {} drop-in: NCCL's API on ferrocx)",
        env!("CARGO_PKG_VERSION")
    )
}
