//! One path's verbs objects — the port's context and protection domain, and
//! per peer an RC QP with its own CQ — and, through `mlx5dv_init_obj`, the
//! buffers behind them: the send queue, its doorbell record, the BlueFlame
//! (UAR) register, the CQ and its doorbell record. [`Raw::check`] is the
//! sans-IO half: what mlx5dv returned, checked against what the device
//! header's writers and poll assume (64-byte basic blocks, 64-byte CQEs,
//! power-of-two rings, a CQ at least as large as its send queue).
//!
//! Never run on a NIC (docs/IBGDA.md): the calls follow the public headers.

use super::verbs::{self, mask, IbvAhAttr, IbvCq, IbvGlobalRoute, IbvMr, IbvPortAttr, IbvQp};
use super::verbs::{IbvContext, IbvPd, IbvQpAttr, IbvQpCap, IbvQpInitAttr, Verbs};
use super::verbs::{InOut, Mlx5dvCq, Mlx5dvObj, Mlx5dvQp, Mlx5dvWq};
use ferrocx_ibgda::mlx5_peer::{LocalQueues, SQ_SLOT_BYTES};
use ferrocx_ibgda::rc::{self, Link, PortAddr};
use std::ffi::{c_void, CStr};
use std::fmt;
use std::sync::Arc;

/// Bytes of a CQE the device header polls.
pub const CQE_BYTES: u32 = 64;

/// What `mlx5dv_init_obj` gave for one QP and its CQ, as host addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Raw {
    /// The QP's number (`ibv_qp::qp_num`).
    pub qpn: u32,
    /// `mlx5dv_qp.sq.buf`.
    pub sq_buf: u64,
    /// `mlx5dv_qp.sq.wqe_cnt`.
    pub sq_wqe_cnt: u32,
    /// `mlx5dv_qp.sq.stride`.
    pub sq_stride: u32,
    /// `mlx5dv_qp.dbrec` (the record's two words: receive, send).
    pub dbrec: u64,
    /// `mlx5dv_qp.bf.reg`.
    pub bf_reg: u64,
    /// `mlx5dv_qp.bf.size`.
    pub bf_size: u32,
    /// `mlx5dv_cq.buf`.
    pub cq_buf: u64,
    /// `mlx5dv_cq.cqe_cnt`.
    pub cqe_cnt: u32,
    /// `mlx5dv_cq.cqe_size`.
    pub cqe_size: u32,
    /// `mlx5dv_cq.dbrec`.
    pub cq_dbrec: u64,
}

/// Why a QP's or CQ's buffers cannot be handed to a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueError {
    /// A null or misaligned address (which, where).
    Address(&'static str, u64),
    /// Send queue WQEs not a power of two (or 0).
    SqSlots(u32),
    /// A basic block of other than 64 bytes.
    Stride(u32),
    /// A BlueFlame size the doorbell write cannot be sure of.
    BfSize(u32),
    /// CQEs of other than 64 bytes (`MLX5_CQE_SIZE=128`?).
    CqeSize(u32),
    /// CQ entries not a power of two, or fewer than the send queue's WQEs.
    CqEntries {
        /// CQEs.
        cqes: u32,
        /// Send queue WQEs.
        slots: u32,
    },
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::Address(what, at) => write!(f, "the {what} at {at:#x} is null or misaligned"),
            QueueError::SqSlots(n) => write!(f, "a send queue of {n} WQEs (a power of two expected)"),
            QueueError::Stride(s) => write!(f, "send queue stride {s} (64-byte basic blocks expected)"),
            QueueError::BfSize(s) => write!(f, "BlueFlame size {s} (0 or a power of two from 64 to 2048 expected)"),
            QueueError::CqeSize(s) => write!(f, "CQEs of {s} bytes (64 expected; is MLX5_CQE_SIZE set?)"),
            QueueError::CqEntries { cqes, slots } => write!(
                f,
                "a CQ of {cqes} entries for {slots} send queue WQEs (a power of two, at least as many)"
            ),
        }
    }
}

