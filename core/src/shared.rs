//! State every part of a communicator reads: identity, peers, plugins, bootstrap.

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::plugin::select::Candidates;
use crate::plugin::{PluginInstance, TransportFilter};
use ferrocx_sdk::abi::FxPeerInfo;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Immutable after creation (except the abort flag).
pub(crate) struct CommShared {
    pub rank: usize,
    pub nranks: usize,
    pub comm_hash: u64,
    pub peer_info: Vec<FxPeerInfo>,
    pub plugins: Vec<Arc<PluginInstance>>,
    pub filter: TransportFilter,
    /// Skipped plugins, for error messages.
    pub skipped: String,
    pub bootstrap: Bootstrap,
    pub timeout: Duration,
    /// Shared with every transport plugin's host table: set by `abort`.
    pub abort: Arc<AtomicU32>,
    /// The collective plugins' abort flag: set by `abort`, when the communicator
    /// breaks, and when a peer dies or aborts — a plugin waiting inside `launch`
    /// for a peer (host memory) stops at once instead of at its timeout.
    pub stop: Arc<AtomicU32>,
    /// This rank's last operation, answered to peers' status queries.
    pub status: Arc<crate::status::Tracker>,
    /// The first channel of host-memory work, 0 when host and device work
    /// share channels. Where a rank has a GPU, a device transport (p2p) would
    /// win every same-host peer and carry host buffers through its device
    /// FIFO (55 µs for a small message on an H100 host): host work then gets
    /// channels of its own, connected with a host transport (shm).
    pub host_channels: usize,
}

impl CommShared {
    /// Whether `channel` carries host memory only (see `host_channels`).
    pub fn host_channel(&self, channel: usize) -> bool {
        self.host_channels > 0 && channel >= self.host_channels
    }
}

impl CommShared {
    /// What transport selection looks at for this rank.
    pub fn candidates(&self) -> Candidates<'_> {
        Candidates {
            me: self.rank,
            infos: &self.peer_info,
            plugins: &self.plugins,
            filter: &self.filter,
            skipped: &self.skipped,
        }
    }

    /// Tell the collective plugins to stop waiting.
    pub fn stop_waits(&self) {
        self.stop.store(1, Ordering::Release);
    }

    /// The mismatch a peer's abort notice names, if it names one.
    pub fn abort_mismatch(&self) -> Option<crate::Error> {
        let (rank, reason) = self.bootstrap.abort_notice()?;
        match crate::Error::from_abort(rank, &reason) {
            e @ crate::Error::Mismatch { .. } => Some(e),
            _ => None,
        }
    }

    /// Fail if a peer died, a peer aborted, or we were aborted.
    pub fn check_peers(&self) -> Result<()> {
        if self.abort.load(Ordering::Acquire) != 0 {
            return Err(Error::Destroyed(format!("rank {} was aborted", self.rank)));
        }
        if let Some((rank, detail)) = self.bootstrap.dead_peer() {
            return Err(Error::PeerFailed { rank, detail });
        }
        if let Some((rank, reason)) = self.bootstrap.abort_notice() {
            return Err(Error::from_abort(rank, &reason));
        }
        Ok(())
    }
}
