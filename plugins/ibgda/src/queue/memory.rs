//! What a ring's memory must offer: whole 8-byte words. A GPU writes the same
//! memory concurrently, so every access is one aligned word (never torn) and the
//! ordering of stamps and bodies is carried by acquire loads and release stores.

use super::{get_u64, put_u64};

/// Memory a ring lives in, accessed as little-endian u64 words at 8-byte aligned offsets.
pub trait QueueMemory {
    /// Size in bytes.
    fn len_bytes(&self) -> usize;
    /// The word at `at` (8-aligned), with acquire ordering where the memory is shared.
    fn load(&self, at: usize) -> u64;
    /// Writes the word at `at` (8-aligned), with release ordering where shared.
    fn store(&mut self, at: usize, v: u64);
}

/// Plain bytes: the model both sides' logic is tested on (nothing shared, so no
/// ordering to give).
impl QueueMemory for [u8] {
    fn len_bytes(&self) -> usize {
        self.len()
    }

    fn load(&self, at: usize) -> u64 {
        debug_assert!(at.is_multiple_of(8), "unaligned word at {at}");
        get_u64(self, at)
    }

    fn store(&mut self, at: usize, v: u64) {
        debug_assert!(at.is_multiple_of(8), "unaligned word at {at}");
        put_u64(self, at, v);
    }
}

impl QueueMemory for Vec<u8> {
    fn len_bytes(&self) -> usize {
        self.len()
    }

    fn load(&self, at: usize) -> u64 {
        self.as_slice().load(at)
    }

    fn store(&mut self, at: usize, v: u64) {
        self.as_mut_slice().store(at, v);
    }
}