/// A path's queues as host addresses, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostQueues {
    /// The QP's number.
    pub qpn: u32,
    /// The send queue's first basic block.
    pub sq: u64,
    /// Its basic blocks.
    pub slots: u32,
    /// The QP's doorbell record (two words).
    pub dbrec: u64,
    /// The doorbell register in the UAR page.
    pub uar: u64,
    /// The CQ's first entry.
    pub cq: u64,
    /// log2 of its entries.
    pub cq_log: u32,
    /// The CQ's doorbell record (two words).
    pub cq_dbrec: u64,
}

impl Raw {
    /// Check what mlx5dv returned against what the device header assumes.
    pub fn check(&self) -> Result<HostQueues, QueueError> {
        for (what, at, align) in [
            ("send queue", self.sq_buf, SQ_SLOT_BYTES),
            ("QP doorbell record", self.dbrec, 8),
            ("BlueFlame register", self.bf_reg, 8),
            ("completion queue", self.cq_buf, u64::from(CQE_BYTES)),
            ("CQ doorbell record", self.cq_dbrec, 8),
        ] {
            if at == 0 || at % align != 0 {
                return Err(QueueError::Address(what, at));
            }
        }
        if !self.sq_wqe_cnt.is_power_of_two() {
            return Err(QueueError::SqSlots(self.sq_wqe_cnt));
        }
        if u64::from(self.sq_stride) != SQ_SLOT_BYTES {
            return Err(QueueError::Stride(self.sq_stride));
        }
        if self.bf_size != 0
            && !(self.bf_size.is_power_of_two() && (64..=2048).contains(&self.bf_size))
        {
            return Err(QueueError::BfSize(self.bf_size));
        }
        if self.cqe_size != CQE_BYTES {
            return Err(QueueError::CqeSize(self.cqe_size));
        }
        if !self.cqe_cnt.is_power_of_two()
            || self.cqe_cnt < self.sq_wqe_cnt
            || self.cqe_cnt > 1 << 24
        {
            return Err(QueueError::CqEntries {
                cqes: self.cqe_cnt,
                slots: self.sq_wqe_cnt,
            });
        }
        Ok(HostQueues {
            qpn: self.qpn,
            sq: self.sq_buf,
            slots: self.sq_wqe_cnt,
            dbrec: self.dbrec,
            uar: self.bf_reg,
            cq: self.cq_buf,
            cq_log: self.cqe_cnt.trailing_zeros(),
            cq_dbrec: self.cq_dbrec,
        })
    }
}

impl HostQueues {
    /// The host memory the GPU must reach (start, bytes): the send queue,
    /// the QP's doorbell record, the CQ, the CQ's doorbell record.
    pub fn host_ranges(&self) -> [(u64, u64); 4] {
        [
            (self.sq, u64::from(self.slots) * SQ_SLOT_BYTES),
            (self.dbrec, 8),
            (self.cq, (1u64 << self.cq_log) * u64::from(CQE_BYTES)),
            (self.cq_dbrec, 8),
        ]
    }

    /// The device memory the GPU rings (the doorbell register).
    pub fn io_range(&self) -> (u64, u64) {
        (self.uar, 8)
    }

    /// The queues as the GPU reaches them: every address through `to_device`
    /// (the mapping of the registered pages), the send doorbell word being
    /// the record's second (`dbrec[1]`, as the header's `fxg_mlx5_ring` writes).
    pub fn local(
        &self,
        lkey: u32,
        to_device: impl Fn(u64) -> Option<u64>,
        to_device_io: impl Fn(u64) -> Option<u64>,
    ) -> Result<LocalQueues, String> {
        let dev = |what: &str, at: u64| {
            to_device(at).ok_or_else(|| format!("the {what} at {at:#x} is not mapped for the GPU"))
        };
        Ok(LocalQueues {
            sq: dev("send queue", self.sq)?,
            slots: self.slots,
            qpn: self.qpn,
            dbrec: dev("send doorbell word", self.dbrec + 4)?,
            uar: to_device_io(self.uar).ok_or_else(|| {
                format!(
                    "the doorbell register at {:#x} is not mapped for the GPU",
                    self.uar
                )
            })?,
            cq: dev("completion queue", self.cq)?,
            cq_log: self.cq_log,
            cq_dbrec: dev("CQ doorbell record", self.cq_dbrec)?,
            lkey,
        })
    }
}

