//! The C API of ferrocx (`capi/include/ferrocx.h`, the reference): opaque
//! communicator handles, fixed-width codes, host or device buffers told apart
//! by the pointer, a thread's last error message. Nothing panics across the
//! boundary: every entry point runs inside `status::guard`.
//!
//! The NCCL drop-in (`nccl/`) is a layer over this one: it calls these entry
//! points as Rust functions and maps codes, so the two APIs cannot drift
//! apart (`into_handle`, `communicator`, `guard` and `group_depth` are for it).

mod comm;
mod ops;
mod status;

pub use comm::*;
pub use ops::*;
pub use status::*;

/// `FERROCX_VERSION_CODE` of this library (major·10000 + minor·100 + patch).
pub const FERROCX_VERSION_CODE: i32 = 100;
/// Bytes of a `ferrocx_unique_id_t`.
pub const FERROCX_UNIQUE_ID_BYTES: usize = 128;
/// `ferrocx_comm_split`: take part in no new communicator.
pub const FERROCX_SPLIT_NOCOLOR: i32 = -1;
