//! The raw, versioned C ABI between the core and its plugins: the transport
//! table here, the collective table in [`collective`] (re-exported), sharing
//! the codes, memory kinds, host table and peer records below.
//!
//! Every type here is `#[repr(C)]` and mirrored field for field by
//! `sdk/include/ferrocx_plugin.h`; `sdk/tests/header_layout.rs` compiles the
//! header and compares sizes, offsets and constants. Fields are only ever
//! appended: a plugin built against an older header keeps loading because the
//! core reads `struct_size` before touching anything past the v1 fields.

use std::ffi::{c_char, c_void};
use std::sync::atomic::AtomicU32;

pub mod collective;
pub mod devnet;
pub use collective::*;
pub use devnet::*;

/// ABI version of [`FxTransportV1`] and [`FxHostV1`].
pub const FX_ABI_VERSION_1: u32 = 1;
/// The exported symbol a plugin `.so` provides for ABI v1. It is a function
/// `const fx_transport_v1_t *ferrocx_transport_v1(void)`.
pub const FX_SYMBOL_V1: &str = "ferrocx_transport_v1";
/// Bytes in a plugin name, including the terminating NUL.
pub const FX_NAME_BYTES: usize = 32;
/// Capacity of every blob exchanged between processes.
pub const FX_BLOB_BYTES: usize = 256;
/// Bytes of the host name carried in [`FxPeerInfo`], including the NUL.
pub const FX_HOST_NAME_BYTES: usize = 64;

// Result codes. Every hook returns one of these.
/// Success.
pub const FX_OK: i32 = 0;
/// The operation has started and must be called again (only `connect`).
pub const FX_IN_PROGRESS: i32 = 1;
/// A caller error: null pointer, bad length, misuse of the lifecycle.
pub const FX_INVALID_ARGUMENT: i32 = 2;
/// The plugin does not implement this hook or this memory kind.
pub const FX_UNSUPPORTED: i32 = 3;
/// A system call failed (the message carries errno's text).
pub const FX_SYSTEM: i32 = 4;
/// The remote side failed or went away.
pub const FX_REMOTE: i32 = 5;
/// A bounded wait inside the plugin expired.
pub const FX_TIMEOUT: i32 = 6;
/// A bug inside the plugin (a caught panic, a broken invariant).
pub const FX_INTERNAL: i32 = 7;

/// Direction of a connection as seen by the rank calling `setup`.
pub const FX_DIR_SEND: i32 = 0;
/// See [`FX_DIR_SEND`].
pub const FX_DIR_RECV: i32 = 1;

/// Host (CPU) memory.
pub const FX_MEM_HOST: i32 = 0;
/// CUDA device memory.
pub const FX_MEM_CUDA: i32 = 1;

/// Capability bits in the table header.
pub const FX_CAP_HOST_MEM: u64 = 1 << 0;
/// Moves CUDA device memory.
pub const FX_CAP_CUDA_MEM: u64 = 1 << 1;
/// `register`/`deregister` do something useful (zero/single copy).
pub const FX_CAP_REGISTER: u64 = 1 << 2;
/// Reaches peers on other hosts.
pub const FX_CAP_CROSS_HOST: u64 = 1 << 3;

/// Log levels passed to [`FxHostV1::log`].
pub const FX_LOG_ERROR: i32 = 0;
/// Warning.
pub const FX_LOG_WARN: i32 = 1;
/// Info.
pub const FX_LOG_INFO: i32 = 2;
/// Debug.
pub const FX_LOG_DEBUG: i32 = 3;
/// Trace.
pub const FX_LOG_TRACE: i32 = 4;

/// A fixed-size byte blob: the only thing that crosses a process boundary.
///
/// Never put a pointer, a stream, an event or a file descriptor in it: the
/// other process cannot use them (the crash of reference note 000). Rust
/// plugins write only [`crate::Shareable`] values with [`FxBlob::write`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxBlob {
    /// Number of meaningful bytes in `bytes`.
    pub len: u32,
    /// Zero.
    pub reserved: u32,
    /// Payload.
    pub bytes: [u8; FX_BLOB_BYTES],
}

/// What the core tells a plugin about one rank.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxPeerInfo {
    /// Rank in the communicator.
    pub rank: i32,
    /// Number of ranks in the communicator.
    pub nranks: i32,
    /// Rank among the ranks of the same host.
    pub local_rank: i32,
    /// Operating-system process id.
    pub pid: i32,
    /// Identity of the host (hash of host name and boot id): equal means same host.
    pub host_hash: u64,
    /// Identity of the communicator (equal on every rank of it).
    pub comm_hash: u64,
    /// CUDA device ordinal (in the rank's own process), or -1.
    pub cuda_device: i32,
    /// PCI location of that device, packed as `domain << 16 | bus << 8 | device << 3`
    /// (`ferrocx_sdk::cuda::pci_id`): equal in every process for the same GPU. -1 when
    /// the rank has no device. (Was `reserved`, always 0, before GPU support.)
    pub cuda_pci: i32,
    /// Host name, NUL-terminated.
    pub host_name: [c_char; FX_HOST_NAME_BYTES],
}