/// The three transitions of [`rc::connect`] as `ibv_modify_qp` arguments:
/// (attributes, mask, the state's name), in order.
pub fn transitions(c: &rc::Connect) -> [(IbvQpAttr, i32, &'static str); 3] {
    let init = IbvQpAttr {
        qp_state: verbs::QPS_INIT,
        pkey_index: c.init.pkey_index,
        port_num: c.init.port,
        qp_access_flags: c.init.access,
        ..Default::default()
    };
    let r = &c.rtr;
    let rtr = IbvQpAttr {
        qp_state: verbs::QPS_RTR,
        path_mtu: r.mtu as u32,
        dest_qp_num: r.dest_qpn,
        rq_psn: r.rq_psn,
        max_dest_rd_atomic: r.max_dest_rd_atomic,
        min_rnr_timer: r.min_rnr_timer,
        ah_attr: IbvAhAttr {
            grh: IbvGlobalRoute {
                dgid: r.dgid,
                sgid_index: r.sgid_index,
                hop_limit: r.hop_limit,
                ..Default::default()
            },
            dlid: r.dlid,
            is_global: r.global as u8,
            port_num: c.init.port,
            ..Default::default()
        },
        ..Default::default()
    };
    let s = &c.rts;
    let rts = IbvQpAttr {
        qp_state: verbs::QPS_RTS,
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        sq_psn: s.sq_psn,
        max_rd_atomic: s.max_rd_atomic,
        ..Default::default()
    };
    [
        (
            init,
            mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS,
            "INIT",
        ),
        (
            rtr,
            mask::STATE
                | mask::AV
                | mask::PATH_MTU
                | mask::DEST_QPN
                | mask::RQ_PSN
                | mask::MAX_DEST_RD_ATOMIC
                | mask::MIN_RNR_TIMER,
            "RTR",
        ),
        (
            rts,
            mask::STATE
                | mask::TIMEOUT
                | mask::RETRY_CNT
                | mask::RNR_RETRY
                | mask::SQ_PSN
                | mask::MAX_QP_RD_ATOMIC,
            "RTS",
        ),
    ]
}

/// `IBV_MTU_*` to bytes.
fn mtu_bytes(v: u32) -> Option<u32> {
    (1..=5).contains(&v).then(|| 128 << v)
}

/// The port's address from `ibv_query_port` and the GID chosen from sysfs.
pub fn port_addr(
    port: u8,
    a: &IbvPortAttr,
    gid: Option<(u8, [u8; 16])>,
) -> Result<PortAddr, String> {
    if a.state != verbs::PORT_ACTIVE {
        return Err(format!("port {port} is not active (state {})", a.state));
    }
    let mtu = mtu_bytes(a.active_mtu)
        .ok_or_else(|| format!("port {port}: active MTU enum {}", a.active_mtu))?;
    let link = match a.link_layer {
        verbs::LINK_LAYER_ETHERNET => Link::Ethernet,
        0 | verbs::LINK_LAYER_INFINIBAND => Link::InfiniBand,
        k => return Err(format!("port {port}: link layer {k}")),
    };
    let (gid_index, gid) = match (link, gid) {
        (_, Some(g)) => g,
        (Link::InfiniBand, None) => (0, [0; 16]),
        (Link::Ethernet, None) => return Err(format!("port {port}: RoCE without a GID in sysfs")),
    };
    Ok(PortAddr {
        link,
        lid: a.lid,
        gid,
        gid_index,
        port,
        mtu,
    })
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// One opened port: a device context and a protection domain on it.
pub struct Port {
    verbs: Arc<Verbs>,
    ctx: *mut IbvContext,
    pd: *mut IbvPd,
    /// `mlx5_0:1`, for messages.
    pub name: String,
    /// Its address.
    pub addr: PortAddr,
}

// SAFETY: verbs objects may be used from any thread (rdma-core locks
// internally); this crate uses a port from one thread at a time.
unsafe impl Send for Port {}
// SAFETY: as above.
unsafe impl Sync for Port {}

impl Port {
    /// Open `device`'s `port`, with the GID sysfs chose (`None` on
    /// InfiniBand takes GID 0).
    pub fn open(
        verbs: Arc<Verbs>,
        device: &str,
        port: u8,
        gid: Option<(u8, [u8; 16])>,
    ) -> Result<Port, String> {
        let name = format!("{device}:{port}");
        let mut n = 0;
        // SAFETY: `n` is a valid out pointer; the list is freed below.
        let list = unsafe { (verbs.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(format!("ibv_get_device_list failed: {}", errno()));
        }
        let mut found = std::ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: the list holds `n` device pointers.
            let d = unsafe { *list.add(i) };
            // SAFETY: a listed device; its name is a NUL-terminated string it owns.
            let dn = unsafe { CStr::from_ptr((verbs.get_device_name)(d)) };
            if dn.to_bytes() == device.as_bytes() {
                found = d;
                break;
            }
        }
        let ctx = if found.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: a device of the list, which is still live.
            unsafe { (verbs.open_device)(found) }
        };
        let open_err = errno();
        // SAFETY: the list from get_device_list, freed once; an opened context outlives it.
        unsafe { (verbs.free_device_list)(list) };
        if found.is_null() {
            return Err(format!("verbs lists no device {device}"));
        }
        if ctx.is_null() {
            return Err(format!("ibv_open_device({device}) failed: {open_err}"));
        }
        // SAFETY: zeroed port attributes are valid (plain integers).
        let mut a: IbvPortAttr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context; `a` is larger than the struct the library writes.
        let r = unsafe { (verbs.query_port)(ctx, port, &mut a) };
        let addr = if r != 0 {
            Err(format!(
                "ibv_query_port({name}) failed: {}",
                std::io::Error::from_raw_os_error(r)
            ))
        } else {
            port_addr(port, &a, gid).map_err(|e| format!("{device} {e}"))
        };
        let addr = match addr {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: opened above, closed once.
                unsafe { (verbs.close_device)(ctx) };
                return Err(e);
            }
        };
        // SAFETY: an open context.
        let pd = unsafe { (verbs.alloc_pd)(ctx) };
        if pd.is_null() {
            let e = errno();
            // SAFETY: opened above, closed once.
            unsafe { (verbs.close_device)(ctx) };
            return Err(format!("ibv_alloc_pd({name}) failed: {e}"));
        }
        Ok(Port {
            verbs,
            ctx,
            pd,
            name,
            addr,
        })
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: allocated in `open`, released once; every QP, CQ and MR on
        // them holds an `Arc<Port>`, so they are gone already.
        unsafe {
            (self.verbs.dealloc_pd)(self.pd);
            (self.verbs.close_device)(self.ctx);
        }
    }
}

