//! Byte layout of one connection's shared segment (created by the receiver,
//! mapped by the sender).
//!
//! ```text
//! 0          SegHeader: info line | tail line (receiver) | revoke head line (receiver) | revoke tail line (sender)
//! slots_off  nslots × SlotHeader (64 B)     stamp, seq, total, offset, len, inline bytes of the chunk in FIFO slot i
//! reg_off    nreg × RegSlot (64 or 128 B)   the direct-copy handshake (P2pRegInfo + the back end's target)
//! rev_off    nrevoke × RevokeEntry (64 B)   handles the receiver withdrew (back ends with revocations)
//! data_off   nslots × chunk                 the FIFO's bytes, when the back end keeps them here (page aligned)
//! ```
//!
//! Words one process writes and the other polls sit on their own 128-byte
//! lines, so the two processes never write the same cache line (or its
//! prefetch pair).

use crate::device::HANDLE_BYTES;
use crate::error::{PluginError, PluginResult};
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies a ferrocx same-host segment ("FXSEGMNT").
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"FXSEGMNT");
/// Bumped whenever the layout or protocol changes.
pub const SEG_VERSION: u64 = 2;

/// `sender_state` / `receiver_state`: the side is connected and working.
pub const STATE_OPEN: u64 = 0;
/// The side freed the connection with nothing outstanding (the sender: and
/// closed every mapping of the receiver's memory).
pub const STATE_CLOSED: u64 = 1;
/// The side failed or freed the connection with requests outstanding.
pub const STATE_FAILED: u64 = 2;

/// Payload bytes a chunk may carry inside its slot header (back ends whose
/// buffers the CPU reads: a small message then costs one cache line).
pub const INLINE_BYTES: usize = 24;

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
    /// The transport that made it ([`owner_tag`] of its name).
    pub owner: AtomicU64,
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
    /// Process id of the receiver.
    pub creator_pid: AtomicU64,
    /// Non-zero (the sender's pid, at least 1) once the sender mapped the segment.
    pub sender_attached: AtomicU64,
    /// `STATE_*` of the sending side.
    pub sender_state: AtomicU64,
    /// `STATE_*` of the receiving side.
    pub receiver_state: AtomicU64,
    /// The FIFO's address in the receiver's process. Meaningful only to a
    /// sender in the same process; others open the FIFO's handle or map this
    /// segment.
    pub fifo_addr: AtomicU64,
    /// Address, in the receiver's process, of a token a sender that writes
    /// into that process reads back first (shm's `process_vm_readv`): proof
    /// that the pid it was given is really the receiver, not a namesake in
    /// another pid namespace.
    pub probe_addr: AtomicU64,
    /// The token's value.
    pub probe_value: AtomicU64,
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

/// A transport name as the segment's owner word (its first 8 bytes).
pub fn owner_tag(name: &str) -> u64 {
    let mut b = [0u8; 8];
    let n = name.len().min(8);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    u64::from_le_bytes(b)
}

/// What the creator records about itself besides the geometry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Creator {
    /// [`owner_tag`] of the transport.
    pub owner: u64,
    /// The receiver's pid.
    pub pid: u32,
    /// Where the FIFO lies in the receiver's process.
    pub fifo_addr: u64,
    /// The identity token's address and value (see [`SegInfo::probe_addr`]).
    pub probe: (u64, u64),
}

