//! The work queue a GPU thread writes and a host proxy thread consumes, and the
//! completion queue the proxy writes back: byte layouts and ring arithmetic over
//! any [`QueueMemory`], sans-IO.
//!
//! One request queue (and its completion queue) exists per (rank, peer, path): the
//! mlx5 handler needs one per QP, and the proxy handler reads the same format. A
//! ring lives in [`QueueMemory`]: in the plugin, pinned host memory a GPU writes
//! concurrently; in the tests, plain byte slices. The ring is touched only as
//! whole little-endian 8-byte words (a GPU's stores and the host's loads of one
//! aligned word are not torn), with acquire loads and release stores where the
//! memory is shared, so both sides' logic is testable without `unsafe`.
//!
//! # Layout (every integer little-endian)
//!
//! A ring ([`Ring`]) is a header of [`HEADER_BYTES`] followed by `slots` entries:
//!
//! | offset | field | written by |
//! |---|---|---|
//! | [`PRODUCER_INDEX`] (0) | u64 producer index: entries ever published | a completion ring's producer (not the GPU on a request ring) |
//! | [`RING_SLOTS`] (8) | u32 slot count (power of two) | [`Ring::init`] |
//! | [`RING_ENTRY_BYTES`] (12) | u32 entry size | [`Ring::init`] |
//! | [`CONSUMER_INDEX`] (64) | u64 consumer index: entries ever taken | consumer |
//!
//! Slot count and entry size form the one word at 8. The two indices sit on
//! separate 64-byte lines because each side writes only its own and polls the
//! other's. Entry `i` lives in slot `i mod slots`. Its first 8 bytes
//! ([`ENTRY_STAMP`]) hold `i + 1`, written **last**, after the body (a fence on
//! the GPU, a release store here): consumers go by stamps, taking entry `i`
//! only when the stamp says `i + 1`, so a record still being written (stale
//! stamp of the previous lap, or zero in fresh memory) is never consumed. The
//! indices are u64 and never wrap (584 years at one entry per nanosecond);
//! slots wrap every lap.
//!
//! The request ring's producer index is **not maintained by the GPU** (atomics
//! on host memory across PCIe are not portable; GPU threads claim indices on a
//! counter in device memory): its consumer ([`RequestQueue::pop`],
//! [`Ring::pop_stamped`]) reads only the stamp at its own consumer index. A
//! completion ring's producer (the proxy) keeps its producer index, which
//! [`CompletionQueue::pop`] also checks.
//!
//! Full: the producer refuses when `producer - consumer == slots`
//! ([`QueueError::Full`]; on the GPU, its claim counter stands for the producer
//! index). The proxy additionally takes a request only while its queue owes
//! fewer than `ProxyConfig::max_owed` completions, so completions never pile up
//! unboundedly on the host.
//!
//! * [`record`]: request entries ([`WorkRecord`], [`RECORD_BYTES`] = 64);
//! * [`completion`]: completion entries ([`CqEntry`], [`CQE_BYTES`] = 32).

pub mod completion;
mod error;
mod memory;
pub mod record;
mod ring;

#[cfg(test)]
mod tests;

pub use completion::{CompletionQueue, CqEntry, CqStatus, PathSet, CQE_BYTES};
pub use error::{DecodeError, QueueError};
pub use memory::QueueMemory;
pub use record::{RequestQueue, SignalOp, Transfer, WorkRecord, RECORD_BYTES};
pub use ring::Ring;

/// Bytes of a ring's header; entries start here.
pub const HEADER_BYTES: usize = 128;
/// u64 at 0: the producer index (entries published so far; not kept on a
/// request ring by the GPU).
pub const PRODUCER_INDEX: usize = 0;
/// u32 at 8: the slot count, written at setup so both sides can check the layout
/// (the low half of the word at 8).
pub const RING_SLOTS: usize = 8;
/// u32 at 12: the entry size in bytes, written at setup (the high half of the
/// word at 8).
pub const RING_ENTRY_BYTES: usize = 12;
/// u64 at 64: the consumer index (entries taken so far), on its own cache line.
pub const CONSUMER_INDEX: usize = 64;
/// u64 at 0 of every entry: its index + 1, written last.
pub const ENTRY_STAMP: usize = 0;
/// Largest slot count accepted (keeps a ring's bytes well inside `usize`).
pub const MAX_SLOTS: u32 = 1 << 20;

pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
