//! The raw collective-plugin ABI, version 1: `#[repr(C)]` mirrors of
//! `sdk/include/ferrocx_collective.h`, the hook-by-hook reference
//! (`sdk/tests/header_layout.rs` compares every size, offset and constant).
//! Result codes, memory kinds, [`FxHostV1`] and [`FxPeerInfo`] are the
//! transport ABI's.

use super::{FxHostV1, FxPeerInfo, FX_MEM_HOST, FX_NAME_BYTES};
use std::ffi::{c_char, c_void};

/// ABI version of [`FxCollectiveV1`].
pub const FX_COLL_ABI_VERSION_1: u32 = 1;
/// The exported symbol: `const fx_collective_v1_t *ferrocx_collective_v1(void)`.
pub const FX_COLL_SYMBOL_V1: &str = "ferrocx_collective_v1";
/// The priority of the core's own algorithms: a plugin's `can_run` must beat it.
pub const FX_COLL_CORE_PRIORITY: i32 = 100;

/// Broadcast (the collective numbers follow NCCL's order).
pub const FX_COLL_BROADCAST: i32 = 0;
/// Reduce.
pub const FX_COLL_REDUCE: i32 = 1;
/// All-gather.
pub const FX_COLL_ALL_GATHER: i32 = 2;
/// Reduce-scatter.
pub const FX_COLL_REDUCE_SCATTER: i32 = 3;
/// All-reduce.
pub const FX_COLL_ALL_REDUCE: i32 = 4;
/// All-to-all.
pub const FX_COLL_ALL_TO_ALL: i32 = 5;
/// Gather.
pub const FX_COLL_GATHER: i32 = 6;
/// Scatter.
pub const FX_COLL_SCATTER: i32 = 7;

/// `int8_t`.
pub const FX_TYPE_I8: i32 = 0;
/// `uint8_t`.
pub const FX_TYPE_U8: i32 = 1;
/// `int32_t`.
pub const FX_TYPE_I32: i32 = 2;
/// `uint32_t`.
pub const FX_TYPE_U32: i32 = 3;
/// `int64_t`.
pub const FX_TYPE_I64: i32 = 4;
/// `uint64_t`.
pub const FX_TYPE_U64: i32 = 5;
/// IEEE half.
pub const FX_TYPE_F16: i32 = 6;
/// bfloat16.
pub const FX_TYPE_BF16: i32 = 7;
/// `float`.
pub const FX_TYPE_F32: i32 = 8;
/// `double`.
pub const FX_TYPE_F64: i32 = 9;
/// OCP FP8 e4m3 (added within v1: older plugins decline it as unknown).
pub const FX_TYPE_F8E4M3: i32 = 10;
/// OCP FP8 e5m2.
pub const FX_TYPE_F8E5M2: i32 = 11;

/// Sum.
pub const FX_OP_SUM: i32 = 0;
/// Product.
pub const FX_OP_PROD: i32 = 1;
/// Minimum.
pub const FX_OP_MIN: i32 = 2;
/// Maximum.
pub const FX_OP_MAX: i32 = 3;
/// Average.
pub const FX_OP_AVG: i32 = 4;

/// A send ([`FxP2pOp::kind`]; the op kinds were added within v1, 2026-11).
pub const FX_P2P_SEND: i32 = 0;
/// A receive.
pub const FX_P2P_RECV: i32 = 1;

/// `send` and `recv` are NCCL's in-place layout.
pub const FX_COLL_IN_PLACE: u32 = 1 << 0;
/// `send` lies in `send_win` at `send_offset`.
pub const FX_COLL_SEND_WINDOW: u32 = 1 << 1;
/// `recv` lies in `recv_win` at `recv_offset`.
pub const FX_COLL_RECV_WINDOW: u32 = 1 << 2;
/// The stream is being captured into a CUDA graph: the host asks the driver
/// (`cuStreamIsCapturing`) for every device call, so a plugin need not.
pub const FX_COLL_CAPTURING: u32 = 1 << 3;

