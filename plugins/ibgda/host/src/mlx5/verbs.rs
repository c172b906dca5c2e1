//! The verbs and mlx5dv entry points the mlx5 handler calls, declared here from
//! the public rdma-core headers (`infiniband/verbs.h`, `infiniband/mlx5dv.h`)
//! and resolved at run time from `libibverbs.so.1` and `libmlx5.so.1`: the
//! crate links nothing of rdma-core, so it builds and its tests run where
//! rdma-core is absent, and a host without it falls back to the proxy handler
//! with the loader's message.
//!
//! Only the fields this crate reads or writes are named; the structs the
//! libraries fill are declared whole up to the last field read, and callers
//! hand them zeroed memory at least as large as the public header's.

use libloading::Library;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, OnceLock};

/// `struct ibv_device` (opaque).
pub type IbvDevice = c_void;
/// `struct ibv_context` (opaque).
pub type IbvContext = c_void;
/// `struct ibv_pd` (opaque).
pub type IbvPd = c_void;
/// `struct ibv_cq` (opaque).
pub type IbvCq = c_void;

/// `IBV_QPT_RC`.
pub const QPT_RC: u32 = 2;
/// `enum ibv_qp_state`: INIT.
pub const QPS_INIT: u32 = 1;
/// Ready to receive.
pub const QPS_RTR: u32 = 2;
/// Ready to send.
pub const QPS_RTS: u32 = 3;
/// `IBV_PORT_ACTIVE`.
pub const PORT_ACTIVE: u32 = 4;
/// `IBV_LINK_LAYER_INFINIBAND` (`_UNSPECIFIED` 0 is InfiniBand too).
pub const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: c_int = 1;

/// `enum ibv_qp_attr_mask` bits used by the three transitions.
pub mod mask {
    /// `IBV_QP_STATE`.
    pub const STATE: i32 = 1 << 0;
    /// `IBV_QP_ACCESS_FLAGS`.
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`.
    pub const PKEY_INDEX: i32 = 1 << 4;
    /// `IBV_QP_PORT`.
    pub const PORT: i32 = 1 << 5;
    /// `IBV_QP_AV`.
    pub const AV: i32 = 1 << 7;
    /// `IBV_QP_PATH_MTU`.
    pub const PATH_MTU: i32 = 1 << 8;
    /// `IBV_QP_TIMEOUT`.
    pub const TIMEOUT: i32 = 1 << 9;
    /// `IBV_QP_RETRY_CNT`.
    pub const RETRY_CNT: i32 = 1 << 10;
    /// `IBV_QP_RNR_RETRY`.
    pub const RNR_RETRY: i32 = 1 << 11;
    /// `IBV_QP_RQ_PSN`.
    pub const RQ_PSN: i32 = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    /// `IBV_QP_SQ_PSN`.
    pub const SQ_PSN: i32 = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    /// `IBV_QP_DEST_QPN`.
    pub const DEST_QPN: i32 = 1 << 20;
}

/// `MLX5DV_OBJ_QP`.
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
/// `MLX5DV_OBJ_CQ`.
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;

/// `struct ibv_port_attr`, through `link_layer`; the rest is room for the
/// fields newer libraries append (the compat `ibv_query_port` writes a prefix).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvPortAttr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    /// `enum ibv_mtu` (1 = 256 … 5 = 4096).
    pub active_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// Capability flags.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Counter.
    pub bad_pkey_cntr: u32,
    /// Counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// The port's LID.
    pub lid: u16,
    /// The subnet manager's LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// SM service level.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Width.
    pub active_width: u8,
    /// Speed.
    pub active_speed: u8,
    /// Physical state.
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// Flags.
    pub flags: u8,
    /// Room for later fields.
    pub rest: [u8; 64],
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpCap {
    /// Send work requests.
    pub max_send_wr: u32,
    /// Receive work requests.
    pub max_recv_wr: u32,
    /// Gather entries per send.
    pub max_send_sge: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvQpInitAttr {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut IbvCq,
    /// Receive CQ.
    pub recv_cq: *mut IbvCq,
    /// Shared receive queue (none).
    pub srq: *mut c_void,
    /// Capacities (the library writes back what it made).
    pub cap: IbvQpCap,
    /// `IBV_QPT_*`.
    pub qp_type: u32,
    /// Whether every send completes (0: only those marked).
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`. 8-byte aligned: its `union ibv_gid` holds two
/// `uint64_t`, which pads `struct ibv_qp_attr` to 144 bytes (140 at 4).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvGlobalRoute {
    /// The destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvAhAttr {
    /// Global route.
    pub grh: IbvGlobalRoute,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether `grh` is used.
    pub is_global: u8,
    /// Local port.
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpAttr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    /// Current state.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// Migration state.
    pub path_mig_state: u32,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// The peer's QP.
    pub dest_qp_num: u32,
    /// `IBV_ACCESS_*`.
    pub qp_access_flags: u32,
    /// Capacities.
    pub cap: IbvQpCap,
    /// Primary path.
    pub ah_attr: IbvAhAttr,
    /// Alternate path.
    pub alt_ah_attr: IbvAhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD notification.
    pub en_sqd_async_notify: u8,
    /// SQ draining.
    pub sq_draining: u8,
    /// Reads/atomics this QP may have outstanding.
    pub max_rd_atomic: u8,
    /// Reads/atomics the peer may have outstanding here.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Local port.
    pub port_num: u8,
    /// ACK timeout exponent.
    pub timeout: u8,
    /// Retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit.
    pub rate_limit: u32,
}