/// Arguments of `setup`: one direction of one connection between two ranks.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxConnReq {
    /// The calling rank.
    pub me: FxPeerInfo,
    /// The other end.
    pub peer: FxPeerInfo,
    /// [`FX_DIR_SEND`] or [`FX_DIR_RECV`].
    pub direction: i32,
    /// Channel index (several connections may join the same pair of ranks).
    pub channel: i32,
    /// Unique per (communicator, sender, receiver, channel); equal on both ends.
    pub conn_id: u64,
}

/// Services the core offers to a plugin, handed to `init`. Valid until `finalize` returns.
#[repr(C)]
pub struct FxHostV1 {
    /// [`FX_ABI_VERSION_1`].
    pub abi_version: u32,
    /// `sizeof(fx_host_v1_t)` as the core was built.
    pub struct_size: u32,
    /// Opaque, passed back to every callback.
    pub host_ctx: *mut c_void,
    /// Write a NUL-terminated message into the core's log at `level`.
    pub log: Option<unsafe extern "C" fn(host_ctx: *mut c_void, level: i32, msg: *const c_char)>,
    /// Look up an environment variable. Returns the value's length (which may
    /// exceed `out_len`, then the value is truncated), or -1 when unset.
    /// `out` receives a NUL-terminated copy when `out_len > 0`.
    pub getenv: Option<
        unsafe extern "C" fn(
            host_ctx: *mut c_void,
            name: *const c_char,
            out: *mut c_char,
            out_len: usize,
        ) -> i64,
    >,
    /// `FERROCX_TIMEOUT` in milliseconds: the bound for any wait inside the plugin.
    pub timeout_ms: u64,
    /// Becomes non-zero when waits must stop: the communicator is aborted (for a
    /// collective plugin also once it broke, or a peer failed or aborted).
    pub abort_flag: *const AtomicU32,
}

/// The transport table (ABI v1). A plugin exports
/// `const fx_transport_v1_t *ferrocx_transport_v1(void)` returning a pointer
/// to a table that lives as long as the library is loaded. The hook-by-hook
/// reference (arguments, rules, codes, ownership) is the C header,
/// `sdk/include/ferrocx_plugin.h`; the field docs here are summaries.
///
/// Threading contract: `init`/`finalize` once per context; `reg` and
/// `deregister` may run on any thread, concurrently with anything; all hooks
/// taking one `conn` (and `test` on its requests) are serialized by the core.
/// Optional hooks may be null.
#[repr(C)]
pub struct FxTransportV1 {
    /// [`FX_ABI_VERSION_1`].
    pub abi_version: u32,
    /// `sizeof(fx_transport_v1_t)` as the plugin was built.
    pub struct_size: u32,
    /// Plugin name, NUL-terminated, e.g. `"shm"`.
    pub name: [c_char; FX_NAME_BYTES],
    /// `FX_CAP_*` bits.
    pub caps: u64,