impl SegHeader {
    /// Creator: record the geometry; the magic goes last (Release).
    pub fn init(&self, layout: &Layout, c: &Creator) {
        let i = &self.info.0;
        i.version.store(SEG_VERSION, Ordering::Relaxed);
        i.owner.store(c.owner, Ordering::Relaxed);
        i.nslots.store(layout.nslots as u64, Ordering::Relaxed);
        i.chunk.store(layout.chunk as u64, Ordering::Relaxed);
        i.nreg.store(layout.nreg as u64, Ordering::Relaxed);
        i.nrevoke.store(layout.nrevoke as u64, Ordering::Relaxed);
        i.total.store(layout.total as u64, Ordering::Relaxed);
        i.creator_pid.store(c.pid as u64, Ordering::Relaxed);
        i.fifo_addr.store(c.fifo_addr, Ordering::Relaxed);
        i.probe_addr.store(c.probe.0, Ordering::Relaxed);
        i.probe_value.store(c.probe.1, Ordering::Relaxed);
        i.magic.store(SEG_MAGIC, Ordering::Release);
    }

    /// Whether the header describes exactly `layout` for `owner` (the peer's
    /// blob and its segment agree).
    pub fn matches(&self, layout: &Layout, owner: u64) -> bool {
        let i = &self.info.0;
        i.magic.load(Ordering::Acquire) == SEG_MAGIC
            && i.version.load(Ordering::Relaxed) == SEG_VERSION
            && i.owner.load(Ordering::Relaxed) == owner
            && i.nslots.load(Ordering::Relaxed) == layout.nslots as u64
            && i.chunk.load(Ordering::Relaxed) == layout.chunk as u64
            && i.nreg.load(Ordering::Relaxed) == layout.nreg as u64
            && i.nrevoke.load(Ordering::Relaxed) == layout.nrevoke as u64
            && i.total.load(Ordering::Relaxed) == layout.total as u64
    }
}

/// Header of FIFO slot i: describes the chunk whose bytes are in slot i of
/// the FIFO. Exactly one cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct SlotHeader {
    /// Chunk number + 1 once the chunk's bytes landed (Release); the receiver
    /// polls it, so a chunk is announced in the line that describes it.
    pub stamp: AtomicU64,
    /// Message sequence number (1-based).
    pub seq: AtomicU64,
    /// Total length of the message.
    pub total: AtomicU64,
    /// Offset of this chunk in the message.
    pub offset: AtomicU64,
    /// Bytes in this chunk.
    pub len: AtomicU64,
    /// The payload of a chunk of at most [`INLINE_BYTES`] (little-endian
    /// words), for back ends that carry small chunks inline.
    pub inline: [AtomicU64; INLINE_BYTES / 8],
}

const _: () = assert!(std::mem::size_of::<SlotHeader>() == 64);

/// The receiver's revocation words: published revocations and the flush generation.
#[repr(C)]
#[derive(Debug, Default)]
pub struct RevokeHead {
    /// Revocations published (entry `n % nrevoke` holds number `n`).
    pub head: AtomicU64,
    /// Bumped when revocations were lost to a full ring: drop every mapping.
    pub flush: AtomicU64,
}

/// One revoked handle.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct RevokeEntry {
    /// The handle (little-endian words).
    pub handle: [AtomicU64; HANDLE_BYTES / 8],
}

/// Offsets of the parts of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// FIFO slots.
    pub nslots: usize,
    /// Bytes per FIFO slot.
    pub chunk: usize,
    /// Handshake slots.
    pub nreg: usize,
    /// Revocation entries (0: the back end never revokes).
    pub nrevoke: usize,
    /// Offset of the `SlotHeader` array.
    pub slots_off: usize,
    /// Offset of the `RegSlot` array.
    pub reg_off: usize,
    /// Bytes of one `RegSlot`.
    pub reg_bytes: usize,
    /// Offset of the `RevokeEntry` array.
    pub rev_off: usize,
    /// Offset of the FIFO's bytes (page aligned), when they are in the segment.
    pub data_off: Option<usize>,
    /// Segment size (page multiple).
    pub total: usize,
}

const PAGE: usize = 4096;
/// Upper bound of every count (a peer's blob cannot make us map absurd sizes).
const MAX_COUNT: usize = 4096;

