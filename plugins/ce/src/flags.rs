//! The flag buffers on the device: this rank's (allocated and exported with
//! `Device::alloc`, zeroed before anyone can write it) and every peer's,
//! opened from its IPC handle (`Mapping::open`). `addr(r, array, slot)` is
//! where a barrier operation writes or waits.
//!
//! Teardown is ordered: close the peers' mappings (and wait until the
//! driver actually closed them: `cuIpcCloseMemHandle` runs on the SDK's
//! closing thread), then an out-of-band barrier so every peer closed its
//! mapping of ours, then free ours — CUDA leaves freeing memory that another
//! process still maps undefined. [`Flags::close_peers`] is the first step;
//! dropping `Flags` frees this rank's buffer.

use crate::sync::{Array, FlagLayout};
use ferrocx_sdk::cuda::{check, sys, Stream};
use ferrocx_sdk::device::open::Mapping;
use ferrocx_sdk::device::{Device, IpcHandle};
use ferrocx_sdk::{PluginError, PluginResult};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Longest wait for the closing thread to close our mappings.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// This rank's flag buffer and its view of every peer's.
pub struct Flags {
    dev: Arc<dyn Device>,
    layout: FlagLayout,
    /// Bytes of scratch after the flags (staged reductions), at `scratch_at()`.
    scratch: usize,
    rank: usize,
    own: u64,
    handle: IpcHandle,
    /// Rank r's buffer as mapped here (`own` for this rank, 0 until opened).
    bases: Vec<u64>,
    peers: Vec<Arc<Mapping>>,
}

/// Tells a waiting thread that the mappings closed before it were closed.
struct Closed(mpsc::SyncSender<()>);

impl Drop for Closed {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

impl Flags {
    /// Allocate, export and zero this rank's buffer, with `scratch` bytes of
    /// scratch after the flags (the device's context is bound on this thread;
    /// `stream` is a private stream of it, synchronized here so the zeros land
    /// before the handle is published).
    pub fn alloc(
        dev: &Arc<dyn Device>,
        layout: FlagLayout,
        rank: usize,
        stream: &Stream,
        scratch: usize,
    ) -> PluginResult<Flags> {
        let total = Self::scratch_at(layout)
            .checked_add(scratch)
            .ok_or_else(|| PluginError::invalid("FERROCX_CE_SCRATCH_BYTES overflows"))?;
        let (own, handle) = dev.alloc(total)?;
        let mut bases = vec![0; layout.nranks];
        bases[rank] = own;
        let flags = Flags {
            dev: dev.clone(),
            layout,
            scratch,
            rank,
            own,
            handle,
            bases,
            peers: Vec::new(),
        };
        let words = layout.bytes() / 4;
        // SAFETY: `own` is a fresh allocation of `words` 4-byte words of this context;
        // the stream is live and of the same context.
        let r = unsafe { sys::cuMemsetD32Async(own, 0, words, stream.raw()) };
        check(r, "cuMemsetD32Async (zeroing the ce flags)")?;
        // SAFETY: a live private stream.
        let r = unsafe { sys::cuStreamSynchronize(stream.raw()) };
        check(r, "cuStreamSynchronize (zeroing the ce flags)")?;
        Ok(flags)
    }

    /// What the peers open.
    pub fn handle(&self) -> IpcHandle {
        self.handle
    }