    /// Create a plugin context. Required.
    pub init: Option<unsafe extern "C" fn(host: *const FxHostV1, ctx: *mut *mut c_void) -> i32>,
    /// Destroy a context after every connection and registration is gone. Required.
    pub finalize: Option<unsafe extern "C" fn(ctx: *mut c_void) -> i32>,
    /// Score for connecting `me` to `peer`: 0 = cannot, higher = preferred. Required.
    pub can_connect: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            me: *const FxPeerInfo,
            peer: *const FxPeerInfo,
        ) -> i32,
    >,
    /// Create one end of a connection and describe it in `out_blob` for the peer. Required.
    pub setup: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            req: *const FxConnReq,
            conn: *mut *mut c_void,
            out_blob: *mut FxBlob,
        ) -> i32,
    >,
    /// Finish a connection with the peer's blob; returns `FX_IN_PROGRESS` until done. Required.
    pub connect: Option<unsafe extern "C" fn(conn: *mut c_void, peer_blob: *const FxBlob) -> i32>,
    /// Optional: run on the core's proxy service thread after `setup`.
    pub proxy_setup: Option<unsafe extern "C" fn(conn: *mut c_void) -> i32>,
    /// Optional: run on the proxy service thread after `connect` succeeded.
    pub proxy_connect: Option<unsafe extern "C" fn(conn: *mut c_void) -> i32>,
    /// Optional: background progress on the progress thread; sets `*did_work`.
    pub proxy_progress: Option<unsafe extern "C" fn(conn: *mut c_void, did_work: *mut i32) -> i32>,
    /// Register `len` bytes at `ptr` of `mem_kind`; `out_blob` may describe it to peers.
    /// Optional (null or `FX_UNSUPPORTED` when the plugin has no use for registration).
    /// Named `reg` as in C, where `register` is a keyword (Rust plugins implement
    /// `Transport::register`).
    pub reg: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            ptr: *mut c_void,
            len: usize,
            mem_kind: i32,
            mhandle: *mut *mut c_void,
            out_blob: *mut FxBlob,
        ) -> i32,
    >,
    /// Release a registration.
    pub deregister: Option<unsafe extern "C" fn(ctx: *mut c_void, mhandle: *mut c_void) -> i32>,
    /// Post a send of `len` bytes (may be 0). `*request` stays null when the plugin
    /// cannot take it now (the core retries). `mhandle` may be null. Required.
    pub isend: Option<
        unsafe extern "C" fn(
            conn: *mut c_void,
            data: *const c_void,
            len: usize,
            mhandle: *mut c_void,
            request: *mut *mut c_void,
        ) -> i32,
    >,
    /// Post a receive of at most `len` bytes. Same rules as `isend`. Required.
    pub irecv: Option<
        unsafe extern "C" fn(
            conn: *mut c_void,
            data: *mut c_void,
            len: usize,
            mhandle: *mut c_void,
            request: *mut *mut c_void,
        ) -> i32,
    >,
    /// Progress a request. Sets `*done` and, when done, `*nbytes`. After it reports
    /// done or returns an error the request is gone. Required.
    pub test: Option<
        unsafe extern "C" fn(request: *mut c_void, done: *mut i32, nbytes: *mut usize) -> i32,
    >,
    /// Close a connection, cancelling any request still outstanding on it. Required.
    pub free: Option<unsafe extern "C" fn(conn: *mut c_void) -> i32>,
    /// Copy the text of the last error raised on the calling thread into `buf`
    /// (NUL-terminated, truncated to `len`); returns the full length. Optional.
    pub last_error: Option<unsafe extern "C" fn(buf: *mut c_char, len: usize) -> usize>,
}

/// The smallest `struct_size` the core accepts for a v1 table.
pub const FX_TRANSPORT_V1_MIN_SIZE: usize = std::mem::size_of::<FxTransportV1>();
/// The smallest `struct_size` a plugin may rely on for the host table.
pub const FX_HOST_V1_MIN_SIZE: usize = std::mem::size_of::<FxHostV1>();

/// Signature of the exported entry point.
pub type FxTransportV1Entry = unsafe extern "C" fn() -> *const FxTransportV1;

/// Text for a result code.
pub fn code_name(code: i32) -> &'static str {
    match code {
        FX_OK => "OK",
        FX_IN_PROGRESS => "IN_PROGRESS",
        FX_INVALID_ARGUMENT => "INVALID_ARGUMENT",
        FX_UNSUPPORTED => "UNSUPPORTED",
        FX_SYSTEM => "SYSTEM",
        FX_REMOTE => "REMOTE",
        FX_TIMEOUT => "TIMEOUT",
        FX_INTERNAL => "INTERNAL",
        _ => "UNKNOWN_CODE",
    }
}

impl FxTransportV1 {
    /// The plugin name up to the first NUL (lossy UTF-8).
    pub fn name_str(&self) -> String {
        c_chars_to_string(&self.name)
    }
}

impl FxPeerInfo {
    /// An all-zero peer record (rank 0, no device).
    pub fn zeroed() -> Self {
        FxPeerInfo {
            rank: 0,
            nranks: 0,
            local_rank: 0,
            pid: 0,
            host_hash: 0,
            comm_hash: 0,
            cuda_device: -1,
            cuda_pci: -1,
            host_name: [0; FX_HOST_NAME_BYTES],
        }
    }

    /// The host name up to the first NUL.
    pub fn host_name_str(&self) -> String {
        c_chars_to_string(&self.host_name)
    }

    /// Store `name` (truncated) as the host name.
    pub fn set_host_name(&mut self, name: &str) {
        copy_str_to_c_chars(name, &mut self.host_name);
    }
}

/// Bytes of a fixed `c_char` array up to the first NUL, as a String.
pub fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copy `s` into `out`, truncated so a NUL always fits.
pub fn copy_str_to_c_chars(s: &str, out: &mut [c_char]) {
    out.fill(0);
    let n = s.len().min(out.len().saturating_sub(1));
    for (o, b) in out.iter_mut().zip(&s.as_bytes()[..n]) {
        *o = *b as c_char;
    }
}
