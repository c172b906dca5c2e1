//! The proxy thread: polls this rank's request queues, drives the health
//! machine and the carrier, writes completions, and parks when idle (the CI
//! machine has two cores and runs several ranks).

use crate::carrier::SameHost;
use crate::clock;
use ferrocx_ibgda::health::Nanos;
use ferrocx_ibgda::proxy::{Proxy, ProxyEvent};
use ferrocx_sdk::abi::FxDevnetStats;
use ferrocx_sdk::cuda::Context;
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
    /// Recent events, for logs (bounded).
    pub events: Mutex<Vec<String>>,
}

/// Longest sleep when nothing happens: bounds how late a new request is seen.
const MAX_PARK: Duration = Duration::from_micros(500);
/// Rounds without work before the thread starts sleeping.
const SPINS: u32 = 2000;

/// Start the thread on `ctx`'s device.
pub fn spawn(
    ctx: Arc<Context>,
    mut proxy: Proxy,
    mut carrier: SameHost,
    shared: Arc<Shared>,
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
                record(&mut proxy, &shared, work as u64);
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

/// Counts events and remembers errors.
fn record(proxy: &mut Proxy, shared: &Shared, _work: u64) {
    let s = proxy.sender().stats();
    let mut events = Vec::new();
    while let Some(e) = proxy.poll_event() {
        events.push(e);
    }
    let mut st = shared.stats.lock();
    st.completed = s.completed;
    st.failed = s.failed;
    st.requests = s.posted;
    for e in &events {
        match e {
            ProxyEvent::Failover { .. } => st.failovers += 1,
            ProxyEvent::PathDown { .. } => st.paths_down += 1,
            ProxyEvent::PathRestored { .. } => st.paths_restored += 1,
            ProxyEvent::PeerUnreachable(err) => {
                st.peers_unreachable += 1;
                shared.error.lock().get_or_insert_with(|| err.to_string());
            }
            ProxyEvent::QueueBroken { .. } => {
                shared.error.lock().get_or_insert_with(|| e.to_string());
            }
            _ => {}
        }
    }
    drop(st);
    if !events.is_empty() {
        let mut log = shared.events.lock();
        for e in events {
            if log.len() < 256 {
                log.push(e.to_string());
            }
        }
    }
}
