//! The proxy thread: polls this rank's request queues, drives the health
//! machine and the carrier, writes completions, and parks when idle (the CI
//! machine has two cores and runs several ranks).

use crate::carrier::{HostCarrier, Outcome};
use crate::clock;
use ferrocx_ibgda::health::Nanos;
use ferrocx_ibgda::proxy::{Proxy, ProxyEvent};
use ferrocx_sdk::abi::FxDevnetStats;
use ferrocx_sdk::cuda::Context;
use ferrocx_sdk::{Host, Level};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the hooks read while the thread runs.
#[derive(Default)]
pub struct Shared {
    /// Set to stop the thread.
    pub stop: AtomicBool,
    /// Counters.
    pub stats: Mutex<FxDevnetStats>,
    /// The first peer or queue error, for `status`.
    pub error: Mutex<Option<String>>,
}

/// Longest sleep when nothing happens: bounds how late a new request is seen.
const MAX_PARK: Duration = Duration::from_micros(500);
/// Rounds without work before the thread starts sleeping.
const SPINS: u32 = 2000;

/// One round of the loop at `now`: the proxy takes and routes requests, the
/// carrier moves its transfers, their outcomes go back to the proxy. Returns
/// how much happened (0: nothing to do).
pub fn step(
    proxy: &mut Proxy,
    carrier: &mut impl HostCarrier,
    now: Nanos,
    out: &mut Vec<Outcome>,
) -> usize {
    let mut work = proxy.poll(carrier, now);
    work += carrier.progress(now, out);
    for o in out.drain(..) {
        // An outcome the sender no longer knows (a late or duplicate one, a
        // request already failed over) is counted as stray.
        let _ = match o {
            Outcome::Done(c) => proxy.on_completion(c, carrier, now),
            Outcome::Failed {
                peer,
                path,
                seq,
                status,
            } => proxy.on_error_completion(peer, path, seq, status, carrier, now),
        };
    }
    if work > 0 {
        // Completions made room: take what waited for it.
        work += proxy.poll(carrier, now);
    }
    work
}

/// Start the thread on `ctx`'s device; it logs through `host`.
pub fn spawn<C: HostCarrier + 'static>(
    ctx: Arc<Context>,
    mut proxy: Proxy,
    mut carrier: C,
    shared: Arc<Shared>,
    host: Host,
    rank: usize,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("fx-ibgda-{rank}"))
        .spawn(move || {
            if let Err(e) = ctx.bind() {
                *shared.error.lock() = Some(format!(
                    "the ibgda proxy thread could not bind its GPU: {e}"
                ));
                return;
            }
            ferrocx_sdk::cuda::relax_capture_checks_on_this_thread();
            let mut idle = 0u32;
            let mut out = Vec::new();
            while !shared.stop.load(Ordering::Acquire) {
                let now = Nanos(clock::now());
                let work = step(&mut proxy, &mut carrier, now, &mut out);
                record(&mut proxy, &shared, &host, rank);
                while let Some(note) = carrier.take_note() {
                    host.warn(format!("ibgda rank {rank}: {note}"));
                }
                if work > 0 || carrier.in_flight() > 0 {
                    idle = 0;
                    std::hint::spin_loop();
                    continue;
                }
                idle = idle.saturating_add(1);
                if idle < SPINS {
                    std::thread::yield_now();
                    continue;
                }
                let until = [proxy.next_deadline(), carrier.next_due()]
                    .into_iter()
                    .flatten()
                    .min()
                    .map_or(MAX_PARK, |d| d.since(now).min(MAX_PARK));
                std::thread::sleep(until);
            }
        })
}

/// Counts events, logs them and remembers errors.
fn record(proxy: &mut Proxy, shared: &Shared, host: &Host, rank: usize) {
    let s = proxy.sender().stats();
    let mut st = shared.stats.lock();
    st.completed = s.completed;
    st.failed = s.failed;
    st.requests = s.posted;
    while let Some(e) = proxy.poll_event() {
        let level = match &e {
            ProxyEvent::Failover { .. } => {
                st.failovers += 1;
                Level::Debug
            }
            ProxyEvent::PathDown { .. } => {
                st.paths_down += 1;
                Level::Warn
            }
            ProxyEvent::PathRestored { .. } => {
                st.paths_restored += 1;
                Level::Info
            }
            ProxyEvent::PeerUnreachable(err) => {
                st.peers_unreachable += 1;
                shared.error.lock().get_or_insert_with(|| err.to_string());
                Level::Error
            }
            ProxyEvent::QueueBroken { .. } => {
                shared.error.lock().get_or_insert_with(|| e.to_string());
                Level::Error
            }
            ProxyEvent::BadRecord { .. } | ProxyEvent::Rejected { .. } => Level::Warn,
            _ => Level::Debug,
        };
        host.log(level, format!("ibgda rank {rank}: {e}"));
    }
}
