//! Reading mlx5 completion queue entries: the 64 bytes a NIC writes into a
//! CQ for each signaled send WQE, or for the first one that failed.
//!
//! The layout follows the mlx5 Programmer's Reference Manual as rdma-core's
//! public `mlx5dv.h` describes it (`struct mlx5_cqe64`, `struct
//! mlx5_err_cqe`, the `MLX5_CQE_*` opcodes and syndromes). Multi-byte fields
//! are big-endian. The last byte, `op_own`, holds the opcode (high nibble)
//! and the owner bit (bit 0): an entry at consumer index `ci` of a CQ of
//! `2^log_size` entries belongs to software when its owner bit equals lap
//! parity `(ci >> log_size) & 1` and its opcode is not `INVALID` (how a CQ
//! starts: every entry `0xf0`, owner 0, so in the first lap only the opcode
//! tells an unwritten entry apart). Send-queue completions are cumulative: a
//! CQE's WQE counter says that WQE and every earlier one are done
//! ([`crate::wqe::SendQueue::retire`]).
//!
//! The GPU side reads the same bytes with `fxg_mlx5_cqe_poll` in the device
//! header (`tests/device_header.rs` checks both agree on every entry kind).
//! **Not checked against a NIC**: no RDMA device has written these bytes
//! here (docs/IBGDA.md).

use std::fmt;

/// Bytes of one CQE (a CQ created with 64-byte entries).
pub const CQE_BYTES: usize = 64;
/// be32 at 44: bytes transferred (responder side; zero for most requester CQEs).
pub const BYTE_CNT: usize = 44;
/// u8 at 54 of an error CQE: the vendor's syndrome.
pub const VENDOR_ERR_SYND: usize = 54;
/// u8 at 55 of an error CQE: the syndrome ([`Syndrome`]).
pub const SYNDROME: usize = 55;
/// be16 at 60: the WQE counter (the index of the WQE this CQE completes).
pub const WQE_COUNTER: usize = 60;
/// u8 at 63: opcode (7..4) | owner (0).
pub const OP_OWN: usize = 63;

/// Requester completion (`MLX5_CQE_REQ`).
pub const OPCODE_REQ: u8 = 0x0;
/// Requester error (`MLX5_CQE_REQ_ERR`).
pub const OPCODE_REQ_ERR: u8 = 0xd;
/// Responder error (`MLX5_CQE_RESP_ERR`).
pub const OPCODE_RESP_ERR: u8 = 0xe;
/// Not written yet (`MLX5_CQE_INVALID`): how every entry starts.
pub const OPCODE_INVALID: u8 = 0xf;

/// Why a WQE failed (an error CQE's syndrome byte, `MLX5_CQE_SYNDROME_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    /// 0x01: the local scatter/gather entry was too short.
    LocalLength,
    /// 0x02: the local QP saw an invalid operation.
    LocalQpOp,
    /// 0x04: the local key does not cover the buffer.
    LocalProtection,
    /// 0x05: flushed: the QP was already in error when this WQE came.
    WorkRequestFlushed,
    /// 0x06: a memory-window bind failed.
    MemoryWindowBind,
    /// 0x10: the responder's answer made no sense.
    BadResponse,
    /// 0x11: local access error.
    LocalAccess,
    /// 0x12: the responder found the request invalid.
    RemoteInvalidRequest,
    /// 0x13: the remote key does not cover the target.
    RemoteAccess,
    /// 0x14: the responder could not carry the operation out.
    RemoteOperation,
    /// 0x15: no acknowledgement within the retry budget (the link or the
    /// peer is gone).
    TransportRetryExceeded,
    /// 0x16: the responder kept answering "receiver not ready".
    RnrRetryExceeded,
    /// 0x22: the remote side aborted.
    RemoteAborted,
    /// Any other value.
    Other(u8),
}

/// What an error completion says about the path it came on, for the health
/// machine ([`crate::health`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The path (link, NIC, the peer's side of the QP) failed: fail over, as
    /// for a completion that never came.
    Path,
    /// The request itself was wrong (keys, lengths, opcode): no path could
    /// carry it, so it completes as a bad record rather than being posted
    /// again (the QP still went to the error state, as after any error: the
    /// path is down until its QP is reset).
    Request,
}

impl Syndrome {
    /// From the syndrome byte.
    pub fn from_u8(v: u8) -> Syndrome {
        match v {
            0x01 => Syndrome::LocalLength,
            0x02 => Syndrome::LocalQpOp,
            0x04 => Syndrome::LocalProtection,
            0x05 => Syndrome::WorkRequestFlushed,
            0x06 => Syndrome::MemoryWindowBind,
            0x10 => Syndrome::BadResponse,
            0x11 => Syndrome::LocalAccess,
            0x12 => Syndrome::RemoteInvalidRequest,
            0x13 => Syndrome::RemoteAccess,
            0x14 => Syndrome::RemoteOperation,
            0x15 => Syndrome::TransportRetryExceeded,
            0x16 => Syndrome::RnrRetryExceeded,
            0x22 => Syndrome::RemoteAborted,
            v => Syndrome::Other(v),
        }
    }