/// Runs collectives on host memory.
pub const FX_COLL_CAP_HOST_MEM: u64 = 1 << 0;
/// Runs collectives on CUDA device memory.
pub const FX_COLL_CAP_CUDA_MEM: u64 = 1 << 1;
/// Uses `window_register`.
pub const FX_COLL_CAP_WINDOWS: u64 = 1 << 2;
/// `launch` may be captured into a CUDA graph.
pub const FX_COLL_CAP_GRAPHS: u64 = 1 << 3;
/// `launch` on host memory checks the call itself: it compares the call's
/// fingerprint (`seq`, collective, type, operator, count, root) with every rank
/// it exchanges data with before using their data, and fails a difference with
/// a message that starts `mismatched calls: ` (the core's wording, e.g.
/// `mismatched calls: rank 0 called all_reduce(float, sum, 8) as op #3, rank 1
/// called broadcast(float, 8, root 0) as op #3`). The core then skips its own
/// check before the call (`FERROCX_CHECK_CALLS`).
pub const FX_COLL_CAP_CHECKS_CALLS: u64 = 1 << 4;
/// `p2p_can_run` may be asked about ops with the rank itself (`peer` = this
/// rank) on CUDA memory: a device group's sends to itself, each met by the
/// receive from itself posted in the same place among the group's receives
/// from itself, with as many bytes. A plugin that wins both runs the pair as
/// a local copy inside its launch (the core validated the pairing; a plugin
/// still refuses a launch whose self sends and receives do not pair). Without
/// the bit the core copies them itself (a `cuMemcpyAsync` before the launch)
/// and asks only about other ranks. Added within v1 (2026-11-27).
pub const FX_COLL_CAP_P2P_SELF: u64 = 1 << 5;
/// `can_run`'s answer for a host-memory call in no window depends only on the
/// call's shape — `coll`, `dtype`, `op`, `root`, `count` and `flags` — and on
/// the communicator, never on the buffers' addresses or `seq`: the core may
/// remember it per shape and skip asking again while the communicator lives
/// (it does so only when every plugin that takes host memory declares this).
/// Added within v1 (2026-11-28).
pub const FX_COLL_CAP_SHAPE_BIDS: u64 = 1 << 6;

/// What `comm_init` learns about the communicator.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxCommInfo {
    /// This rank.
    pub rank: i32,
    /// Ranks in the communicator.
    pub nranks: i32,
    /// Rank among those of this host.
    pub local_rank: i32,
    /// This rank's CUDA device ordinal, -1 when none.
    pub cuda_device: i32,
    /// Equal on every rank of the communicator.
    pub comm_hash: u64,
    /// `nranks` entries, valid during `comm_init`.
    pub peers: *const FxPeerInfo,
}

/// The core's out-of-band collectives, for a plugin's setup.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxCommOob {
    /// Passed back to both callbacks.
    pub oob_ctx: *mut c_void,
    /// Every rank's `len` bytes into `all` (`nranks * len` bytes), in rank order.
    pub all_gather: Option<
        unsafe extern "C" fn(
            oob_ctx: *mut c_void,
            mine: *const c_void,
            len: usize,
            all: *mut c_void,
        ) -> i32,
    >,
    /// Returns once every rank called it.
    pub barrier: Option<unsafe extern "C" fn(oob_ctx: *mut c_void) -> i32>,
}

/// A symmetric window as `window_register` sees it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxWindowDesc {
    /// This rank's window.
    pub base: *mut c_void,
    /// Its size, the same on every rank.
    pub bytes: u64,
    /// `FX_MEM_HOST` or `FX_MEM_CUDA`.
    pub mem_kind: i32,
    /// Zero.
    pub reserved: u32,
    /// `nranks` entries: rank r's window mapped into this process, or null.
    pub peer_bases: *const *mut c_void,
    /// `nranks` entries: rank r's window address in rank r's own process.
    pub peer_addrs: *const u64,
}

