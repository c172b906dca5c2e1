//! Byte layout of one connection's shared host segment (the FIFO's *flags*;
//! the FIFO's bytes are in the receiver's GPU memory).
//!
//! ```text
//! 0          SegHeader: info line | tail line (receiver) | revoke head line (receiver) | revoke tail line (sender)
//! slots_off  nslots × SlotHeader (64 B)    stamp, seq, total, offset, len of the chunk in FIFO slot i
//! reg_off    nreg × RegSlot (128 B)        the direct-copy handshake (P2pRegInfo + IPC handle)
//! rev_off    nrevoke × RevokeEntry (64 B)  handles the receiver withdrew (deregistered, freed)
//! ```
//!
//! Words one process writes and the other polls sit on their own 128-byte
//! lines, so the two processes never write the same cache line.

use crate::regslot::{RegSlot, NREG};
use crate::revoke::{RevokeEntry, RevokeHead, NREVOKE};
use ferrocx_sdk::{PluginError, PluginResult};
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies a ferrocx p2p segment ("FXP2PSEG").
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"FXP2PSEG");
/// Bumped whenever the layout or protocol changes.
pub const SEG_VERSION: u64 = 1;

/// `sender_state` / `receiver_state`: the side is connected and working.
pub const STATE_OPEN: u64 = 0;
/// The side freed the connection with nothing outstanding (the sender: and
/// closed every mapping of the receiver's memory).
pub const STATE_CLOSED: u64 = 1;
/// The side failed or freed the connection with requests outstanding.
pub const STATE_FAILED: u64 = 2;

/// A value alone on its 128-byte line.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

/// Facts about the segment, written once by its creator (the receiver),
/// except the attach and state words.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SegInfo {
    /// [`SEG_MAGIC`], stored last by the creator.
    pub magic: AtomicU64,
    /// [`SEG_VERSION`].
    pub version: AtomicU64,
    /// FIFO slots.
    pub nslots: AtomicU64,
    /// Bytes per FIFO slot.
    pub chunk: AtomicU64,
    /// Handshake slots.
    pub nreg: AtomicU64,
    /// Revocation entries.
    pub nrevoke: AtomicU64,
    /// Segment bytes.
    pub total: AtomicU64,
    /// Process id of the receiver (for messages).
    pub creator_pid: AtomicU64,
    /// Non-zero (the sender's pid, at least 1) once the sender mapped the segment.
    pub sender_attached: AtomicU64,
    /// `STATE_*` of the sending side.
    pub sender_state: AtomicU64,
    /// `STATE_*` of the receiving side.
    pub receiver_state: AtomicU64,
    /// The FIFO's address in the receiver's process. Meaningful only to a
    /// sender in the same process (which cannot open its own IPC handle);
    /// others open the handle from the blob.
    pub fifo_addr: AtomicU64,
}

/// The segment header.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SegHeader {
    /// Geometry, attach and state words.
    pub info: Padded<SegInfo>,
    /// FIFO chunks the receiver has copied out (Release after the copy completed).
    pub tail: Padded<AtomicU64>,
    /// Revocations the receiver published, and its flush-everything generation.
    pub revoke_head: Padded<RevokeHead>,
    /// Revocations the sender processed (Release; the receiver may reuse entries below it).
    pub revoke_tail: Padded<AtomicU64>,
}

const _: () = assert!(std::mem::size_of::<SegHeader>() == 512);

impl SegHeader {
    /// Creator: record the geometry; the magic goes last (Release).
    pub fn init(&self, layout: &Layout, creator_pid: u32, fifo_addr: u64) {
        let i = &self.info.0;
        i.version.store(SEG_VERSION, Ordering::Relaxed);
        i.nslots.store(layout.nslots as u64, Ordering::Relaxed);
        i.chunk.store(layout.chunk as u64, Ordering::Relaxed);
        i.nreg.store(layout.nreg as u64, Ordering::Relaxed);
        i.nrevoke.store(layout.nrevoke as u64, Ordering::Relaxed);
        i.total.store(layout.total as u64, Ordering::Relaxed);
        i.creator_pid.store(creator_pid as u64, Ordering::Relaxed);
        i.fifo_addr.store(fifo_addr, Ordering::Relaxed);
        i.magic.store(SEG_MAGIC, Ordering::Release);
    }

    /// Whether the header describes exactly `layout` (the peer's blob and its segment agree).
    pub fn matches(&self, layout: &Layout) -> bool {
        let i = &self.info.0;
        i.magic.load(Ordering::Acquire) == SEG_MAGIC
            && i.version.load(Ordering::Relaxed) == SEG_VERSION
            && i.nslots.load(Ordering::Relaxed) == layout.nslots as u64
            && i.chunk.load(Ordering::Relaxed) == layout.chunk as u64
            && i.nreg.load(Ordering::Relaxed) == layout.nreg as u64
            && i.nrevoke.load(Ordering::Relaxed) == layout.nrevoke as u64
            && i.total.load(Ordering::Relaxed) == layout.total as u64
    }
}

