//! The send queue as a ring of basic blocks: where the next WQE goes, the 16-bit
//! WQE index that wraps, how many are outstanding, and the doorbell values.

use super::{encode, WorkRequest, WqeError, WqeFlags, BB_BYTES};

/// Where a posted WQE went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    /// Its WQE index (the producer counter when it was posted, mod 2^16).
    pub wqe_index: u16,
    /// Its block in the ring (`wqe_index` mod the queue size).
    pub slot: u16,
    /// Its byte offset in the send queue buffer.
    pub offset: usize,
    /// Its `ds`.
    pub ds: u8,
}

/// An RC QP's send queue, modelled in host memory: the bytes are what the GPU
/// would write into the GPU-visible WQ buffer.
#[derive(Debug, Clone)]
pub struct SendQueue {
    qpn: u32,
    slots: u16,
    /// Producer counter: index of the next WQE (wraps at 2^16, as the hardware's).
    pi: u16,
    /// Consumer counter: index of the oldest WQE not known complete.
    ci: u16,
    buf: Vec<u8>,
}

impl SendQueue {
    /// A queue of `slots` basic blocks (a power of two, at most 32768 so that the
    /// 16-bit index distance can tell full from empty) for QP `qpn`.
    pub fn new(qpn: u32, slots: u32) -> Result<Self, WqeError> {
        if qpn > super::MAX_QPN {
            return Err(WqeError::QpnTooLarge(qpn));
        }
        if !slots.is_power_of_two() || slots > 1 << 15 {
            return Err(WqeError::BadQueueSize(slots));
        }
        let n = slots as u16;
        Ok(SendQueue {
            qpn,
            slots: n,
            pi: 0,
            ci: 0,
            buf: vec![0; slots as usize * BB_BYTES],
        })
    }

    /// Encodes `wr` into the next block. Refused when every block is outstanding.
    pub fn post(&mut self, wr: &WorkRequest, flags: WqeFlags) -> Result<Posted, WqeError> {
        if self.outstanding() == self.slots {
            return Err(WqeError::QueueFull { slots: self.slots });
        }
        let wqe_index = self.pi;
        let slot = wqe_index & (self.slots - 1);
        let offset = usize::from(slot) * BB_BYTES;
        let mut block = [0u8; BB_BYTES];
        let ds = encode(wr, self.qpn, wqe_index, flags, &mut block)?;
        self.buf[offset..offset + BB_BYTES].copy_from_slice(&block);
        self.pi = self.pi.wrapping_add(1);
        Ok(Posted {
            wqe_index,
            slot,
            offset,
            ds,
        })
    }

    /// A CQE reported WQE `index` complete: it and every earlier one are done
    /// (send queue completions are cumulative).
    pub fn retire(&mut self, index: u16) -> Result<(), WqeError> {
        let ahead = index.wrapping_sub(self.ci);
        if ahead >= self.outstanding() {
            return Err(WqeError::RetireOutsideWindow {
                index,
                oldest: self.ci,
                outstanding: self.outstanding(),
            });
        }
        self.ci = index.wrapping_add(1);
        Ok(())
    }

    /// WQEs posted and not yet retired.
    pub fn outstanding(&self) -> u16 {
        self.pi.wrapping_sub(self.ci)
    }

    /// The producer counter: the index the next WQE gets.
    pub fn producer_index(&self) -> u16 {
        self.pi
    }

    /// Bytes of the send-queue doorbell record (`dbrec[MLX5_SND_DBR]`): the
    /// producer counter, big-endian, written after the WQEs and before the
    /// doorbell so the NIC knows how far to read.
    pub fn doorbell_record(&self) -> [u8; 4] {
        u32::from(self.pi).to_be_bytes()
    }

    /// The 8 bytes rung at the UAR doorbell for the WQE at `posted`: the first 8
    /// bytes of its control segment (opcode and index, QP number and ds).
    pub fn doorbell(&self, posted: &Posted) -> [u8; 8] {
        let mut d = [0u8; 8];
        d.copy_from_slice(&self.buf[posted.offset..posted.offset + 8]);
        d
    }

    /// The whole send-queue buffer.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}
