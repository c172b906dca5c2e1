//! Counters of how one connection moved its messages.

/// Per-connection counters (one side's view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Messages moved through the ring.
    pub ring_messages: u64,
    /// Ring chunks moved (one per slot use).
    pub ring_chunks: u64,
    /// Messages moved by a direct `process_vm_writev` copy.
    pub single_copy_messages: u64,
    /// Bytes moved by direct copies.
    pub single_copy_bytes: u64,
}