    /// This rank's buffer.
    pub fn own(&self) -> u64 {
        self.own
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Its layout.
    pub fn layout(&self) -> FlagLayout {
        self.layout
    }

    /// Open every peer's buffer from `handles` (rank order; ours is skipped).
    /// The device's context is bound on this thread.
    pub fn open_peers(&mut self, handles: &[IpcHandle]) -> PluginResult<()> {
        for (r, h) in handles.iter().enumerate() {
            if r == self.rank {
                continue;
            }
            let m = Mapping::open(&self.dev, h).map_err(|e| {
                PluginError::new(
                    e.code(),
                    format!(
                        "opening rank {r}'s ce flags (CUDA IPC) on rank {}: {}",
                        self.rank,
                        e.message()
                    ),
                )
            })?;
            self.bases[r] = m.addr();
            self.peers.push(m);
        }
        // The LL kernel's table of the buffers: once, before any call.
        let table: Vec<u8> = self.bases.iter().flat_map(|b| b.to_le_bytes()).collect();
        // SAFETY: the table (`nranks` × 8 bytes) lies in this rank's buffer, a
        // device allocation of this context (bound on this thread); the source
        // is host memory living through the synchronous copy.
        let r =
            unsafe { sys::cuMemcpyHtoD_v2(self.ll_table(), table.as_ptr().cast(), table.len()) };
        check(r, "cuMemcpyHtoD (the ce LL table)")?;
        Ok(())
    }

    /// Offset of the scratch in the buffer (after the flags, 256-byte aligned).
    fn scratch_at(layout: FlagLayout) -> usize {
        layout.bytes().next_multiple_of(256)
    }

    /// Bytes of scratch.
    pub fn scratch_bytes(&self) -> usize {
        self.scratch
    }

    /// Rank `rank`'s scratch as this process reaches it (`None` before its
    /// buffer is open, or without scratch).
    pub fn scratch(&self, rank: usize) -> Option<u64> {
        let b = *self.bases.get(rank)?;
        (b != 0 && self.scratch > 0).then(|| b + Self::scratch_at(self.layout) as u64)
    }

    /// This rank's LL control words.
    pub fn ll_ctl(&self) -> u64 {
        self.own + self.layout.ll_ctl_offset() as u64
    }

    /// Raise this rank's LL abort word (its kernels' waits give up), on a
    /// private stream, and wait for it (the device's context is bound).
    pub fn raise_ll_abort(&self) -> PluginResult<()> {
        let stream = Stream::new()?;
        let at = self.ll_ctl() + (ferrocx_sdk::kernels::ll::CTL_ABORT * 8) as u64;
        // SAFETY: the abort word (8 bytes) lies in this rank's buffer; the stream
        // is live and of the same context.
        let r = unsafe { sys::cuMemsetD32Async(at, 1, 2, stream.raw()) };
        check(r, "cuMemsetD32Async (raising the LL abort word)")?;
        // SAFETY: a live private stream.
        let r = unsafe { sys::cuStreamSynchronize(stream.raw()) };
        check(r, "cuStreamSynchronize (raising the LL abort word)")
    }

    /// This rank's table of every rank's buffer as mapped here (the LL
    /// kernel's; written by [`open_peers`](Self::open_peers)).
    pub fn ll_table(&self) -> u64 {
        self.own + self.layout.ll_table_offset() as u64
    }

    /// Device address of `slot` of `array` in rank `rank`'s buffer, as this
    /// process reaches it.
    pub fn addr(&self, rank: usize, array: Array, slot: usize) -> u64 {
        debug_assert!(self.bases[rank] != 0, "rank {rank}'s flags are not open");
        self.bases[rank] + self.layout.offset(array, slot) as u64
    }

    /// Where word `word` of this rank's note of call `seq` goes in rank
    /// `rank`'s ring, as this process reaches it.
    pub fn note_addr(&self, rank: usize, seq: u64, word: usize) -> u64 {
        debug_assert!(self.bases[rank] != 0, "rank {rank}'s flags are not open");
        self.bases[rank] + self.layout.note_offset(self.rank, seq, word) as u64
    }

    /// Close the peers' mappings and wait (bounded) until the driver did.
    pub fn close_peers(&mut self) {
        if self.peers.is_empty() {
            return;
        }
        for (r, b) in self.bases.iter_mut().enumerate() {
            if r != self.rank {
                *b = 0;
            }
        }
        self.peers.clear();
        let (tx, rx) = mpsc::sync_channel(1);
        self.dev.after_closes(Box::new(Closed(tx)));
        let _ = rx.recv_timeout(CLOSE_WAIT);
    }
}

impl Drop for Flags {
    fn drop(&mut self) {
        self.close_peers();
        // Freeing needs the device's context (cheap if bound already).
        let _bound = self.dev.bind();
        self.dev.free(self.own);
    }
}