/// A memory region on a port's protection domain.
pub struct Mr {
    port: Arc<Port>,
    mr: *mut IbvMr,
}

// SAFETY: as for `Port`.
unsafe impl Send for Mr {}
// SAFETY: as for `Port`.
unsafe impl Sync for Mr {}

impl Mr {
    /// Take ownership of a region `ibv_reg_mr`/`ibv_reg_dmabuf_mr` returned.
    ///
    /// # Safety
    /// `mr` is a live region on `port`'s protection domain, deregistered by
    /// no one else.
    pub unsafe fn from_raw(port: Arc<Port>, mr: *mut IbvMr) -> Mr {
        Mr { port, mr }
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live region (owned).
        unsafe { (*self.mr).lkey }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once.
        unsafe { (self.port.verbs.dereg_mr)(self.mr) };
    }
}

/// An RC QP with its own CQ (send completions only), and its buffers.
pub struct Qp {
    port: Arc<Port>,
    qp: *mut IbvQp,
    cq: *mut IbvCq,
    /// What mlx5dv gave.
    pub raw: Raw,
}

/// Entries to ask of `ibv_create_cq` for a QP of `slots` send WRs: one per
/// basic block of the send queue libmlx5 makes for them (see [`Qp::create`]).
pub fn cq_entries(slots: u32) -> i32 {
    slots.saturating_mul(4).min(i32::MAX as u32) as i32
}

