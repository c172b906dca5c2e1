//! The ring shared by request and completion queues: indices in the header,
//! stamped entries, full and not-yet-visible detection.

use super::{
    get_u32, get_u64, put_u32, put_u64, QueueError, CONSUMER_INDEX, ENTRY_STAMP, HEADER_BYTES,
    MAX_SLOTS, PRODUCER_INDEX, RING_ENTRY_BYTES, RING_SLOTS,
};

/// The shape of one ring: slot count and entry size. Holds no memory; every
/// operation takes the ring's bytes, as both sides of shared memory would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring {
    slots: u32,
    entry: usize,
}

impl Ring {
    /// A ring of `slots` entries (a power of two, at most [`MAX_SLOTS`]) of
    /// `entry` bytes (a multiple of 16, so entries stay 16-byte aligned for the
    /// GPU's vector stores, and at least 16).
    pub fn new(slots: u32, entry: usize) -> Result<Ring, QueueError> {
        if !slots.is_power_of_two() || slots > MAX_SLOTS {
            return Err(QueueError::BadSlots(slots));
        }
        if entry < 16 || !entry.is_multiple_of(16) || entry > u32::MAX as usize {
            return Err(QueueError::BadEntrySize(entry));
        }
        Ok(Ring { slots, entry })
    }

    /// Slot count.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Entry size in bytes.
    pub fn entry_bytes(&self) -> usize {
        self.entry
    }

    /// Bytes the ring occupies: header and entries.
    pub fn bytes(&self) -> usize {
        HEADER_BYTES + self.slots as usize * self.entry
    }

    /// Byte offset of entry `index` (its slot) in the ring.
    pub fn offset_of(&self, index: u64) -> usize {
        HEADER_BYTES + (index % u64::from(self.slots)) as usize * self.entry
    }

    /// Sets up `mem` as an empty ring: zeroes it and writes the shape.
    pub fn init(&self, mem: &mut [u8]) -> Result<(), QueueError> {
        self.check_len(mem)?;
        mem.fill(0);
        put_u32(mem, RING_SLOTS, self.slots);
        put_u32(mem, RING_ENTRY_BYTES, self.entry as u32);
        Ok(())
    }

    /// `(producer, consumer)` indices, checked: the shape in the header matches,
    /// the consumer is not ahead of the producer and at most `slots` behind.
    pub fn indices(&self, mem: &[u8]) -> Result<(u64, u64), QueueError> {
        self.check_len(mem)?;
        let (slots, entry) = (get_u32(mem, RING_SLOTS), get_u32(mem, RING_ENTRY_BYTES));
        if slots != self.slots || entry as usize != self.entry {
            return Err(QueueError::LayoutMismatch {
                header_slots: slots,
                header_entry_bytes: entry,
                slots: self.slots,
                entry_bytes: self.entry,
            });
        }
        let p = get_u64(mem, PRODUCER_INDEX);
        let c = get_u64(mem, CONSUMER_INDEX);
        if c > p || p - c > u64::from(self.slots) {
            return Err(QueueError::IndicesCorrupt {
                producer: p,
                consumer: c,
                slots: self.slots,
            });
        }
        Ok((p, c))
    }

    /// Entries published and not yet taken.
    pub fn used(&self, mem: &[u8]) -> Result<u64, QueueError> {
        let (p, c) = self.indices(mem)?;
        Ok(p - c)
    }

    /// Producer side: writes `entry` (its stamp bytes are ignored) into the next
    /// slot, then its stamp, then advances the producer index; returns the
    /// entry's index. Refused with [`QueueError::Full`] while every slot holds an
    /// entry the consumer has not taken.
    pub fn push(&self, mem: &mut [u8], entry: &[u8]) -> Result<u64, QueueError> {
        self.check_entry(entry)?;
        let (p, c) = self.indices(mem)?;
        if p - c == u64::from(self.slots) {
            return Err(QueueError::Full {
                slots: self.slots,
                producer: p,
                consumer: c,
            });
        }
        let at = self.offset_of(p);
        // Body first, stamp last (a fence sits between them on the GPU): the
        // stamp is what makes the entry visible.
        mem[at + 8..at + self.entry].copy_from_slice(&entry[8..]);
        put_u64(mem, at + ENTRY_STAMP, p + 1);
        put_u64(mem, PRODUCER_INDEX, p + 1);
        Ok(p)
    }

    /// Consumer side: copies the next entry into `out` and advances the consumer
    /// index, returning the entry's index; `None` when there is none yet (empty,
    /// or published but its stamp not yet visible).
    pub fn pop(&self, mem: &mut [u8], out: &mut [u8]) -> Result<Option<u64>, QueueError> {
        self.check_entry(out)?;
        let (p, c) = self.indices(mem)?;
        if p == c {
            return Ok(None);
        }
        let at = self.offset_of(c);
        let stamp = get_u64(mem, at + ENTRY_STAMP);
        if stamp != c + 1 {
            // An older lap's stamp (or zero) is a write still in progress; a
            // newer one means the producer overwrote an entry not yet taken.
            if stamp > c + 1 {
                return Err(QueueError::StampAhead { index: c, stamp });
            }
            return Ok(None);
        }
        out.copy_from_slice(&mem[at..at + self.entry]);
        put_u64(mem, CONSUMER_INDEX, c + 1);
        Ok(Some(c))
    }

    fn check_len(&self, mem: &[u8]) -> Result<(), QueueError> {
        if mem.len() != self.bytes() {
            return Err(QueueError::WrongLength {
                expected: self.bytes(),
                got: mem.len(),
            });
        }
        Ok(())
    }

    fn check_entry(&self, entry: &[u8]) -> Result<(), QueueError> {
        if entry.len() != self.entry {
            return Err(QueueError::WrongEntryLength {
                expected: self.entry,
                got: entry.len(),
            });
        }
        Ok(())
    }
}
