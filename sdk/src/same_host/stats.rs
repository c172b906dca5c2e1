//! Counters for tests and diagnostics.

/// How one end of a connection moved its messages so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Messages carried by the FIFO (shm: its ring).
    pub fifo_messages: u64,
    /// FIFO chunks (a message of L bytes takes ⌈L / chunk⌉ of them, at least one).
    pub fifo_chunks: u64,
    /// Messages copied straight into the receiver's buffer (shm's single
    /// copy, p2p's direct write).
    pub direct_messages: u64,
    /// Bytes of those.
    pub direct_bytes: u64,
    /// Sender: revocations received; receiver: revocations forwarded.
    pub revocations: u64,
    /// Sender: peer allocations cached open now (the FIFO not counted).
    pub mappings: u64,
}

/// What a plugin context holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtxStats {
    /// Allocations in the back end's export cache (registered or recently received into).
    pub exports: usize,
    /// IPC handles opened in this process on the devices the back end knows (all contexts).
    pub open_handles: usize,
    /// Receiving connections alive.
    pub recv_conns: usize,
    /// Freed receiving connections whose FIFO waits for the sender to let go of it.
    pub graveyard: usize,
}