/// One collective call.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxCollDesc {
    /// `FX_COLL_*`.
    pub coll: i32,
    /// `FX_TYPE_*`.
    pub dtype: i32,
    /// `FX_OP_*`.
    pub op: i32,
    /// Root of rooted collectives, else 0.
    pub root: i32,
    /// Elements, as NCCL counts them for `coll`.
    pub count: u64,
    /// `FX_MEM_HOST` or `FX_MEM_CUDA`.
    pub mem_kind: i32,
    /// `FX_COLL_IN_PLACE | FX_COLL_SEND_WINDOW | FX_COLL_RECV_WINDOW | FX_COLL_CAPTURING`.
    pub flags: u32,
    /// Null where this rank sends nothing.
    pub send: *const c_void,
    /// Null where this rank receives nothing.
    pub recv: *mut c_void,
    /// The plugin's window handle when `FX_COLL_SEND_WINDOW`.
    pub send_win: *mut c_void,
    /// The plugin's window handle when `FX_COLL_RECV_WINDOW`.
    pub recv_win: *mut c_void,
    /// Bytes from the send window's base.
    pub send_offset: u64,
    /// Bytes from the receive window's base.
    pub recv_offset: u64,
    /// The communicator's collective sequence number, equal on every rank.
    pub seq: u64,
}

/// An all-reduce of nothing on host memory, every pointer null: a base for
/// descriptors built field by field (tests, tables).
impl Default for FxCollDesc {
    fn default() -> Self {
        FxCollDesc {
            coll: 0,
            dtype: 0,
            op: 0,
            root: 0,
            count: 0,
            mem_kind: FX_MEM_HOST,
            flags: 0,
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            send_win: std::ptr::null_mut(),
            recv_win: std::ptr::null_mut(),
            send_offset: 0,
            recv_offset: 0,
            seq: 0,
        }
    }
}

/// One send or receive of a point-to-point group (`p2p_can_run`,
/// `p2p_launch`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxP2pOp {
    /// [`FX_P2P_SEND`] or [`FX_P2P_RECV`].
    pub kind: i32,
    /// The other rank (this rank itself only with [`FX_COLL_CAP_P2P_SELF`]).
    pub peer: i32,
    /// Bytes (a send meets a receive of exactly as many).
    pub bytes: u64,
    /// The buffer (null only when `bytes` is 0).
    pub buf: *mut c_void,
}

/// A group of point-to-point operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FxP2pDesc {
    /// `nops` operations, in the order the caller posted them.
    pub ops: *const FxP2pOp,
    /// How many.
    pub nops: u32,
    /// `FX_MEM_HOST` or `FX_MEM_CUDA` (every op's).
    pub mem_kind: i32,
    /// `FX_COLL_CAPTURING` or 0.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
}

