//! [`PathHealth`]: which (local rail, remote end) paths of a process are usable, and
//! when a failed one may be probed.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest re-armed recovery window, as a multiple of the configured one.
const MAX_BACKOFF: u32 = 8;

#[derive(Clone, Copy, Debug)]
struct Down {
    since: Instant,
    next_probe: Instant,
    /// Current window multiplier (1, 2, 4, 8).
    backoff: u32,
}

/// Health of every (local rail, remote end) path of a process. Unknown paths are up.
///
/// Share one per plugin context (it is `Sync`); keys are whatever names a path for the
/// transport, e.g. `(local_ip, peer_ip)`.
pub struct PathHealth<K> {
    recovery: Duration,
    down: Mutex<HashMap<K, Down>>,
    /// Bumped on every state change, so connections can skip the lock when nothing moved.
    generation: AtomicU64,
    /// Draws of the probe jitter so far.
    draws: AtomicU64,
}

/// A well-mixed 64-bit value from a counter (SplitMix64's finalizer).
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<K: Hash + Eq + Clone> PathHealth<K> {
    /// Paths stay down for at least `recovery` after a failure before they are probed.
    pub fn new(recovery: Duration) -> Self {
        PathHealth {
            recovery,
            down: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            draws: AtomicU64::new(0),
        }
    }

    /// The quiet window before a failed path is probed.
    pub fn recovery(&self) -> Duration {
        self.recovery
    }

    /// Changes so far: equal values mean no path changed state in between.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<K, Down>> {
        // The map holds plain data: a panic elsewhere cannot leave it inconsistent.
        self.down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether `path` may carry traffic.
    pub fn is_up(&self, path: &K) -> bool {
        !self.map().contains_key(path)
    }

    /// Since when `path` has been down, if it is.
    pub fn down_since(&self, path: &K) -> Option<Instant> {
        self.map().get(path).map(|d| d.since)
    }

    /// `path` failed at `now`. True when it was up until now (the caller logs the
    /// failover once); a failure reported again while down changes nothing.
    pub fn fail(&self, path: &K, now: Instant) -> bool {
        let mut m = self.map();
        if m.contains_key(path) {
            return false;
        }
        m.insert(
            path.clone(),
            Down {
                since: now,
                next_probe: now + self.recovery,
                backoff: 1,
            },
        );
        drop(m);
        self.bump();
        true
    }

    /// Whether a down `path` has been quiet long enough to be probed.
    pub fn probe_due(&self, path: &K, now: Instant) -> bool {
        self.map().get(path).is_some_and(|d| now >= d.next_probe)
    }

    /// A probe of `path` failed at `now`: wait again, twice as long (up to 8×), give
    /// or take a quarter. The jitter matters: a link that flaps with a fixed period
    /// would otherwise meet every probe of a doubled window in the same phase (down),
    /// and never be taken back.
    pub fn probe_failed(&self, path: &K, now: Instant) {
        let mut m = self.map();
        if let Some(d) = m.get_mut(path) {
            d.backoff = (d.backoff * 2).min(MAX_BACKOFF);
            let r = splitmix(self.draws.fetch_add(1, Ordering::Relaxed));
            // A factor in [0.75, 1.25).
            let factor = 0.75 + (r >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
            d.next_probe = now + (self.recovery * d.backoff).mul_f64(factor);
        }
    }

    /// A probe of `path` succeeded at `now`: it is up again. Returns how long it was
    /// down when this call brought it back (the caller logs the recovery once).
    pub fn recovered(&self, path: &K, now: Instant) -> Option<Duration> {
        let d = self.map().remove(path)?;
        self.bump();
        Some(now.saturating_duration_since(d.since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_per_path_and_backs_off() {
        let h = PathHealth::new(Duration::from_millis(100));
        let t = Instant::now();
        let ms = Duration::from_millis;
        let (a, b) = (("r0", "peer1"), ("r0", "peer2"));
        let g0 = h.generation();
        assert!(h.is_up(&a) && h.is_up(&b));
        assert!(h.fail(&a, t));
        assert!(
            !h.fail(&a, t + ms(10)),
            "a second report is not a new failure"
        );
        assert!(h.generation() > g0);
        // The same local rail to another peer is untouched.
        assert!(!h.is_up(&a) && h.is_up(&b));
        assert_eq!(h.down_since(&a), Some(t));
        assert!(!h.probe_due(&a, t + ms(99)));
        assert!(h.probe_due(&a, t + ms(100)));
        assert!(!h.probe_due(&b, t + ms(100)), "up paths are never probed");
        // Failed probes double the window (give or take a quarter) up to 8×.
        h.probe_failed(&a, t + ms(100));
        assert!(!h.probe_due(&a, t + ms(249)));
        assert!(h.probe_due(&a, t + ms(350)));
        h.probe_failed(&a, t + ms(300));
        h.probe_failed(&a, t + ms(300));
        h.probe_failed(&a, t + ms(300));
        assert!(!h.probe_due(&a, t + ms(899)));
        assert!(h.probe_due(&a, t + ms(1100)));
        assert_eq!(h.recovered(&a, t + ms(1200)), Some(ms(1200)));
        assert_eq!(h.recovered(&a, t + ms(1300)), None, "already up");
        assert!(h.is_up(&a));
        // A fresh failure starts from the base window again.
        assert!(h.fail(&a, t + ms(2000)));
        assert!(h.probe_due(&a, t + ms(2100)));
    }

    #[test]
    fn probe_windows_are_jittered() {
        let h = PathHealth::new(Duration::from_secs(1));
        let t = Instant::now();
        let due = |k: u32| -> Duration {
            let p = ("r1", k);
            h.fail(&p, t);
            h.probe_failed(&p, t);
            // The first instant, to the millisecond, at which a probe is due.
            let ms = (0..=4000).find(|&m| h.probe_due(&p, t + Duration::from_millis(m)));
            Duration::from_millis(ms.expect("due within 2.5 s"))
        };
        let waits: Vec<Duration> = (0..32).map(due).collect();
        assert!(
            waits.iter().all(|w| (1499..=2500).contains(&w.as_millis())),
            "{waits:?}"
        );
        let spread = waits
            .iter()
            .max()
            .unwrap()
            .saturating_sub(*waits.iter().min().unwrap());
        assert!(spread > Duration::from_millis(200), "no jitter: {waits:?}");
    }
}