impl Layout {
    /// The layout for `nslots` FIFO slots of `chunk` bytes, `nreg` handshake
    /// slots of `reg_bytes`, `nrevoke` revocation entries, the FIFO's bytes
    /// in the segment or not.
    pub fn new(
        nslots: usize,
        chunk: usize,
        nreg: usize,
        reg_bytes: usize,
        nrevoke: usize,
        fifo_in_segment: bool,
    ) -> PluginResult<Self> {
        if !(1..=MAX_COUNT).contains(&nslots)
            || chunk == 0
            || !chunk.is_multiple_of(64)
            || !(1..=MAX_COUNT).contains(&nreg)
            || nrevoke > MAX_COUNT
        {
            return Err(PluginError::invalid(format!(
                "bad FIFO geometry: {nslots} slots of {chunk} bytes, {nreg} handshake slots, {nrevoke} revocation entries"
            )));
        }
        let slots_off = std::mem::size_of::<SegHeader>();
        let reg_off =
            (slots_off + nslots * std::mem::size_of::<SlotHeader>()).next_multiple_of(128);
        let rev_off = reg_off + nreg * reg_bytes;
        let end = rev_off + nrevoke * std::mem::size_of::<RevokeEntry>();
        let (data_off, total) = if fifo_in_segment {
            let data_off = end.next_multiple_of(PAGE);
            let total = nslots
                .checked_mul(chunk)
                .and_then(|d| d.checked_add(data_off))
                .map(|t| t.next_multiple_of(PAGE))
                .ok_or_else(|| PluginError::invalid("FIFO geometry overflows"))?;
            (Some(data_off), total)
        } else {
            (None, end.next_multiple_of(PAGE))
        };
        Ok(Layout {
            nslots,
            chunk,
            nreg,
            nrevoke,
            slots_off,
            reg_off,
            reg_bytes,
            rev_off,
            data_off,
            total,
        })
    }

    /// Offset of FIFO slot `i`'s bytes from the FIFO's start.
    pub fn fifo_off(&self, i: usize) -> u64 {
        (i * self.chunk) as u64
    }

    /// Bytes of the FIFO.
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
        let l = Layout::new(8, 1 << 20, 32, 128, 32, false).unwrap();
        assert_eq!(l.slots_off, 512);
        assert_eq!(l.reg_off % 128, 0);
        assert!(l.reg_off >= l.slots_off + 8 * 64);
        assert_eq!(l.rev_off, l.reg_off + 32 * 128);
        assert!(l.total >= l.rev_off + 32 * 64 && l.total.is_multiple_of(PAGE));
        assert_eq!(l.data_off, None);
        assert_eq!(l.fifo_off(7) + l.chunk as u64, l.fifo_bytes() as u64);

        let h = Layout::new(8, 512 << 10, 32, 64, 0, true).unwrap();
        let d = h.data_off.unwrap();
        assert!(d.is_multiple_of(PAGE) && d >= h.rev_off);
        assert_eq!(h.total, d + 8 * (512 << 10));

        assert!(Layout::new(0, 64, 1, 64, 0, true).is_err());
        assert!(Layout::new(2, 100, 1, 64, 0, true).is_err());
        assert!(Layout::new(2, 64, 0, 64, 1, false).is_err());
        assert!(Layout::new(2, 64, 1, 64, 5000, false).is_err());

        let hdr = SegHeader::default();
        let me = owner_tag("p2p");
        assert!(!hdr.matches(&l, me));
        let c = Creator {
            owner: me,
            pid: 1,
            fifo_addr: 0xdead,
            probe: (1, 2),
        };
        hdr.init(&l, &c);
        assert!(hdr.matches(&l, me));
        assert!(
            !hdr.matches(&l, owner_tag("shm")),
            "another transport's segment"
        );
        assert!(!hdr.matches(&Layout::new(4, 1 << 20, 32, 128, 32, false).unwrap(), me));
        assert_eq!(hdr.info.0.fifo_addr.load(Ordering::Relaxed), 0xdead);
    }
}
