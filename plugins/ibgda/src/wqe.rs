//! Encoding mlx5 send WQEs: the bytes a GPU thread (or the host, for tests) writes
//! into an RC QP's send queue for the NIC to read.
//!
//! The layout follows the mlx5 Programmer's Reference Manual as rdma-core's public
//! `mlx5dv.h` describes it (`struct mlx5_wqe_ctrl_seg`, `mlx5_wqe_raddr_seg`,
//! `mlx5_wqe_data_seg`, `mlx5_wqe_atomic_seg`, the `MLX5_OPCODE_*` and
//! `MLX5_WQE_CTRL_*` values). Every multi-byte field is big-endian. A WQE is a
//! sequence of 16-byte segments; its control segment says how many (`ds`), and the
//! queue is divided into 64-byte basic blocks. The three WQEs here fit one block:
//!
//! | WQE | segments | ds |
//! |---|---|---|
//! | RDMA WRITE | ctrl, raddr, data | 3 |
//! | RDMA WRITE WITH IMMEDIATE | ctrl (imm), raddr, data | 3 |
//! | atomic fetch-add | ctrl, raddr, atomic, data (where the old value lands) | 4 |
//!
//! Not checked against a NIC: no RDMA device has read these bytes yet.

mod ring;

#[cfg(test)]
mod tests;

pub use ring::{Posted, SendQueue};

use std::fmt;

/// Bytes of one segment unit; the control segment's `ds` counts these
/// (`MLX5_SEND_WQE_DS`).
pub const SEG_BYTES: usize = 16;
/// Bytes of one send-queue basic block (`MLX5_SEND_WQE_BB`); WQE indexes count these.
pub const BB_BYTES: usize = 64;

// Control segment (mlx5_wqe_ctrl_seg, 16 bytes), offsets from the WQE start.
/// be32 at 0: opmod (bits 31..24) | WQE index (23..8) | opcode (7..0).
pub const CTRL_OPMOD_IDX_OPCODE: usize = 0;
/// be32 at 4: QP number (31..8) | ds, segments in this WQE (5..0).
pub const CTRL_QPN_DS: usize = 4;
/// u8 at 8: signature (unused: zero).
pub const CTRL_SIGNATURE: usize = 8;
/// be16 at 9: DCI stream channel id (DC only; zero for RC).
pub const CTRL_DCI_STREAM: usize = 9;
/// u8 at 11: fence mode (7..5) | completion event mode (3..2) | solicited (1).
pub const CTRL_FM_CE_SE: usize = 11;
/// be32 at 12: immediate data (WRITE WITH IMMEDIATE).
pub const CTRL_IMM: usize = 12;

// Remote address segment (mlx5_wqe_raddr_seg, 16 bytes), offsets within it.
/// be64 at 0: remote virtual address.
pub const RADDR_ADDR: usize = 0;
/// be32 at 8: remote key; 4 reserved bytes follow.
pub const RADDR_RKEY: usize = 8;

// Data segment (mlx5_wqe_data_seg, 16 bytes): one local scatter/gather entry.
/// be32 at 0: byte count (bit 31 would mean inline data: never set here).
pub const DATA_BYTE_COUNT: usize = 0;
/// be32 at 4: local key.
pub const DATA_LKEY: usize = 4;
/// be64 at 8: local address.
pub const DATA_ADDR: usize = 8;

// Atomic segment (mlx5_wqe_atomic_seg, 16 bytes).
/// be64 at 0: swap value, or the addend for fetch-add.
pub const ATOMIC_SWAP_ADD: usize = 0;
/// be64 at 8: compare value (compare-and-swap only; zero here).
pub const ATOMIC_COMPARE: usize = 8;

/// `fm_ce_se` bit: CE = 2, "always generate a CQE" (`MLX5_WQE_CTRL_CQ_UPDATE`).
pub const FLAG_CQ_UPDATE: u8 = 2 << 2;
/// `fm_ce_se` bit: solicited event (`MLX5_WQE_CTRL_SOLICITED`).
pub const FLAG_SOLICITED: u8 = 1 << 1;
/// `fm_ce_se` fence mode 4 (`MLX5_WQE_CTRL_FENCE`): wait for earlier WQEs,
/// e.g. a signal after the data it announces on another QP's terms.
pub const FLAG_FENCE: u8 = 4 << 5;
/// `fm_ce_se` fence mode 1 (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`): wait for
/// earlier RDMA READs and atomics of this QP.
pub const FLAG_SMALL_FENCE: u8 = 1 << 5;

