//! `FERROCX_STATUS_SIGNAL=1`: on SIGUSR1, every live communicator of the process
//! prints its status report (where every rank is) to stderr, and the job goes on.
//! For a job that seems stuck: `kill -USR1 <pid of any rank>` says which rank is
//! behind without killing anything. Off by default (a library does not take a
//! signal its program may use); `fxrun` turns it on for its ranks.

use crate::shared::CommShared;
use parking_lot::Mutex;
use signal_hook::consts::SIGUSR1;
use signal_hook::iterator::Signals;
use std::sync::{Arc, Once, Weak};

/// Communicators to report on (dead entries are pruned as they are found).
static LIVE: Mutex<Vec<Weak<CommShared>>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// List `shared` for SIGUSR1 reports, installing the handler on first use when
/// `FERROCX_STATUS_SIGNAL` is on.
pub(crate) fn watch(shared: &Arc<CommShared>) -> crate::Result<()> {
    if !crate::config::env_bool("FERROCX_STATUS_SIGNAL", false)? {
        return Ok(());
    }
    let mut live = LIVE.lock();
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(shared));
    drop(live);
    INSTALL.call_once(install);
    Ok(())
}

fn install() {
    let mut signals = match Signals::new([SIGUSR1]) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(target: "ferrocx::comm", "FERROCX_STATUS_SIGNAL: cannot catch SIGUSR1: {e}");
            return;
        }
    };
    // The thread sleeps in a blocking read until a signal arrives.
    let spawned = std::thread::Builder::new()
        .name("fx-status-signal".into())
        .spawn(move || {
            for _ in signals.forever() {
                report_all();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(target: "ferrocx::comm", "FERROCX_STATUS_SIGNAL: cannot start its thread: {e}");
    }
}

fn report_all() {
    let live: Vec<Arc<CommShared>> = LIVE.lock().iter().filter_map(Weak::upgrade).collect();
    for s in live {
        let report = s.status.report(&s.bootstrap, s.timeout);
        eprintln!(
            "ferrocx status (rank {} of {}, communicator {:#018x}): {report}",
            s.rank, s.nranks, s.comm_hash
        );
    }
}