/// Header of FIFO slot i: describes the chunk whose bytes are in slot i of
/// the receiver's device FIFO. Exactly one cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct SlotHeader {
    /// Chunk number + 1 once the chunk's bytes landed (Release); the receiver polls it.
    pub stamp: AtomicU64,
    /// Message sequence number (1-based).
    pub seq: AtomicU64,
    /// Total length of the message.
    pub total: AtomicU64,
    /// Offset of this chunk in the message.
    pub offset: AtomicU64,
    /// Bytes in this chunk.
    pub len: AtomicU64,
    /// Unused.
    pub reserved: [AtomicU64; 3],
}

const _: () = assert!(std::mem::size_of::<SlotHeader>() == 64);

/// Offsets of the parts of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// FIFO slots.
    pub nslots: usize,
    /// Bytes per FIFO slot (in device memory; recorded here for checks).
    pub chunk: usize,
    /// Handshake slots.
    pub nreg: usize,
    /// Revocation entries.
    pub nrevoke: usize,
    /// Offset of the `SlotHeader` array.
    pub slots_off: usize,
    /// Offset of the `RegSlot` array.
    pub reg_off: usize,
    /// Offset of the `RevokeEntry` array.
    pub rev_off: usize,
    /// Segment size (page multiple).
    pub total: usize,
}

const PAGE: usize = 4096;

impl Layout {
    /// The layout for `nslots` FIFO slots of `chunk` bytes with the default
    /// handshake and revocation counts.
    pub fn new(nslots: usize, chunk: usize) -> PluginResult<Self> {
        Self::with_counts(nslots, chunk, NREG, NREVOKE)
    }

    /// As [`new`](Self::new) with explicit counts (as read from a blob).
    pub fn with_counts(
        nslots: usize,
        chunk: usize,
        nreg: usize,
        nrevoke: usize,
    ) -> PluginResult<Self> {
        if nslots == 0 || nslots > 4096 || chunk == 0 || nreg == 0 || nreg > 4096 {
            return Err(PluginError::invalid(format!(
                "bad p2p FIFO geometry: {nslots} slots of {chunk} bytes, {nreg} handshake slots"
            )));
        }
        if nrevoke == 0 || nrevoke > 4096 {
            return Err(PluginError::invalid(format!(
                "bad p2p revocation ring of {nrevoke} entries"
            )));
        }
        let slots_off = std::mem::size_of::<SegHeader>();
        let reg_off =
            (slots_off + nslots * std::mem::size_of::<SlotHeader>()).next_multiple_of(128);
        let rev_off = reg_off + nreg * std::mem::size_of::<RegSlot>();
        let total = (rev_off + nrevoke * std::mem::size_of::<RevokeEntry>()).next_multiple_of(PAGE);
        Ok(Layout {
            nslots,
            chunk,
            nreg,
            nrevoke,
            slots_off,
            reg_off,
            rev_off,
            total,
        })
    }

    /// Offset of FIFO slot `i`'s bytes in the device FIFO.
    pub fn fifo_off(&self, i: usize) -> u64 {
        (i * self.chunk) as u64
    }

    /// Bytes of the device FIFO.
    pub fn fifo_bytes(&self) -> usize {
        self.nslots * self.chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_aligned_and_disjoint() {
        assert_eq!(std::mem::align_of::<SegHeader>(), 128);
        let l = Layout::new(8, 1 << 20).unwrap();
        assert_eq!(l.slots_off, 512);
        assert_eq!(l.reg_off % 128, 0);
        assert!(l.reg_off >= l.slots_off + 8 * 64);
        assert_eq!(l.rev_off, l.reg_off + NREG * 128);
        assert!(l.total >= l.rev_off + NREVOKE * 64 && l.total.is_multiple_of(PAGE));
        assert_eq!(l.fifo_off(7) + l.chunk as u64, l.fifo_bytes() as u64);
        assert!(Layout::new(0, 64).is_err());
        assert!(Layout::with_counts(2, 64, 0, 1).is_err());
        assert!(Layout::with_counts(2, 64, 1, 0).is_err());
        let h = SegHeader::default();
        assert!(!h.matches(&l));
        h.init(&l, 1, 0xdead);
        assert!(h.matches(&l));
        assert!(!h.matches(&Layout::new(4, 1 << 20).unwrap()));
        assert_eq!(h.info.0.fifo_addr.load(Ordering::Relaxed), 0xdead);
    }
}
