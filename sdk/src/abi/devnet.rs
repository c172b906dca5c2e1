//! The raw device-networking plugin ABI, version 1: `#[repr(C)]` mirrors of
//! `sdk/include/ferrocx_devnet.h`, the hook-by-hook reference
//! (`sdk/tests/header_layout.rs` compares every size, offset and constant).
//! Communicator info, out-of-band collectives and window descriptors are the
//! collective ABI's.

use super::{FxCommInfo, FxCommOob, FxHostV1, FxWindowDesc, FX_NAME_BYTES};
use std::ffi::{c_char, c_void};

/// ABI version of [`FxDevnetV1`].
pub const FX_DEVNET_ABI_VERSION_1: u32 = 1;
/// The exported symbol: `const fx_devnet_v1_t *ferrocx_devnet_v1(void)`.
pub const FX_DEVNET_SYMBOL_V1: &str = "ferrocx_devnet_v1";
/// Windows in CUDA device memory.
pub const FX_DEVNET_CAP_CUDA_MEM: u64 = 1 << 0;
/// Windows in host memory.
pub const FX_DEVNET_CAP_HOST_MEM: u64 = 1 << 1;

/// Counters since `comm_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FxDevnetStats {
    /// Requests taken from the kernels' queues.
    pub requests: u64,
    /// Completed with status OK.
    pub completed: u64,
    /// Completed with an error status.
    pub failed: u64,
    /// Re-posts of a request on the other path.
    pub failovers: u64,
    /// (me, peer) paths marked bad.
    pub paths_down: u64,
    /// Paths taken back after their recovery window.
    pub paths_restored: u64,
    /// Peers declared unreachable on every path.
    pub peers_unreachable: u64,
    /// Zero: room for counters added within v1.
    pub reserved: [u64; 9],
}

/// The device-networking plugin table, version 1.
#[repr(C)]
pub struct FxDevnetV1 {
    /// [`FX_DEVNET_ABI_VERSION_1`].
    pub abi_version: u32,
    /// `sizeof(fx_devnet_v1_t)` as the plugin was built.
    pub struct_size: u32,
    /// Plugin name, NUL-terminated, e.g. `"ibgda"`.
    pub name: [c_char; FX_NAME_BYTES],
    /// `FX_DEVNET_CAP_*` bits.
    pub caps: u64,
    /// Create a plugin context. Required.
    pub init: Option<unsafe extern "C" fn(host: *const FxHostV1, ctx: *mut *mut c_void) -> i32>,
    /// Destroy it after every comm. Required.
    pub finalize: Option<unsafe extern "C" fn(ctx: *mut c_void) -> i32>,
    /// Per-communicator setup (collective); `oob` stays valid until `comm_destroy`. Required.
    pub comm_init: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            info: *const FxCommInfo,
            oob: *const FxCommOob,
            comm: *mut *mut c_void,
        ) -> i32,
    >,
    /// Stop its threads and release the communicator's state. Required.
    pub comm_destroy: Option<unsafe extern "C" fn(comm: *mut c_void) -> i32>,
    /// Register a symmetric window (collective); `*id` numbers it for kernels. Required.
    pub window_register: Option<
        unsafe extern "C" fn(comm: *mut c_void, desc: *const FxWindowDesc, id: *mut u32) -> i32,
    >,
    /// Release a window (collective). Required.
    pub window_deregister: Option<unsafe extern "C" fn(comm: *mut c_void, id: u32) -> i32>,
    /// The device address of the view kernels take. Required.
    pub device_view: Option<unsafe extern "C" fn(comm: *mut c_void, view: *mut u64) -> i32>,
    /// `FX_OK`, or the error a peer or path met. Required.
    pub status: Option<unsafe extern "C" fn(comm: *mut c_void) -> i32>,
    /// Counters since `comm_init`. Required.
    pub stats: Option<unsafe extern "C" fn(comm: *mut c_void, stats: *mut FxDevnetStats) -> i32>,
    /// One line: the handler in use and why, the paths, the knobs. Required.
    pub describe:
        Option<unsafe extern "C" fn(comm: *mut c_void, buf: *mut c_char, len: usize) -> usize>,
    /// The calling thread's last error text. Optional.
    pub last_error: Option<unsafe extern "C" fn(buf: *mut c_char, len: usize) -> usize>,
}

/// Signature of the exported entry point.
pub type FxDevnetV1Entry = unsafe extern "C" fn() -> *const FxDevnetV1;

impl FxDevnetV1 {
    /// The plugin name up to the first NUL (lossy UTF-8).
    pub fn name_str(&self) -> String {
        super::c_chars_to_string(&self.name)
    }
}