/// Largest QP number (24 bits in `qpn_ds`).
pub const MAX_QPN: u32 = (1 << 24) - 1;
/// Largest byte count of a data segment (bit 31 marks inline data).
pub const MAX_BYTE_COUNT: u32 = (1 << 31) - 1;

/// mlx5 send opcodes used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// `MLX5_OPCODE_RDMA_WRITE`.
    RdmaWrite = 0x08,
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`.
    RdmaWriteImm = 0x09,
    /// `MLX5_OPCODE_ATOMIC_FA`.
    AtomicFetchAdd = 0x12,
}

/// A local buffer: address, key, length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    /// Address in the registered region.
    pub addr: u64,
    /// Local key of the region's registration on this QP's NIC.
    pub lkey: u32,
    /// Bytes.
    pub len: u32,
}

/// A remote buffer: address and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// Address in the peer's registered region.
    pub addr: u64,
    /// Remote key of the peer's registration on the peer's NIC of this path (the
    /// backup path has its own keys: note 004's MR on the backup NIC's PD).
    pub rkey: u32,
}

/// One work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkRequest {
    /// RDMA WRITE of `local` to `remote`.
    Write {
        /// Source.
        local: Local,
        /// Destination.
        remote: Remote,
    },
    /// RDMA WRITE WITH IMMEDIATE: the write, then `imm` delivered to a receive.
    WriteImm {
        /// Source.
        local: Local,
        /// Destination.
        remote: Remote,
        /// Immediate data (written big-endian, as the wire carries it).
        imm: u32,
    },
    /// Atomic fetch-and-add of `add` on the 8-byte word at `remote`; the old value
    /// lands in `result` (8 bytes).
    FetchAdd {
        /// The word (8-byte aligned).
        remote: Remote,
        /// The addend.
        add: u64,
        /// Where the fetched value is written (length 8).
        result: Local,
    },
}

impl WorkRequest {
    /// Its mlx5 opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            WorkRequest::Write { .. } => Opcode::RdmaWrite,
            WorkRequest::WriteImm { .. } => Opcode::RdmaWriteImm,
            WorkRequest::FetchAdd { .. } => Opcode::AtomicFetchAdd,
        }
    }

    /// Its size in 16-byte segments (the control segment's `ds`).
    pub fn ds(&self) -> u8 {
        match self {
            WorkRequest::Write { .. } | WorkRequest::WriteImm { .. } => 3,
            WorkRequest::FetchAdd { .. } => 4,
        }
    }
}

/// Completion and ordering options of one WQE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WqeFlags {
    /// Ask for a CQE. The health machine needs one per request it tracks (or per
    /// batch, since mlx5 completions are cumulative in a send queue).
    pub signaled: bool,
    /// Solicited event at the receiver.
    pub solicited: bool,
    /// Fence: start only after earlier WQEs of this QP completed.
    pub fence: bool,
}

impl WqeFlags {
    /// The `fm_ce_se` byte.
    pub fn fm_ce_se(&self) -> u8 {
        let mut b = 0;
        if self.signaled {
            b |= FLAG_CQ_UPDATE;
        }
        if self.solicited {
            b |= FLAG_SOLICITED;
        }
        if self.fence {
            b |= FLAG_FENCE;
        }
        b
    }
}

/// A work request that cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WqeError {
    /// The QP number does not fit 24 bits.
    QpnTooLarge(u32),
    /// A length does not fit a data segment's 31-bit byte count.
    TooLong(u32),
    /// An atomic's remote word is not 8-byte aligned.
    UnalignedAtomic(u64),
    /// A fetch-add's result buffer is not 8 bytes.
    AtomicResultNot8Bytes(u32),
    /// A send queue size that is not a power of two from 1 to 32768 blocks.
    BadQueueSize(u32),
    /// Every block of the send queue holds a WQE the NIC has not completed.
    QueueFull {
        /// Blocks in the queue.
        slots: u16,
    },
    /// A completion names a WQE index that is not outstanding.
    RetireOutsideWindow {
        /// The index completed.
        index: u16,
        /// The oldest outstanding index.
        oldest: u16,
        /// Outstanding WQEs.
        outstanding: u16,
    },
}

impl fmt::Display for WqeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WqeError::QpnTooLarge(q) => write!(f, "QP number {q:#x} does not fit 24 bits"),
            WqeError::TooLong(n) => write!(f, "{n} bytes exceed a data segment's 31-bit count"),
            WqeError::UnalignedAtomic(a) => {
                write!(f, "atomic target {a:#x} is not 8-byte aligned")
            }
            WqeError::AtomicResultNot8Bytes(n) => {
                write!(f, "fetch-add result buffer is {n} bytes, not 8")
            }
            WqeError::BadQueueSize(n) => write!(
                f,
                "send queue of {n} blocks: must be a power of two from 1 to 32768"
            ),
            WqeError::QueueFull { slots } => {
                write!(f, "send queue full: all {slots} blocks await completion")
            }
            WqeError::RetireOutsideWindow {
                index,
                oldest,
                outstanding,
            } => write!(
                f,
                "completion for WQE {index}, but the outstanding ones are {outstanding} from {oldest}"
            ),
        }
    }
}

impl std::error::Error for WqeError {}

fn put_be16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put_be32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put_be64(out: &mut [u8], at: usize, v: u64) {
    out[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn check_local(l: &Local) -> Result<(), WqeError> {
    if l.len > MAX_BYTE_COUNT {
        return Err(WqeError::TooLong(l.len));
    }
    Ok(())
}

/// Encodes `wr` as WQE number `wqe_index` of QP `qpn` into one basic block,
/// zeroing the unused tail. Returns its `ds`.
pub fn encode(
    wr: &WorkRequest,
    qpn: u32,
    wqe_index: u16,
    flags: WqeFlags,
    out: &mut [u8; BB_BYTES],
) -> Result<u8, WqeError> {
    if qpn > MAX_QPN {
        return Err(WqeError::QpnTooLarge(qpn));
    }
    match wr {
        WorkRequest::Write { local, .. } | WorkRequest::WriteImm { local, .. } => {
            check_local(local)?
        }
        WorkRequest::FetchAdd { remote, result, .. } => {
            if remote.addr % 8 != 0 {
                return Err(WqeError::UnalignedAtomic(remote.addr));
            }
            if result.len != 8 {
                return Err(WqeError::AtomicResultNot8Bytes(result.len));
            }
        }
    }
    let ds = wr.ds();
    out.fill(0);
    // Control segment.
    let opmod = 0u32;
    put_be32(
        out,
        CTRL_OPMOD_IDX_OPCODE,
        (opmod << 24) | (u32::from(wqe_index) << 8) | u32::from(wr.opcode() as u8),
    );
    put_be32(out, CTRL_QPN_DS, (qpn << 8) | u32::from(ds));
    out[CTRL_SIGNATURE] = 0;
    put_be16(out, CTRL_DCI_STREAM, 0);
    out[CTRL_FM_CE_SE] = flags.fm_ce_se();
    if let WorkRequest::WriteImm { imm, .. } = wr {
        put_be32(out, CTRL_IMM, *imm);
    }
    // Remote address segment: always the second.
    let remote = match wr {
        WorkRequest::Write { remote, .. }
        | WorkRequest::WriteImm { remote, .. }
        | WorkRequest::FetchAdd { remote, .. } => remote,
    };
    let raddr = SEG_BYTES;
    put_be64(out, raddr + RADDR_ADDR, remote.addr);
    put_be32(out, raddr + RADDR_RKEY, remote.rkey);
    // Then the atomic segment, if any, and the data segment.
    let data = match wr {
        WorkRequest::FetchAdd { add, .. } => {
            let atomic = 2 * SEG_BYTES;
            put_be64(out, atomic + ATOMIC_SWAP_ADD, *add);
            put_be64(out, atomic + ATOMIC_COMPARE, 0);
            3 * SEG_BYTES
        }
        _ => 2 * SEG_BYTES,
    };
    let local = match wr {
        WorkRequest::Write { local, .. } | WorkRequest::WriteImm { local, .. } => local,
        WorkRequest::FetchAdd { result, .. } => result,
    };
    put_be32(out, data + DATA_BYTE_COUNT, local.len);
    put_be32(out, data + DATA_LKEY, local.lkey);
    put_be64(out, data + DATA_ADDR, local.addr);
    Ok(ds)
}