    /// The syndrome byte.
    pub fn to_u8(self) -> u8 {
        match self {
            Syndrome::LocalLength => 0x01,
            Syndrome::LocalQpOp => 0x02,
            Syndrome::LocalProtection => 0x04,
            Syndrome::WorkRequestFlushed => 0x05,
            Syndrome::MemoryWindowBind => 0x06,
            Syndrome::BadResponse => 0x10,
            Syndrome::LocalAccess => 0x11,
            Syndrome::RemoteInvalidRequest => 0x12,
            Syndrome::RemoteAccess => 0x13,
            Syndrome::RemoteOperation => 0x14,
            Syndrome::TransportRetryExceeded => 0x15,
            Syndrome::RnrRetryExceeded => 0x16,
            Syndrome::RemoteAborted => 0x22,
            Syndrome::Other(v) => v,
        }
    }

    /// Whom the failure is on. Keys, lengths and invalid requests are the
    /// request's (the GPU posted something no path could carry); lost
    /// acknowledgements, an aborted or unready peer, a flushed queue and
    /// anything unknown are the path's (a flush follows the failure that put
    /// the QP in error, which was the path's or was reported on its own).
    pub fn blame(self) -> Blame {
        match self {
            Syndrome::LocalLength
            | Syndrome::LocalQpOp
            | Syndrome::LocalProtection
            | Syndrome::MemoryWindowBind
            | Syndrome::LocalAccess
            | Syndrome::RemoteInvalidRequest
            | Syndrome::RemoteAccess => Blame::Request,
            Syndrome::WorkRequestFlushed
            | Syndrome::BadResponse
            | Syndrome::RemoteOperation
            | Syndrome::TransportRetryExceeded
            | Syndrome::RnrRetryExceeded
            | Syndrome::RemoteAborted
            | Syndrome::Other(_) => Blame::Path,
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Syndrome::LocalLength => "local length error",
            Syndrome::LocalQpOp => "local QP operation error",
            Syndrome::LocalProtection => "local protection error",
            Syndrome::WorkRequestFlushed => "work request flushed",
            Syndrome::MemoryWindowBind => "memory window bind error",
            Syndrome::BadResponse => "bad response",
            Syndrome::LocalAccess => "local access error",
            Syndrome::RemoteInvalidRequest => "remote invalid request",
            Syndrome::RemoteAccess => "remote access error",
            Syndrome::RemoteOperation => "remote operation error",
            Syndrome::TransportRetryExceeded => "transport retry counter exceeded",
            Syndrome::RnrRetryExceeded => "RNR retry counter exceeded",
            Syndrome::RemoteAborted => "remote aborted",
            Syndrome::Other(v) => return write!(f, "syndrome {v:#04x}"),
        };
        f.write_str(s)
    }
}

/// One entry as software reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cqe {
    /// Still the NIC's (owner bit of another lap) or never written.
    Empty,
    /// WQE `wqe_counter` and every earlier one completed.
    Done {
        /// The completed WQE's index.
        wqe_counter: u16,
        /// The opcode nibble ([`OPCODE_REQ`]).
        opcode: u8,
        /// Bytes transferred, as the entry says.
        byte_cnt: u32,
    },
    /// An opcode a send CQ should never carry (a responder's, a signature
    /// error, a resize): treated as the path's failure.
    Unexpected {
        /// The entry's WQE counter.
        wqe_counter: u16,
        /// Its opcode nibble.
        opcode: u8,
    },
    /// WQE `wqe_counter` failed; the QP is in error from here on.
    Failed {
        /// The failed WQE's index.
        wqe_counter: u16,
        /// Why.
        syndrome: Syndrome,
        /// The vendor's syndrome byte, for logs.
        vendor: u8,
        /// Reported by the responder ([`OPCODE_RESP_ERR`]) rather than the
        /// requester.
        responder: bool,
    },
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The entry `e` read at consumer index `ci` of a CQ of `2^log_size` entries.
pub fn poll(e: &[u8; CQE_BYTES], ci: u32, log_size: u8) -> Cqe {
    let op_own = e[OP_OWN];
    let (opcode, owner) = (op_own >> 4, op_own & 1);
    let lap = ((u64::from(ci) >> log_size) & 1) as u8;
    if opcode == OPCODE_INVALID || owner != lap {
        return Cqe::Empty;
    }
    let wqe_counter = be16(e, WQE_COUNTER);
    match opcode {
        OPCODE_REQ_ERR | OPCODE_RESP_ERR => Cqe::Failed {
            wqe_counter,
            syndrome: Syndrome::from_u8(e[SYNDROME]),
            vendor: e[VENDOR_ERR_SYND],
            responder: opcode == OPCODE_RESP_ERR,
        },
        OPCODE_REQ => Cqe::Done {
            wqe_counter,
            opcode,
            byte_cnt: be32(e, BYTE_CNT),
        },
        _ => Cqe::Unexpected {
            wqe_counter,
            opcode,
        },
    }
}

