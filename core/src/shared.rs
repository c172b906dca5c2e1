//! State every part of a communicator reads: identity, peers, plugins, bootstrap.

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::plugin::select::Candidates;
use crate::plugin::{PluginInstance, TransportFilter};
use ferrocx_sdk::abi::{FxPeerInfo, FX_REMOTE};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

    /// The cause to report for a plugin's failure: a peer's mismatch, hang
    /// report or death, when one explains it. A plugin that failed with
    /// `FX_REMOTE` stopped because another rank gave up; that rank's notice
    /// travels over the bootstrap mesh and may land after the plugin's own
    /// signal (shared memory is faster than a socket), so it is awaited for a
    /// short grace — on the error path only.
    pub fn failure_cause(&self, e: &Error) -> Option<Error> {
        let grace = self.timeout.min(CAUSE_GRACE);
        await_cause(e, grace, || self.check_peers())
    }
}

/// [`CommShared::failure_cause`] over any `check` (sans-IO for the tests):
/// polls `check` until it names a cause, fails otherwise, or — for anything but
/// a plugin's `FX_REMOTE` symptom, at once — `grace` ends.
fn await_cause(e: &Error, grace: Duration, mut check: impl FnMut() -> Result<()>) -> Option<Error> {
    let symptom = matches!(e, Error::Plugin { code, .. } if *code == FX_REMOTE);
    let deadline = Instant::now() + grace;
    loop {
        match check() {
            Err(
                cause @ (Error::Mismatch { .. } | Error::Hang { .. } | Error::PeerFailed { .. }),
            ) => return Some(cause),
            Err(_) => return None,
            Ok(()) if !symptom || Instant::now() >= deadline => return None,
            Ok(()) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// How long a plugin's `FX_REMOTE` failure waits for the peer's notice that
/// explains it (it normally lands within a millisecond or two).
const CAUSE_GRACE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::abi::FX_INVALID_ARGUMENT;

    fn plugin(code: i32) -> Error {
        Error::Plugin {
            plugin: "shm-coll".into(),
            hook: "launch",
            peer: None,
            code,
            message: "launch: rank 0 gave up: the communicator broke or was aborted".into(),
        }
    }

    fn mismatch() -> Error {
        Error::Mismatch {
            rank: 0,
            call: "send of 4000 bytes to rank 1".into(),
            peer: 1,
            peer_call: "all_reduce(float, sum, 1000) as op #1".into(),
        }
    }

    /// A peer's notice that lands after the plugin's symptom is still the cause
    /// reported (CI once saw the symptom win this race on a third rank).
    #[test]
    fn a_remote_failure_waits_for_the_notice_that_explains_it() {
        let mut polls = 0;
        let cause = await_cause(&plugin(FX_REMOTE), Duration::from_secs(5), || {
            polls += 1;
            if polls < 20 {
                Ok(())
            } else {
                Err(mismatch())
            }
        });
        assert!(
            matches!(cause, Some(Error::Mismatch { peer: 1, .. })),
            "{cause:?}"
        );
        assert_eq!(polls, 20);
    }

    /// Without a notice the grace ends; other failures do not wait at all; a
    /// local abort is no peer's cause.
    #[test]
    fn no_notice_ends_the_grace_and_other_failures_do_not_wait() {
        let t = Instant::now();
        let grace = Duration::from_millis(30);
        assert!(await_cause(&plugin(FX_REMOTE), grace, || Ok(())).is_none());
        assert!(t.elapsed() >= grace);

        let mut polls = 0;
        let none = await_cause(&plugin(FX_INVALID_ARGUMENT), Duration::from_secs(5), || {
            polls += 1;
            Ok(())
        });
        assert!(none.is_none());
        assert_eq!(polls, 1);

        let local = await_cause(&plugin(FX_REMOTE), Duration::from_secs(5), || {
            Err(Error::Destroyed("rank 2 was aborted".into()))
        });
        assert!(local.is_none());
    }
}
