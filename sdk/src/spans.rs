//! Where a call's host time goes (`FERROCX_SPANS=1`): named spans of the
//! device call path, timed with `Instant` and summed per process, printed by
//! [`report`] (the core prints it to stderr when a communicator is
//! destroyed). The device path's calls queue ahead of the GPU, so their host
//! time is what a small call costs (BENCH.md, "small device calls are bound
//! by the host"); a debugger or `perf` is not on every GPU host, this is.
//! Spans nest (each counts its own inclusive time). Off: one relaxed load per
//! span. The counts live in this crate's statics: a plugin loaded as a `.so`
//! of its own (not built in, as ce is) keeps its own, which are not reported;
//! a report is cumulative, printed at each destroy (not at an abort).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Instant;

/// The places timed, in the order [`report`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The NCCL drop-in: a collective, send or receive call (`ncclAllReduce` …), whole.
    NcclCall,
    /// The NCCL drop-in: its pointer query telling host from device buffers.
    NcclPointerQuery,
    /// The NCCL drop-in: the host-bound counts read around a call
    /// (`FERROCX_NCCL_BLOCKING`) and the wait they may ask for.
    NcclBlocking,
    /// The core: a device collective (`collective_on` and its in-place form), whole.
    CoreCollective,
    /// The core: a group's device sends and receives offered to the plugins
    /// (bids and launches).
    CoreP2pGroup,
    /// The core: device buffers checked (driver pointer queries).
    CoreBufferChecks,
    /// The core: earlier device errors looked at.
    CoreDeviceError,
    /// The core: the stream asked whether it is being captured.
    CoreCaptureQuery,
    /// The core: the collective plugins' bids.
    CoreBids,
    /// The core: a plugin's launch (collective or point-to-point), whole.
    CorePluginLaunch,
    /// ce: a collective's launch, whole.
    CeLaunch,
    /// ce: a point-to-point group's launch, whole.
    CeP2pLaunch,
    /// ce: ordering after earlier calls (the watchdog's queue).
    CeOrder,
    /// ce: within `order`, completed calls retired (event queries).
    CeRetire,
    /// ce: handing a queued call to the watchdog (its event recorded).
    CeTrack,
    /// The SDK: `cuLaunchKernel` of an exchange or point-to-point kernel.
    KernelLaunch,
}

const POINTS: [(Point, &str); 16] = [
    (Point::NcclCall, "nccl: call"),
    (Point::NcclPointerQuery, "nccl: pointer query"),
    (Point::NcclBlocking, "nccl: blocking check"),
    (Point::CoreCollective, "core: device collective"),
    (Point::CoreP2pGroup, "core: device send/recv bids+launch"),
    (Point::CoreBufferChecks, "core: buffer checks"),
    (Point::CoreDeviceError, "core: device errors"),
    (Point::CoreCaptureQuery, "core: capture query"),
    (Point::CoreBids, "core: bids"),
    (Point::CorePluginLaunch, "core: plugin launch"),
    (Point::CeLaunch, "ce: collective launch"),
    (Point::CeP2pLaunch, "ce: send/recv launch"),
    (Point::CeOrder, "ce: order"),
    (Point::CeRetire, "ce: retire (in order)"),
    (Point::CeTrack, "ce: track"),
    (Point::KernelLaunch, "sdk: cuLaunchKernel"),
];

const N: usize = POINTS.len();
static NANOS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
static COUNTS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
/// The longest single span of each point (a stall hides in a mean).
static MAX: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
/// 0: not read yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether spans are timed (`FERROCX_SPANS=1`, read once).
#[inline]
pub fn on() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("FERROCX_SPANS").is_ok_and(|v| v == "1");
            STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        s => s == 2,
    }
}

fn index(p: Point) -> usize {
    POINTS
        .iter()
        .position(|(q, _)| *q == p)
        .expect("every point is listed")
}

/// A span being timed: its time is added when it is dropped.
#[must_use = "a span is timed until it is dropped"]
pub struct Span {
    at: Option<(usize, Instant)>,
}

/// Start timing `p` (nothing when spans are off).
#[inline]
pub fn enter(p: Point) -> Span {
    Span {
        at: on().then(|| (index(p), Instant::now())),
    }
}

impl Drop for Span {
    #[inline]
    fn drop(&mut self) {
        if let Some((i, t)) = self.at {
            let ns = t.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            NANOS[i].fetch_add(ns, Ordering::Relaxed);
            COUNTS[i].fetch_add(1, Ordering::Relaxed);
            MAX[i].fetch_max(ns, Ordering::Relaxed);
        }
    }
}

/// The spans timed so far (those entered at least once): one line each with
/// its count, total, mean and longest; `None` when spans are off.
pub fn report() -> Option<String> {
    if !on() {
        return None;
    }
    let mut out =
        String::from("span                            calls    total µs  µs/call   max µs\n");
    for (i, (_, name)) in POINTS.iter().enumerate() {
        let n = COUNTS[i].load(Ordering::Relaxed);
        if n == 0 {
            continue;
        }
        let us = NANOS[i].load(Ordering::Relaxed) as f64 / 1e3;
        let max = MAX[i].load(Ordering::Relaxed) as f64 / 1e3;
        out.push_str(&format!(
            "{name:<30} {n:>7} {us:>11.1} {:>8.3} {max:>8.1}\n",
            us / n as f64
        ));
    }
    if COUNTS.iter().all(|c| c.load(Ordering::Relaxed) == 0) {
        out.push_str("(no device call was timed: spans cover the device call path)\n");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_listed_once_and_spans_add_up_when_on() {
        for (i, (p, _)) in POINTS.iter().enumerate() {
            assert_eq!(index(*p), i);
        }
        // The test decides the state (the variable is read only when unset),
        // and gives the one it found back (no other test of this binary times
        // spans, but one might read the state).
        let found = STATE.swap(2, Ordering::Relaxed);
        let before = COUNTS[index(Point::CeTrack)].load(Ordering::Relaxed);
        {
            let _s = enter(Point::CeTrack);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(
            COUNTS[index(Point::CeTrack)].load(Ordering::Relaxed),
            before + 1
        );
        assert!(NANOS[index(Point::CeTrack)].load(Ordering::Relaxed) >= 2_000_000);
        assert!(MAX[index(Point::CeTrack)].load(Ordering::Relaxed) >= 2_000_000);
        let r = report().expect("on");
        assert!(r.contains("ce: track"), "{r}");
        STATE.store(1, Ordering::Relaxed);
        let n = COUNTS[index(Point::CeTrack)].load(Ordering::Relaxed);
        drop(enter(Point::CeTrack));
        assert_eq!(
            COUNTS[index(Point::CeTrack)].load(Ordering::Relaxed),
            n,
            "off: nothing counted"
        );
        assert!(report().is_none());
        STATE.store(found, Ordering::Relaxed);
    }
}