/// `struct ibv_qp`, through `qp_num`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvQp {
    /// Context.
    pub context: *mut IbvContext,
    /// User context.
    pub qp_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut IbvPd,
    /// Send CQ.
    pub send_cq: *mut IbvCq,
    /// Receive CQ.
    pub recv_cq: *mut IbvCq,
    /// SRQ.
    pub srq: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// The QP number.
    pub qp_num: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvMr {
    /// Context.
    pub context: *mut IbvContext,
    /// Protection domain.
    pub pd: *mut IbvPd,
    /// First byte.
    pub addr: *mut c_void,
    /// Bytes.
    pub length: usize,
    /// Kernel handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct mlx5dv_qp`'s send (and receive) queue.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvWq {
    /// First WQE.
    pub buf: *mut c_void,
    /// WQEs (basic blocks).
    pub wqe_cnt: u32,
    /// Bytes per WQE basic block.
    pub stride: u32,
}

/// `struct mlx5dv_qp`'s BlueFlame register.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvBf {
    /// The doorbell (BlueFlame) register in the UAR page.
    pub reg: *mut c_void,
    /// BlueFlame buffer bytes (0: doorbell only).
    pub size: u32,
}

/// `struct mlx5dv_qp`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvQp {
    /// Doorbell record: [0] receive, [1] send (big-endian counters).
    pub dbrec: *mut u32,
    /// Send queue.
    pub sq: Mlx5dvWq,
    /// Receive queue.
    pub rq: Mlx5dvWq,
    /// BlueFlame register.
    pub bf: Mlx5dvBf,
    /// In: which optional fields to fill (0: none); out: which were.
    pub comp_mask: u64,
    /// UAR mmap offset (`MLX5DV_QP_MASK_UAR_MMAP_OFFSET`).
    pub uar_mmap_offset: i64,
    /// TIR number.
    pub tirn: u32,
    /// TIS number.
    pub tisn: u32,
    /// RQ number.
    pub rqn: u32,
    /// SQ number.
    pub sqn: u32,
    /// TIR ICM address.
    pub tir_icm_addr: u64,
}

/// `struct mlx5dv_cq`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvCq {
    /// First CQE.
    pub buf: *mut c_void,
    /// Doorbell record: [0] consumer index, [1] arm.
    pub dbrec: *mut u32,
    /// Entries.
    pub cqe_cnt: u32,
    /// Bytes per entry (64 or 128).
    pub cqe_size: u32,
    /// The CQ's UAR (arming; unused).
    pub cq_uar: *mut c_void,
    /// CQ number.
    pub cqn: u32,
    /// Optional fields.
    pub comp_mask: u64,
}

/// One `{ in, out }` pair of `struct mlx5dv_obj`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct InOut {
    /// The verbs object.
    pub input: *mut c_void,
    /// Where mlx5dv writes its view.
    pub out: *mut c_void,
}

/// `struct mlx5dv_obj`: qp, cq, srq, rwq, dm, ah, pd, then room; only the
/// members named by the type mask are read.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvObj {
    /// `MLX5DV_OBJ_QP`.
    pub qp: InOut,
    /// `MLX5DV_OBJ_CQ`.
    pub cq: InOut,
    /// srq, rwq, dm, ah, pd and members later versions append.
    pub rest: [InOut; 12],
}