// SAFETY: as for `Port`.
unsafe impl Send for Qp {}
// SAFETY: as for `Port`.
unsafe impl Sync for Qp {}

impl Qp {
    /// A QP of `slots` send WRs and a CQ of [`cq_entries`] entries, on
    /// `port`; then its buffers through mlx5dv. The GPU writes one basic
    /// block per WQE (a WRITE or an atomic with one gather entry, no inline
    /// data), but libmlx5 sizes the send queue for the largest RC WQE (a
    /// memory-window bind: 4 blocks), so the queue has up to 4 × `slots`
    /// blocks, and the header wants a CQE for each.
    pub fn create(port: &Arc<Port>, slots: u32) -> Result<Qp, String> {
        let v = &port.verbs;
        let name = &port.name;
        // SAFETY: an open context; no channel, vector 0.
        let cq = unsafe {
            (v.create_cq)(
                port.ctx,
                cq_entries(slots),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(format!(
                "ibv_create_cq({name}, {}) failed: {}",
                cq_entries(slots),
                errno()
            ));
        }
        let mut init = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: std::ptr::null_mut(),
            cap: IbvQpCap {
                max_send_wr: slots,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: verbs::QPT_RC,
            // The GPU marks the WQEs it wants completed.
            sq_sig_all: 0,
        };
        // SAFETY: a live PD and CQ; `init` is a complete ibv_qp_init_attr.
        let qp = unsafe { (v.create_qp)(port.pd, &mut init) };
        if qp.is_null() {
            let e = errno();
            // SAFETY: created above, destroyed once.
            unsafe { (v.destroy_cq)(cq) };
            return Err(format!(
                "ibv_create_qp({name}, RC, {slots} send WRs) failed: {e}"
            ));
        }
        let mut q = Qp {
            port: port.clone(),
            qp,
            cq,
            raw: Raw::default(),
        };
        q.raw = q.direct()?;
        Ok(q)
    }

    /// The QP's and CQ's buffers through `mlx5dv_init_obj`.
    fn direct(&self) -> Result<Raw, String> {
        // SAFETY: zeroed out-structs are valid (pointers and integers);
        // comp_mask 0 asks for no optional field.
        let (mut dq, mut dc): (Mlx5dvQp, Mlx5dvCq) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let none = InOut {
            input: std::ptr::null_mut(),
            out: std::ptr::null_mut(),
        };
        let mut obj = Mlx5dvObj {
            qp: InOut {
                input: self.qp.cast(),
                out: (&mut dq as *mut Mlx5dvQp).cast(),
            },
            cq: InOut {
                input: self.cq.cast(),
                out: (&mut dc as *mut Mlx5dvCq).cast(),
            },
            rest: [none; 12],
        };
        // SAFETY: live verbs objects of an mlx5 device (a non-mlx5 one
        // returns an error); the outs are live and as large as the header's.
        let r = unsafe {
            (self.port.verbs.mlx5dv_init_obj)(&mut obj, verbs::MLX5DV_OBJ_QP | verbs::MLX5DV_OBJ_CQ)
        };
        if r != 0 {
            return Err(format!(
                "mlx5dv_init_obj on {} failed: {} (not an mlx5 device?)",
                self.port.name,
                std::io::Error::from_raw_os_error(r.abs())
            ));
        }
        let wq = |w: &Mlx5dvWq| (w.buf as u64, w.wqe_cnt, w.stride);
        let (sq_buf, sq_wqe_cnt, sq_stride) = wq(&dq.sq);
        Ok(Raw {
            qpn: self.qpn(),
            sq_buf,
            sq_wqe_cnt,
            sq_stride,
            dbrec: dq.dbrec as u64,
            bf_reg: dq.bf.reg as u64,
            bf_size: dq.bf.size,
            cq_buf: dc.buf as u64,
            cqe_cnt: dc.cqe_cnt,
            cqe_size: dc.cqe_size,
            cq_dbrec: dc.dbrec as u64,
        })
    }

    /// The QP's number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: a live QP (owned); qp_num is set at creation.
        unsafe { (*self.qp).qp_num }
    }

