//! The bootstrap's own collectives, on reserved tags.
//!
//! Tags are reused call after call: with FIFO delivery per (peer, tag), and each call
//! exchanging exactly one message per (peer, tag), the n-th message on a tag belongs to the
//! n-th call.

use super::{net, Bootstrap, RESERVED_TAG_BIT};
use crate::error::Result;

const KIND_SHIFT: u32 = 32;
const BARRIER: u64 = RESERVED_TAG_BIT | (1 << KIND_SHIFT);
const ALL_GATHER: u64 = RESERVED_TAG_BIT | (2 << KIND_SHIFT);
/// A peer asks what this rank is doing (answered on the reader thread).
pub(super) const STATUS_QUERY: u64 = RESERVED_TAG_BIT | (3 << KIND_SHIFT);
/// The answer to [`STATUS_QUERY`].
pub(super) const STATUS_REPLY: u64 = RESERVED_TAG_BIT | (4 << KIND_SHIFT);

impl Bootstrap {
    /// Wait until every rank has entered the barrier (dissemination: ⌈log2 n⌉ rounds, in
    /// round k send to rank+2^k and receive from rank-2^k). Bounded by the timeout.
    pub fn barrier(&self) -> Result<()> {
        let _serial = self.coll.lock();
        let (n, r) = (self.nranks, self.rank);
        let deadline = net::deadline_after(self.timeout);
        let mut dist = 1;
        let mut round = 0u64;
        while dist < n {
            let tag = BARRIER | round;
            self.send_raw((r + dist) % n, tag, &[])?;
            self.recv_raw((r + n - dist) % n, tag, deadline, self.timeout)?;
            dist *= 2;
            round += 1;
        }
        Ok(())
    }

    /// Every rank's `mine`, indexed by rank (sizes may differ between ranks). Each rank
    /// sends its piece straight to every other: one network hop, and fine at bootstrap
    /// sizes (setup blobs). Bounded by the timeout.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let _serial = self.coll.lock();
        let (n, r) = (self.nranks, self.rank);
        let deadline = net::deadline_after(self.timeout);
        // Start with the right-hand neighbour so ranks do not all hit rank 0 first.
        for k in 1..n {
            self.send_raw((r + k) % n, ALL_GATHER, mine)?;
        }
        let mut out = vec![Vec::new(); n];
        out[r] = mine.to_vec();
        for k in 1..n {
            let from = (r + n - k) % n;
            out[from] = self.recv_raw(from, ALL_GATHER, deadline, self.timeout)?;
        }
        Ok(out)
    }
}

/// Names a reserved tag in error messages.
pub(super) fn describe_internal_tag(tag: u64) -> String {
    match tag & !RESERVED_TAG_BIT & !0xffff_ffff {
        k if k == BARRIER & !RESERVED_TAG_BIT => {
            format!("bootstrap barrier (round {})", tag & 0xffff_ffff)
        }
        k if k == ALL_GATHER & !RESERVED_TAG_BIT => "bootstrap all_gather".to_string(),
        k if k == STATUS_QUERY & !RESERVED_TAG_BIT => "status query".to_string(),
        k if k == STATUS_REPLY & !RESERVED_TAG_BIT => "status reply".to_string(),
        _ => format!("bootstrap internal message (tag {tag:#x})"),
    }
}
