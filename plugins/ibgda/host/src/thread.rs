//! The proxy thread: polls this rank's request queues, drives the health
//! machine and the carrier, writes completions, and parks when idle (the CI
//! machine has two cores and runs several ranks).

use crate::carrier::SameHost;
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

/// Start the thread on `ctx`'s device; it logs through `host`.
pub fn spawn(
    ctx: Arc<Context>,
    mut proxy: Proxy,
    mut carrier: SameHost,
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
            let mut idle = 0u32;
            while !shared.stop.load(Ordering::Acquire) {
                let now = Nanos(clock::now());
                let mut work = proxy.poll(&mut carrier, now);
                let done = carrier.progress(now);
                work += done.len();
                for c in done {
                    // A completion the sender no longer knows is counted as stray.
                    let _ = proxy.on_completion(c, &mut carrier, now);
                }
                if work > 0 {
                    // Completions made room: take what waited for it.
                    proxy.poll(&mut carrier, now);
                }
                record(&mut proxy, &shared, &host, rank);
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