    /// RESET → INIT → RTR → RTS with `c`'s attributes.
    pub fn connect(&self, c: &rc::Connect) -> Result<(), String> {
        for (mut attr, m, to) in transitions(c) {
            // SAFETY: a live QP; `attr` is a complete ibv_qp_attr.
            let r = unsafe { (self.port.verbs.modify_qp)(self.qp, &mut attr, m) };
            if r != 0 {
                return Err(format!(
                    "ibv_modify_qp to {to} on {} (QP {:#x}) failed: {}",
                    self.port.name,
                    self.qpn(),
                    std::io::Error::from_raw_os_error(r.abs())
                ));
            }
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created in `create`, destroyed once, the QP before its CQ.
        unsafe {
            (self.port.verbs.destroy_qp)(self.qp);
            (self.port.verbs.destroy_cq)(self.cq);
        }
    }
}

/// Register `len` bytes at `addr` of this process's memory on `port` with
/// local write and the peers' remote access.
pub fn reg_mr(port: &Arc<Port>, addr: u64, len: u64) -> Result<Mr, String> {
    let access = verbs::ACCESS_LOCAL_WRITE | rc::REMOTE_ACCESS as i32;
    // SAFETY: a live PD; the caller keeps the memory registered for the MR's life.
    let mr = unsafe { (port.verbs.reg_mr)(port.pd, addr as *mut c_void, len as usize, access) };
    if mr.is_null() {
        return Err(format!(
            "ibv_reg_mr({}, {len} bytes at {addr:#x}) failed: {}",
            port.name,
            errno()
        ));
    }
    // SAFETY: just registered on this port's PD.
    Ok(unsafe { Mr::from_raw(port.clone(), mr) })
}

/// Register device memory through a dma-buf `fd` (`offset` into it) at
/// `iova` (the address kernels and peers name it by).
pub fn reg_dmabuf_mr(
    port: &Arc<Port>,
    fd: i32,
    offset: u64,
    len: u64,
    iova: u64,
) -> Result<Mr, String> {
    let f = port
        .verbs
        .reg_dmabuf_mr
        .ok_or_else(|| "libibverbs has no ibv_reg_dmabuf_mr (rdma-core before 34)".to_string())?;
    let access = verbs::ACCESS_LOCAL_WRITE | rc::REMOTE_ACCESS as i32;
    // SAFETY: a live PD and dma-buf fd; the caller keeps the memory allocated for the MR's life.
    let mr = unsafe { f(port.pd, offset, len as usize, iova, fd, access) };
    if mr.is_null() {
        return Err(format!(
            "ibv_reg_dmabuf_mr({}, {len} bytes) failed: {}",
            port.name,
            errno()
        ));
    }
    // SAFETY: just registered on this port's PD.
    Ok(unsafe { Mr::from_raw(port.clone(), mr) })
}

#[cfg(test)]
mod tests;
