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

    /// What a peer said went wrong, awaited for up to `grace`: the first
    /// error of [`check_peers`](Self::check_peers). A failure seen locally (a
    /// transport's reset, a plugin's stopped wait) is often the symptom of a
    /// peer's death, abort or mismatch whose notice travels over the bootstrap
    /// mesh and lands a moment later; callers wait for it on their error path
    /// only.
    pub fn peer_cause_within(&self, grace: Duration) -> Option<Error> {
        first_cause(grace, || self.check_peers())
    }

    /// The cause to report for a plugin's failure: a peer's mismatch, hang
    /// report or death, when one explains it. A plugin that failed with
    /// `FX_REMOTE` stopped because another rank gave up: its notice is awaited
    /// for [`CAUSE_GRACE`] (at most the timeout); other failures look once.
    pub fn failure_cause(&self, e: &Error) -> Option<Error> {
        self.peer_cause_within(cause_grace(e, self.timeout))
            .and_then(explains)
    }
}

/// How long a plugin's failure `e` waits for a peer's cause: [`CAUSE_GRACE`]
/// (at most `timeout`) for an `FX_REMOTE` symptom, else none (one look).
fn cause_grace(e: &Error, timeout: Duration) -> Duration {
    match e {
        Error::Plugin { code, .. } if *code == FX_REMOTE => timeout.min(CAUSE_GRACE),
        _ => Duration::ZERO,
    }
}

/// A peer's error that explains a plugin's failure (a local abort does not).
fn explains(cause: Error) -> Option<Error> {
    match cause {
        Error::Mismatch { .. } | Error::Hang { .. } | Error::PeerFailed { .. } => Some(cause),
        _ => None,
    }
}

/// [`CommShared::peer_cause_within`] over any `check` (sans-IO for the
/// tests): polls `check` until it fails (that error) or `grace` ends (`None`;
/// a zero grace checks once).
fn first_cause(grace: Duration, mut check: impl FnMut() -> Result<()>) -> Option<Error> {
    let deadline = Instant::now() + grace;
    loop {
        match check() {
            Err(cause) => return Some(cause),
            Ok(()) if Instant::now() >= deadline => return None,
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

    fn mismatch() -> Error {
        Error::Mismatch {
            rank: 0,
            call: "send of 4000 bytes to rank 1".into(),
            peer: 1,
            peer_call: "all_reduce(float, sum, 1000) as op #1".into(),
        }
    }

    /// A peer's notice that lands after the local symptom is still the cause
    /// reported (CI once saw a plugin's symptom win this race on a third rank).
    #[test]
    fn a_notice_that_lands_within_the_grace_is_the_cause() {
        let mut polls = 0;
        let cause = first_cause(Duration::from_secs(5), || {
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

    /// Without a notice the grace ends; a zero grace looks once.
    #[test]
    fn no_notice_ends_the_grace_and_a_zero_grace_looks_once() {
        let t = Instant::now();
        let grace = Duration::from_millis(30);
        assert!(first_cause(grace, || Ok(())).is_none());
        assert!(t.elapsed() >= grace);

        let mut polls = 0;
        let none = first_cause(Duration::ZERO, || {
            polls += 1;
            Ok(())
        });
        assert!(none.is_none());
        assert_eq!(polls, 1);

        let local = first_cause(Duration::from_secs(5), || {
            Err(Error::Destroyed("rank 2 was aborted".into()))
        });
        assert!(matches!(local, Some(Error::Destroyed(_))));
    }

    fn plugin(code: i32) -> Error {
        Error::Plugin {
            plugin: "shm-coll".into(),
            hook: "launch",
            peer: None,
            code,
            message: "launch: rank 0 gave up: the communicator broke or was aborted".into(),
        }
    }

    /// Only a plugin's `FX_REMOTE` symptom waits (never past the timeout);
    /// other failures look once; a local abort is no peer's cause.
    #[test]
    fn only_a_remote_symptom_waits_and_a_local_abort_explains_nothing() {
        let t = Duration::from_secs(20);
        assert_eq!(cause_grace(&plugin(FX_REMOTE), t), CAUSE_GRACE);
        assert_eq!(
            cause_grace(&plugin(FX_REMOTE), Duration::from_millis(300)),
            Duration::from_millis(300)
        );
        assert_eq!(
            cause_grace(&plugin(ferrocx_sdk::abi::FX_INVALID_ARGUMENT), t),
            Duration::ZERO
        );
        assert!(explains(mismatch()).is_some());
        assert!(explains(Error::Destroyed("rank 2 was aborted".into())).is_none());
    }
}
