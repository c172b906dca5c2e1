//! The control region of one connection end: the memory the two ends write into each
//! other with RDMA, laid out once for both roles.
//!
//! One page-aligned allocation per connection end, registered on every rail's device:
//! a [`Ctrl`] header followed by [`DEPTH`] bounce slots of [`BOUNCE_BYTES`] (small
//! messages are copied through them instead of registering user memory).
//!
//! | field | lives on | written by | meaning |
//! |---|---|---|---|
//! | `fifo[s]` | sender | receiver (RDMA WRITE) | receive `seq` is posted: write to (addr, rkey per rail), at most len bytes |
//! | `records[s]` | receiver | sender (WRITE WITH IMM, imm = seq) | message `seq` is complete with `size` bytes |
//! | `record_read[s]` | sender | sender (RDMA READ of `records[s]`) | failover: was the lost marker placed? |
//! | `rearm` | receiver | sender | re-arm a failed rail's QP with these PSNs |
//! | `rearm_ack` | sender | receiver | the re-arm of generation `gen` is done |
//! | `hello` | receiver | sender | the sender's QPs are ready (its connection id) |
//! | `probe` | either | the other end | target of recovery probes |
//! | `*_src` | either | itself | local sources of the small writes above |
//!
//! Every slot is indexed by `seq % DEPTH`; sequence numbers start at 1 so zeroed
//! memory never matches. `FifoSlot::seq` is the last field: the receiver writes the
//! slot in one RDMA WRITE and the sender reads `seq` first, then (after an acquire
//! fence) the rest — relying, like NCCL, on the NIC placing the bytes of one write in
//! increasing address order.

use ferrocx_sdk::shareable;

/// Receives a connection can have posted at once (and messages in flight).
pub const DEPTH: usize = 32;
/// Largest message copied through a bounce slot instead of registering user memory.
pub const BOUNCE_BYTES: usize = 8192;
/// Number of rails (primary + backup).
pub const RAILS: usize = 2;

shareable! {
    /// A posted receive, announced to the sender.
    pub struct FifoSlot {
        /// Where to write.
        pub addr: u64,
        /// At most this many bytes.
        pub len: u64,
        /// Remote key of the target on each rail's device.
        pub rkey: [u32; RAILS],
        /// Receive sequence number (written last).
        pub seq: u64,
    }
}

shareable! {
    /// Completion record of one message, written by the sender's marker.
    pub struct Record {
        /// Message sequence number.
        pub seq: u64,
        /// Bytes the sender has; more than the posted length means "truncated, nothing written".
        pub size: u64,
    }
}

shareable! {
    /// A request to re-arm a rail's QP pair.
    pub struct Rearm {
        /// Generation, increasing per connection (0 = none yet).
        pub gen: u64,
        /// Which rail.
        pub rail: u32,
        /// New first PSN of the sender's send queue (the receiver's receive side).
        pub sender_psn: u32,
        /// New first PSN of the receiver's send queue (the sender's receive side).
        pub receiver_psn: u32,
        /// Zero.
        pub reserved: u32,
    }
}

shareable! {
    /// The control header. See the module documentation.
    pub struct Ctrl {
        /// Posted receives (sender side).
        pub fifo: [FifoSlot; DEPTH],
        /// Sources of FIFO writes (receiver side).
        pub fifo_src: [FifoSlot; DEPTH],
        /// Completion records (receiver side).
        pub records: [Record; DEPTH],
        /// Sources of markers (sender side).
        pub record_src: [Record; DEPTH],
        /// Targets of record reads during failover (sender side).
        pub record_read: [Record; DEPTH],
        /// Re-arm request (receiver side).
        pub rearm: Rearm,
        /// Its source (sender side).
        pub rearm_src: Rearm,
        /// Re-arm acknowledgement: the generation done (sender side).
        pub rearm_ack: u64,
        /// Its source (receiver side).
        pub rearm_ack_src: u64,
        /// The sender's hello, written once its QPs are ready: the connection id
        /// (receiver side). The receiver announces buffers only after it.
        pub hello: u64,
        /// Its source (sender side).
        pub hello_src: u64,
        /// Probe target.
        pub probe: u64,
        /// Probe source.
        pub probe_src: u64,
    }
}

/// Offset of `fifo[slot]`.
pub fn fifo_at(slot: usize) -> usize {
    std::mem::offset_of!(Ctrl, fifo) + slot * std::mem::size_of::<FifoSlot>()
}
/// Offset of `fifo_src[slot]`.
pub fn fifo_src_at(slot: usize) -> usize {
    std::mem::offset_of!(Ctrl, fifo_src) + slot * std::mem::size_of::<FifoSlot>()
}
/// Offset of `records[slot]`.
pub fn record_at(slot: usize) -> usize {
    std::mem::offset_of!(Ctrl, records) + slot * std::mem::size_of::<Record>()
}
/// Offset of `record_src[slot]`.
pub fn record_src_at(slot: usize) -> usize {
    std::mem::offset_of!(Ctrl, record_src) + slot * std::mem::size_of::<Record>()
}
/// Offset of `record_read[slot]`.
pub fn record_read_at(slot: usize) -> usize {
    std::mem::offset_of!(Ctrl, record_read) + slot * std::mem::size_of::<Record>()
}
/// Offset of the first bounce slot (page-aligned).
pub fn bounce_base() -> usize {
    std::mem::size_of::<Ctrl>().next_multiple_of(4096)
}
/// Offset of bounce slot `slot`.
pub fn bounce_at(slot: usize) -> usize {
    bounce_base() + slot * BOUNCE_BYTES
}
/// Bytes of a whole region.
pub fn region_len() -> usize {
    bounce_at(DEPTH)
}

/// Slot of sequence number `seq`.
pub fn slot(seq: u64) -> usize {
    (seq % DEPTH as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_fixed() {
        assert_eq!(std::mem::size_of::<FifoSlot>(), 32);
        assert_eq!(
            std::mem::offset_of!(FifoSlot, seq),
            24,
            "seq is written last"
        );
        assert_eq!(std::mem::size_of::<Record>(), 16);
        assert_eq!(std::mem::size_of::<Rearm>(), 24);
        assert_eq!(fifo_at(0), 0);
        assert_eq!(fifo_at(1), 32);
        assert_eq!(fifo_src_at(0), 32 * DEPTH);
        assert_eq!(record_at(2) - record_at(0), 32);
        assert_eq!(bounce_base() % 4096, 0);
        assert!(bounce_base() >= std::mem::size_of::<Ctrl>());
        assert_eq!(region_len(), bounce_base() + DEPTH * BOUNCE_BYTES);
        assert_eq!(slot(1), 1);
        assert_eq!(slot(DEPTH as u64 + 3), 3);
    }
}
