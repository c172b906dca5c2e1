//! Byte layout of one connection's shared segment.
//!
//! ```text
//! 0                 SegHeader: info line | head line (sender) | tail line (receiver)
//! reg_off           NREG × RegSlot (64 B each)            the single-copy handshake
//! slots_off         nslots × SlotHeader (64 B each)       stamp, seq, total, offset, len, inline payload
//! data_off (4 KiB)  nslots × chunk                        ring payload
//! ```
//!
//! The producer and consumer counters sit on separate 128-byte lines so the
//! two processes never write the same cache line (or its prefetch pair).

use crate::regslot::{RegSlot, NREG};
use ferrocx_sdk::{PluginError, PluginResult};
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies a ferrocx shm segment ("FXSHMSEG").
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"FXSHMSEG");
/// Bumped whenever the layout or protocol changes.
pub const SEG_VERSION: u64 = 1;

/// `sender_state` / `receiver_state`: the side is connected and working.
pub const STATE_OPEN: u64 = 0;
/// The side freed the connection with nothing outstanding.
pub const STATE_CLOSED: u64 = 1;
/// The side failed or freed the connection with requests outstanding.
pub const STATE_FAILED: u64 = 2;

/// A value alone on its 128-byte line.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

/// Read-mostly facts about the segment, written once by its creator
/// (except the rarely written attach and state words).
#[repr(C)]
#[derive(Debug, Default)]
pub struct SegInfo {
    /// [`SEG_MAGIC`].
    pub magic: AtomicU64,
    /// [`SEG_VERSION`].
    pub version: AtomicU64,
    /// Ring slots.
    pub nslots: AtomicU64,
    /// Bytes per ring slot.
    pub chunk: AtomicU64,
    /// Handshake slots.
    pub nreg: AtomicU64,
    /// Total segment bytes.
    pub total: AtomicU64,
    /// Process id of the creator (the receiver).
    pub creator_pid: AtomicU64,
    /// Non-zero (the sender's pid, at least 1) once the sender has mapped the segment.
    pub sender_attached: AtomicU64,
    /// `STATE_*` of the sending side.
    pub sender_state: AtomicU64,
    /// `STATE_*` of the receiving side.
    pub receiver_state: AtomicU64,
    /// Address, in the receiver's process, of a token the sender reads back
    /// with `process_vm_readv` before its first direct copy: proof that the
    /// pid it was given is really the receiver (not a namesake in another pid
    /// namespace) before writing into that process.
    pub probe_addr: AtomicU64,
    /// The token's value.
    pub probe_value: AtomicU64,
}

/// The segment header.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SegHeader {
    /// Geometry and attach/close words.
    pub info: Padded<SegInfo>,
    /// Chunks published by the sender (Release after the slot is filled).
    pub head: Padded<AtomicU64>,
    /// Chunks consumed by the receiver (Release after the slot was copied out).
    pub tail: Padded<AtomicU64>,
}

impl SegHeader {
    /// Creator: record the geometry; the magic goes last (Release).
    pub fn init(&self, layout: &Layout, creator_pid: u32, probe_addr: u64, probe_value: u64) {
        let i = &self.info.0;
        i.probe_addr.store(probe_addr, Ordering::Relaxed);
        i.probe_value.store(probe_value, Ordering::Relaxed);
        i.version.store(SEG_VERSION, Ordering::Relaxed);
        i.nslots.store(layout.nslots as u64, Ordering::Relaxed);
        i.chunk.store(layout.chunk as u64, Ordering::Relaxed);
        i.nreg.store(layout.nreg as u64, Ordering::Relaxed);
        i.total.store(layout.total as u64, Ordering::Relaxed);
        i.creator_pid.store(creator_pid as u64, Ordering::Relaxed);
        i.magic.store(SEG_MAGIC, Ordering::Release);
    }

    /// Whether the header describes exactly `layout` (a peer's blob and its segment agree).
    pub fn matches(&self, layout: &Layout) -> bool {
        let i = &self.info.0;
        i.magic.load(Ordering::Acquire) == SEG_MAGIC
            && i.version.load(Ordering::Relaxed) == SEG_VERSION
            && i.nslots.load(Ordering::Relaxed) == layout.nslots as u64
            && i.chunk.load(Ordering::Relaxed) == layout.chunk as u64
            && i.nreg.load(Ordering::Relaxed) == layout.nreg as u64
            && i.total.load(Ordering::Relaxed) == layout.total as u64
    }
}

