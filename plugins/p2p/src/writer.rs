//! The sender's side of p2p: the receiver's FIFO opened in this process, and
//! direct writes through the receive buffers' IPC handles.
//!
//! Each handle is opened at most once per process (`device::open::OpenTable`)
//! and kept in this connection's LRU ([`ConnMappings`], bounded by
//! `FERROCX_P2P_IPC_CACHE`); a copy in flight holds its mapping, so a
//! revocation or an eviction never closes a mapping under a running copy.

use crate::target::Target;
use ferrocx_sdk::device::open::{ConnMappings, Mapping};
use ferrocx_sdk::device::{Device, Queue};
use ferrocx_sdk::same_host::{Revoked, WriteError, Writer};
use std::sync::Arc;

/// A resolved direct-write destination: its address here and the mapping
/// that keeps it valid (none when the receiver is this process).
pub type Dest = (u64, Option<Arc<Mapping>>);

/// A sending connection's mappings of the receiver's memory.
pub struct IpcWriter {
    /// The connection's device.
    pub dev: Arc<dyn Device>,
    /// The receiver is this process: its addresses are ours, no IPC.
    pub same_process: bool,
    /// The mapping of the receiver's FIFO (none in the same process).
    pub fifo: Option<Arc<Mapping>>,
    /// Receive allocations opened recently.
    pub maps: ConnMappings,
}

impl Writer for IpcWriter {
    type Target = Target;
    type Engine = Box<dyn Queue>;
    type Dest = Dest;
    /// Copies are queued, not done, by `write`: no need to cut them.
    const BUDGET: usize = usize::MAX;

    fn open(&mut self, t: &Target) -> Result<Dest, String> {
        if self.same_process {
            return Ok((t.addr, None));
        }
        let dev = self.dev.clone();
        let h = t.handle;
        self.maps
            .get(&h, || Mapping::open(&dev, &h))
            .map(|m| (m.addr() + t.offset, Some(m)))
            .map_err(|e| format!("cannot open the receiver's buffer: {}", e.message()))
    }

    unsafe fn write(
        &mut self,
        engine: &mut Box<dyn Queue>,
        dest: &Dest,
        off: u64,
        src: u64,
        n: usize,
    ) -> Result<(), WriteError> {
        // SAFETY: `dest` is the posted receive the receiver offered (valid until
        // copy_done), mapped by the mapping the caller keeps until the copy's
        // mark completed; `src` per the caller's contract.
        unsafe { engine.copy(dest.0 + off, src, n) }.map_err(WriteError::Failed)
    }

    fn revoke(&mut self, r: Revoked) {
        match r {
            Revoked::One(h) => {
                self.maps.revoke(&h);
            }
            Revoked::All => self.maps.clear(),
        }
    }

    fn mappings(&self) -> usize {
        self.maps.len()
    }

    fn shutdown(&mut self, drained: bool) {
        if drained {
            self.fifo = None;
        } else {
            // A copy into the FIFO may still run: never close that mapping.
            std::mem::forget(self.fifo.take());
        }
        self.maps.clear();
    }
}