/// The bytes a NIC writes for `c` into an entry in lap `lap` (its owner
/// bit): the model of the NIC's side for tests (the proxy's fake carrier's
/// counterpart). `Empty` is an entry never written (`INVALID`).
pub fn written(c: &Cqe, lap: u8) -> [u8; CQE_BYTES] {
    let mut e = [0u8; CQE_BYTES];
    let owner = lap & 1;
    let opcode = match *c {
        Cqe::Empty => OPCODE_INVALID,
        Cqe::Done {
            wqe_counter,
            opcode,
            byte_cnt,
        } => {
            e[BYTE_CNT..BYTE_CNT + 4].copy_from_slice(&byte_cnt.to_be_bytes());
            e[WQE_COUNTER..WQE_COUNTER + 2].copy_from_slice(&wqe_counter.to_be_bytes());
            opcode
        }
        Cqe::Unexpected {
            wqe_counter,
            opcode,
        } => {
            e[WQE_COUNTER..WQE_COUNTER + 2].copy_from_slice(&wqe_counter.to_be_bytes());
            opcode
        }
        Cqe::Failed {
            wqe_counter,
            syndrome,
            vendor,
            responder,
        } => {
            e[SYNDROME] = syndrome.to_u8();
            e[VENDOR_ERR_SYND] = vendor;
            e[WQE_COUNTER..WQE_COUNTER + 2].copy_from_slice(&wqe_counter.to_be_bytes());
            if responder {
                OPCODE_RESP_ERR
            } else {
                OPCODE_REQ_ERR
            }
        }
    };
    e[OP_OWN] = (opcode << 4) | owner;
    e
}

/// A CQ's consumer side: which entry is next and the doorbell record's word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionRing {
    log_size: u8,
    ci: u32,
}

/// A CQ size the ring cannot have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadCqSize(pub u32);

impl fmt::Display for BadCqSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a CQ of {} entries (a power of two from 2 to 2^22)",
            self.0
        )
    }
}

impl std::error::Error for BadCqSize {}

impl CompletionRing {
    /// A CQ of `entries` entries (a power of two, 2 to 2²²), every entry
    /// still the NIC's.
    pub fn new(entries: u32) -> Result<Self, BadCqSize> {
        if !entries.is_power_of_two() || !(2..=1 << 22).contains(&entries) {
            return Err(BadCqSize(entries));
        }
        Ok(CompletionRing {
            log_size: entries.trailing_zeros() as u8,
            ci: 0,
        })
    }

    /// The bytes of a fresh CQ's buffer as drivers set it up: every entry
    /// `INVALID` with owner bit 0 (the first lap's parity: only the opcode
    /// says these are unwritten).
    pub fn initial_buffer(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.entries() as usize * CQE_BYTES];
        for e in b.chunks_exact_mut(CQE_BYTES) {
            e[OP_OWN] = OPCODE_INVALID << 4;
        }
        b
    }

    /// Entries in the CQ.
    pub fn entries(&self) -> u32 {
        1 << self.log_size
    }

    /// The consumer index (entries taken so far, wrapping at 2²⁴ as the
    /// doorbell record's field does).
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// Read the next entry of `buf` (the whole CQ); a non-empty one is taken.
    pub fn next(&mut self, buf: &[u8]) -> Cqe {
        let at = (self.ci & (self.entries() - 1)) as usize * CQE_BYTES;
        let e: &[u8; CQE_BYTES] = buf[at..at + CQE_BYTES].try_into().expect("one entry");
        let c = poll(e, self.ci, self.log_size);
        if c != Cqe::Empty {
            self.ci = (self.ci + 1) & 0x00ff_ffff;
        }
        c
    }

    /// The doorbell record's first word after taking entries: the consumer
    /// index (24 bits), its bytes big-endian in memory.
    pub fn doorbell_record(&self) -> [u8; 4] {
        (self.ci & 0x00ff_ffff).to_be_bytes()
    }
}

#[cfg(test)]
mod tests;