/// The collective table (ABI v1). The hook-by-hook reference is the C header
/// `sdk/include/ferrocx_collective.h`; these are summaries.
#[repr(C)]
pub struct FxCollectiveV1 {
    /// [`FX_COLL_ABI_VERSION_1`].
    pub abi_version: u32,
    /// `sizeof(fx_collective_v1_t)` as the plugin was built.
    pub struct_size: u32,
    /// Plugin name, NUL-terminated, e.g. `"ce"`.
    pub name: [c_char; FX_NAME_BYTES],
    /// `FX_COLL_CAP_*` bits.
    pub caps: u64,
    /// Create a plugin context. Required.
    pub init: Option<unsafe extern "C" fn(host: *const FxHostV1, ctx: *mut *mut c_void) -> i32>,
    /// Destroy it after every comm. Required.
    pub finalize: Option<unsafe extern "C" fn(ctx: *mut c_void) -> i32>,
    /// Per-communicator state; `oob` stays valid until `comm_destroy`. Required.
    pub comm_init: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            info: *const FxCommInfo,
            oob: *const FxCommOob,
            comm: *mut *mut c_void,
        ) -> i32,
    >,
    /// Release a communicator's state. Required.
    pub comm_destroy: Option<unsafe extern "C" fn(comm: *mut c_void) -> i32>,
    /// Priority for running `coll`: 0 = cannot. Required.
    pub can_run: Option<unsafe extern "C" fn(comm: *mut c_void, coll: *const FxCollDesc) -> i32>,
    /// Register a symmetric window (collective). Optional.
    pub window_register: Option<
        unsafe extern "C" fn(
            comm: *mut c_void,
            desc: *const FxWindowDesc,
            win: *mut *mut c_void,
        ) -> i32,
    >,
    /// Release a window (collective). Optional (required with `window_register`).
    pub window_deregister: Option<unsafe extern "C" fn(comm: *mut c_void, win: *mut c_void) -> i32>,
    /// Run `coll` (host memory: to completion; CUDA: queued on `stream`). Required.
    pub launch: Option<
        unsafe extern "C" fn(
            comm: *mut c_void,
            coll: *const FxCollDesc,
            stream: *mut c_void,
        ) -> i32,
    >,
    /// The asynchronous error that broke the communicator, or `FX_OK`. Optional.
    pub status: Option<unsafe extern "C" fn(comm: *mut c_void) -> i32>,
    /// The calling thread's last error text (as in the transport ABI). Optional.
    pub last_error: Option<unsafe extern "C" fn(buf: *mut c_char, len: usize) -> usize>,
    /// Priority for running the one op of `desc`, decided from that op and
    /// the communicator alone (0 = cannot; above [`FX_COLL_CORE_PRIORITY`]
    /// to be chosen). Added within v1 (2026-11): a table built before has
    /// `struct_size == FX_COLLECTIVE_V1_MIN_SIZE` and neither p2p hook.
    /// Optional (required with `p2p_launch`).
    pub p2p_can_run: Option<unsafe extern "C" fn(comm: *mut c_void, desc: *const FxP2pDesc) -> i32>,
    /// Run the group's ops this plugin won, in posted order (CUDA: queued on
    /// `stream`, returns at once). Optional (required with `p2p_can_run`).
    pub p2p_launch: Option<
        unsafe extern "C" fn(comm: *mut c_void, desc: *const FxP2pDesc, stream: *mut c_void) -> i32,
    >,
    /// Right after a CUDA-memory `launch` or `p2p_launch` returned `FX_OK`:
    /// 1 when what it queued ends by itself within the timeout even if a
    /// peer never comes (no host thread of the plugin has to act), 0 when
    /// the stream may wait for one. Added within v1 (2026-11-27): a table
    /// built before ends before it. Optional (absent: 0).
    pub launch_bounded: Option<unsafe extern "C" fn(comm: *mut c_void) -> i32>,
    /// The path this plugin takes for `coll` in a few words (its protocol or
    /// route, e.g. ce's `LL`, `Simple direct`, `staged`), for tables such as
    /// `fxinfo`'s: written into `buf` (at most `len` bytes, NUL included,
    /// cut short where longer), the full text's length returned (0: nothing
    /// to say). Asked for inspection only, never on a call's path; decided
    /// as `can_run` decides. Added within v1 (2026-11-27): a table built
    /// before ends before it. Optional.
    pub describe: Option<
        unsafe extern "C" fn(
            comm: *mut c_void,
            coll: *const FxCollDesc,
            buf: *mut c_char,
            len: usize,
        ) -> usize,
    >,
}

/// The smallest `struct_size` the core accepts for a v1 collective table:
/// one built before the point-to-point hooks were added within v1 (2026-11),
/// the offset of `p2p_can_run`.
pub const FX_COLLECTIVE_V1_MIN_SIZE: usize = std::mem::offset_of!(FxCollectiveV1, p2p_can_run);

/// Signature of the exported entry point.
pub type FxCollectiveV1Entry = unsafe extern "C" fn() -> *const FxCollectiveV1;

impl FxCollectiveV1 {
    /// The plugin name up to the first NUL (lossy UTF-8).
    pub fn name_str(&self) -> String {
        super::c_chars_to_string(&self.name)
    }
}