/// Bytes of payload carried inside the slot header itself (small messages
/// then cost the receiver one cache line instead of two or three).
pub const INLINE: usize = 24;

/// Header of one ring slot, describing the chunk it holds. Exactly one cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct SlotHeader {
    /// Chunk number + 1 once the chunk is published (Release); the receiver
    /// polls this word, so a message is announced in the line that describes it.
    pub stamp: AtomicU64,
    /// Message sequence number (1-based).
    pub seq: AtomicU64,
    /// Total length of the message.
    pub total: AtomicU64,
    /// Offset of this chunk in the message.
    pub offset: AtomicU64,
    /// Bytes in this chunk.
    pub len: AtomicU64,
    /// The payload of chunks of at most [`INLINE`] bytes (little-endian words).
    pub inline: [AtomicU64; INLINE / 8],
}

const _: () = assert!(
    std::mem::size_of::<SlotHeader>() == 64,
    "a slot header is one cache line"
);

/// Offsets of the parts of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Ring slots.
    pub nslots: usize,
    /// Bytes per slot.
    pub chunk: usize,
    /// Handshake slots.
    pub nreg: usize,
    /// Offset of the `RegSlot` array.
    pub reg_off: usize,
    /// Offset of the `SlotHeader` array.
    pub slots_off: usize,
    /// Offset of the payload (page aligned).
    pub data_off: usize,
    /// Segment size (page multiple).
    pub total: usize,
}

const PAGE: usize = 4096;

impl Layout {
    /// The layout for `nslots` slots of `chunk` bytes and [`NREG`] handshake slots.
    pub fn new(nslots: usize, chunk: usize) -> PluginResult<Self> {
        Self::with_nreg(nslots, chunk, NREG)
    }

    /// As [`new`](Self::new) with an explicit handshake slot count (as read from a blob).
    pub fn with_nreg(nslots: usize, chunk: usize, nreg: usize) -> PluginResult<Self> {
        if nslots == 0 || chunk == 0 || !chunk.is_multiple_of(64) || nreg == 0 {
            return Err(PluginError::invalid(format!(
                "bad shm ring geometry: {nslots} slots of {chunk} bytes, {nreg} handshake slots"
            )));
        }
        let reg_off = std::mem::size_of::<SegHeader>();
        let slots_off = reg_off + nreg * std::mem::size_of::<RegSlot>();
        let data_off =
            (slots_off + nslots * std::mem::size_of::<SlotHeader>()).next_multiple_of(PAGE);
        let total = nslots
            .checked_mul(chunk)
            .and_then(|d| d.checked_add(data_off))
            .map(|t| t.next_multiple_of(PAGE))
            .ok_or_else(|| PluginError::invalid("shm ring geometry overflows"))?;
        Ok(Layout {
            nslots,
            chunk,
            nreg,
            reg_off,
            slots_off,
            data_off,
            total,
        })
    }

    /// Offset of slot `i`'s payload.
    pub fn slot_data_off(&self, i: usize) -> usize {
        self.data_off + i * self.chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_aligned_and_disjoint() {
        assert_eq!(std::mem::size_of::<SegHeader>(), 384);
        assert_eq!(std::mem::align_of::<SegHeader>(), 128);
        let l = Layout::new(8, 512 * 1024).unwrap();
        assert_eq!(l.reg_off % 128, 0);
        assert_eq!(l.slots_off, l.reg_off + NREG * 64);
        assert_eq!(l.data_off % 4096, 0);
        assert!(l.data_off >= l.slots_off + 8 * 64);
        assert_eq!(l.slot_data_off(7) + l.chunk, l.data_off + 8 * 512 * 1024);
        assert!(l.total >= l.slot_data_off(7) + l.chunk && l.total.is_multiple_of(4096));
        assert!(Layout::new(0, 64).is_err());
        assert!(Layout::new(2, 100).is_err());
        let h = SegHeader::default();
        assert!(!h.matches(&l));
        h.init(&l, 1, 0, 0);
        assert!(h.matches(&l));
        assert!(!h.matches(&Layout::new(4, 512 * 1024).unwrap()));
    }
}