/// The entry points, resolved once per process.
pub struct Verbs {
    /// `ibv_get_device_list`.
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice,
    /// `ibv_free_device_list`.
    pub free_device_list: unsafe extern "C" fn(*mut *mut IbvDevice),
    /// `ibv_get_device_name`.
    pub get_device_name: unsafe extern "C" fn(*mut IbvDevice) -> *const c_char,
    /// `ibv_open_device`.
    pub open_device: unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext,
    /// `ibv_close_device`.
    pub close_device: unsafe extern "C" fn(*mut IbvContext) -> c_int,
    /// `ibv_query_port` (the exported, compat entry).
    pub query_port: unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int,
    /// `ibv_alloc_pd`.
    pub alloc_pd: unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd,
    /// `ibv_dealloc_pd`.
    pub dealloc_pd: unsafe extern "C" fn(*mut IbvPd) -> c_int,
    /// `ibv_create_cq`.
    pub create_cq:
        unsafe extern "C" fn(*mut IbvContext, c_int, *mut c_void, *mut c_void, c_int) -> *mut IbvCq,
    /// `ibv_destroy_cq`.
    pub destroy_cq: unsafe extern "C" fn(*mut IbvCq) -> c_int,
    /// `ibv_create_qp`.
    pub create_qp: unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp,
    /// `ibv_modify_qp`.
    pub modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
    /// `ibv_destroy_qp`.
    pub destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    /// `ibv_reg_mr` (the exported entry).
    pub reg_mr: unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr,
    /// `ibv_reg_dmabuf_mr` (rdma-core 34 and later; `None` before).
    pub reg_dmabuf_mr:
        Option<unsafe extern "C" fn(*mut IbvPd, u64, usize, u64, c_int, c_int) -> *mut IbvMr>,
    /// `ibv_dereg_mr`.
    pub dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    /// `mlx5dv_init_obj`.
    pub mlx5dv_init_obj: unsafe extern "C" fn(*mut Mlx5dvObj, u64) -> c_int,
    // Kept loaded while the pointers above are in use (declared last:
    // dropped after nothing can call them).
    _mlx5: Library,
    _ibv: Library,
}

/// The verbs library's soname.
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// The mlx5 provider's direct-verbs library's soname.
pub const LIBMLX5: &str = "libmlx5.so.1";

impl Verbs {
    /// Load both libraries, or say which is missing and the loader's reason
    /// ("libmlx5.so.1 not found: <dlerror>").
    pub fn load() -> Result<Verbs, String> {
        Self::load_from(LIBIBVERBS, LIBMLX5)
    }

    /// [`load`](Self::load) once per process: rdma-core is not meant to be
    /// unloaded, and every `comm_init` asks.
    pub fn shared() -> Result<Arc<Verbs>, String> {
        static ONCE: OnceLock<Result<Arc<Verbs>, String>> = OnceLock::new();
        ONCE.get_or_init(|| Self::load().map(Arc::new)).clone()
    }

    /// [`load`](Self::load) from the given names (tests name ones that do not exist).
    pub fn load_from(ibv_name: &str, mlx5_name: &str) -> Result<Verbs, String> {
        // SAFETY: loading runs the libraries' constructors; rdma-core's only
        // register providers and read their configuration.
        let ibv =
            unsafe { Library::new(ibv_name) }.map_err(|e| format!("{ibv_name} not found: {e}"))?;
        // SAFETY: as above.
        let mlx5 = unsafe { Library::new(mlx5_name) }
            .map_err(|e| format!("{mlx5_name} not found: {e}"))?;
        macro_rules! sym {
            ($lib:expr, $libname:expr, $name:literal) => {
                // SAFETY: the symbol's type is the one the public header
                // declares for it (above); the pointer is copied out and used
                // only while `Verbs` keeps the library loaded.
                *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{} lacks {}: {e}", $libname, $name))?
            };
        }
        // SAFETY: as in `sym!`; a missing symbol is `None`.
        let reg_dmabuf_mr = unsafe { ibv.get(b"ibv_reg_dmabuf_mr\0") }.ok().map(|s| *s);
        Ok(Verbs {
            get_device_list: sym!(ibv, ibv_name, "ibv_get_device_list"),
            free_device_list: sym!(ibv, ibv_name, "ibv_free_device_list"),
            get_device_name: sym!(ibv, ibv_name, "ibv_get_device_name"),
            open_device: sym!(ibv, ibv_name, "ibv_open_device"),
            close_device: sym!(ibv, ibv_name, "ibv_close_device"),
            query_port: sym!(ibv, ibv_name, "ibv_query_port"),
            alloc_pd: sym!(ibv, ibv_name, "ibv_alloc_pd"),
            dealloc_pd: sym!(ibv, ibv_name, "ibv_dealloc_pd"),
            create_cq: sym!(ibv, ibv_name, "ibv_create_cq"),
            destroy_cq: sym!(ibv, ibv_name, "ibv_destroy_cq"),
            create_qp: sym!(ibv, ibv_name, "ibv_create_qp"),
            modify_qp: sym!(ibv, ibv_name, "ibv_modify_qp"),
            destroy_qp: sym!(ibv, ibv_name, "ibv_destroy_qp"),
            reg_mr: sym!(ibv, ibv_name, "ibv_reg_mr"),
            reg_dmabuf_mr,
            dereg_mr: sym!(ibv, ibv_name, "ibv_dereg_mr"),
            mlx5dv_init_obj: sym!(mlx5, mlx5_name, "mlx5dv_init_obj"),
            _mlx5: mlx5,
            _ibv: ibv,
        })
    }
}

#[cfg(test)]
mod tests;
