//! The ring shared by request and completion queues: indices in the header,
//! stamped entries, full and not-yet-visible detection. Every access to the
//! ring's memory is one whole word ([`QueueMemory`]).

use super::{
    get_u64, put_u64, QueueError, QueueMemory, CONSUMER_INDEX, ENTRY_STAMP, HEADER_BYTES,
    MAX_SLOTS, PRODUCER_INDEX, RING_ENTRY_BYTES, RING_SLOTS,
};

// Slots and entry size are read and written as the one word at RING_SLOTS.
const _: () = assert!(RING_SLOTS.is_multiple_of(8) && RING_ENTRY_BYTES == RING_SLOTS + 4);

/// The shape of one ring: slot count and entry size. Holds no memory; every
/// operation takes the ring's memory, as both sides of shared memory would.
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
    pub fn init(&self, mem: &mut (impl QueueMemory + ?Sized)) -> Result<(), QueueError> {
        self.check_len(mem)?;
        for at in (0..self.bytes()).step_by(8) {
            mem.store(at, 0);
        }
        // The shape last: whoever sees it sees the zeroed ring.
        mem.store(
            RING_SLOTS,
            u64::from(self.slots) | (self.entry as u64) << 32,
        );
        Ok(())
    }

    /// `(producer, consumer)` indices, checked: the shape in the header matches,
    /// the consumer is not ahead of the producer and at most `slots` behind.
    /// (A request ring's producer index is kept only by producers that choose
    /// to; its consumer goes by stamps, [`Ring::pop_stamped`].)
    pub fn indices(&self, mem: &(impl QueueMemory + ?Sized)) -> Result<(u64, u64), QueueError> {
        self.check_shape(mem)?;
        let p = mem.load(PRODUCER_INDEX);
        let c = mem.load(CONSUMER_INDEX);
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
    pub fn used(&self, mem: &(impl QueueMemory + ?Sized)) -> Result<u64, QueueError> {
        let (p, c) = self.indices(mem)?;
        Ok(p - c)
    }

    /// Producer side: writes `entry` (its stamp bytes are ignored) into the next
    /// slot, then its stamp, then advances the producer index; returns the
    /// entry's index. Refused with [`QueueError::Full`] while every slot holds an
    /// entry the consumer has not taken.
    pub fn push(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
        entry: &[u8],
    ) -> Result<u64, QueueError> {
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
        // Body words first, stamp last (released; a fence sits between them on
        // the GPU): the stamp is what makes the entry visible.
        for k in (ENTRY_STAMP + 8..self.entry).step_by(8) {
            mem.store(at + k, get_u64(entry, k));
        }
        mem.store(at + ENTRY_STAMP, p + 1);
        mem.store(PRODUCER_INDEX, p + 1);
        Ok(p)
    }

    /// Consumer side of a ring whose producer keeps the producer index (a
    /// completion ring): copies the next entry into `out` and advances the
    /// consumer index, returning the entry's index; `None` when there is none
    /// yet (empty, or published but its stamp not yet visible).
    pub fn pop(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
        out: &mut [u8],
    ) -> Result<Option<u64>, QueueError> {
        self.check_entry(out)?;
        let (p, c) = self.indices(mem)?;
        if p == c {
            return Ok(None);
        }
        self.take(mem, c, out)
    }

    /// Consumer side of a ring published by stamps alone (a request ring: GPU
    /// producers do not keep its producer index, since atomics on host memory
    /// across PCIe are not portable): takes entry `c`, the consumer index, once
    /// its slot's stamp says `c + 1`, whatever the producer index word holds.
    pub fn pop_stamped(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
        out: &mut [u8],
    ) -> Result<Option<u64>, QueueError> {
        self.check_entry(out)?;
        self.check_shape(mem)?;
        let c = mem.load(CONSUMER_INDEX);
        self.take(mem, c, out)
    }

    /// Takes entry `c` if its stamp has landed: the stamp word is loaded
    /// (acquired) before the body words, and the slot handed back after them.
    fn take(
        &self,
        mem: &mut (impl QueueMemory + ?Sized),
        c: u64,
        out: &mut [u8],
    ) -> Result<Option<u64>, QueueError> {
        // No stamp can say u64::MAX + 1: a consumer index that high has no entry.
        let Some(want) = c.checked_add(1) else {
            return Ok(None);
        };
        let at = self.offset_of(c);
        let stamp = mem.load(at + ENTRY_STAMP);
        if stamp != want {
            // An older lap's stamp (or zero) is a write still in progress; a
            // newer one means the producer overwrote an entry not yet taken.
            if stamp > want {
                return Err(QueueError::StampAhead { index: c, stamp });
            }
            return Ok(None);
        }
        put_u64(out, ENTRY_STAMP, stamp);
        for k in (ENTRY_STAMP + 8..self.entry).step_by(8) {
            put_u64(out, k, mem.load(at + k));
        }
        mem.store(CONSUMER_INDEX, want);
        Ok(Some(c))
    }

    /// The length and the shape in the header are this ring's.
    fn check_shape(&self, mem: &(impl QueueMemory + ?Sized)) -> Result<(), QueueError> {
        self.check_len(mem)?;
        let shape = mem.load(RING_SLOTS);
        let (slots, entry) = (shape as u32, (shape >> 32) as u32);
        if slots != self.slots || entry as usize != self.entry {
            return Err(QueueError::LayoutMismatch {
                header_slots: slots,
                header_entry_bytes: entry,
                slots: self.slots,
                entry_bytes: self.entry,
            });
        }
        Ok(())
    }

    fn check_len(&self, mem: &(impl QueueMemory + ?Sized)) -> Result<(), QueueError> {
        if mem.len_bytes() != self.bytes() {
            return Err(QueueError::WrongLength {
                expected: self.bytes(),
                got: mem.len_bytes(),
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
