//! Rails and failover, as pure state machines a transport drives with its own I/O.
//!
//! A transport that stripes a connection over several *rails* (interfaces, NIC ports)
//! needs two pieces of bookkeeping, both independent of how bytes move:
//!
//! * [`PathHealth`]: is the path from one of my rails to one of the peer's rails usable?
//!   Health is kept **per path** (my rail × the peer's address), shared by every
//!   connection of the process, not per local interface: one peer's switch port going
//!   dark says nothing about the paths to other peers through the same NIC, and every
//!   connection to that peer learns of the failure at once. A failed path stays down for
//!   a quiet *recovery window*, is then probed by the transport, and comes back when a
//!   probe succeeds (a failed probe re-arms the window, doubling up to 8×).
//! * [`InFlight`]: which chunks of which messages are sent but not yet acknowledged, and
//!   on which rail. When a rail fails, [`InFlight::fail_rail`] hands back exactly the
//!   chunks to resend; duplicate acknowledgements (a chunk that got through on both the
//!   failed rail and its replacement) count once.
//!
//! Neither does I/O or reads the clock: callers pass `now`, so tests drive them with
//! made-up times and injected completions.
//!
//! ```
//! use ferrocx_sdk::failover::{ChunkId, InFlight, PathHealth};
//! use std::time::{Duration, Instant};
//!
//! let health = PathHealth::new(Duration::from_secs(5));
//! let t0 = Instant::now();
//! assert!(health.fail(&("eth0", "10.0.0.2"), t0)); // newly failed: log it
//! assert!(!health.is_up(&("eth0", "10.0.0.2")));
//! assert!(!health.probe_due(&("eth0", "10.0.0.2"), t0 + Duration::from_secs(1)));
//! assert!(health.probe_due(&("eth0", "10.0.0.2"), t0 + Duration::from_secs(5)));
//! assert_eq!(health.recovered(&("eth0", "10.0.0.2"), t0 + Duration::from_secs(6)),
//!            Some(Duration::from_secs(6)));
//!
//! let mut f = InFlight::new();
//! f.add_message(7, 2);
//! f.sent(ChunkId { msg: 7, index: 0 }, 0);
//! f.sent(ChunkId { msg: 7, index: 1 }, 1);
//! assert_eq!(f.acked(ChunkId { msg: 7, index: 1 }), None);
//! assert_eq!(f.fail_rail(0), vec![ChunkId { msg: 7, index: 0 }]);
//! f.sent(ChunkId { msg: 7, index: 0 }, 1); // resent on rail 1
//! assert_eq!(f.acked(ChunkId { msg: 7, index: 0 }), Some(7)); // message 7 is complete
//! ```

use std::collections::{BTreeMap, HashMap};
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
}

impl<K: Hash + Eq + Clone> PathHealth<K> {
    /// Paths stay down for at least `recovery` after a failure before they are probed.
    pub fn new(recovery: Duration) -> Self {
        PathHealth {
            recovery,
            down: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
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

    /// A probe of `path` failed at `now`: wait again, twice as long (up to 8×).
    pub fn probe_failed(&self, path: &K, now: Instant) {
        let mut m = self.map();
        if let Some(d) = m.get_mut(path) {
            d.backoff = (d.backoff * 2).min(MAX_BACKOFF);
            d.next_probe = now + self.recovery * d.backoff;
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

/// One chunk of one message: the unit that is sent, acknowledged and resent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId {
    /// Message sequence number on its connection.
    pub msg: u64,
    /// Chunk index inside the message.
    pub index: u32,
}

struct Acks {
    nchunks: u32,
    acked: u32,
    bits: Vec<u64>,
}

/// The unacknowledged chunks of one connection, and the rail each was last sent on.
#[derive(Default)]
pub struct InFlight {
    msgs: BTreeMap<u64, Acks>,
    /// Unacknowledged chunks that are on the wire, by the rail that carries them.
    on_rail: HashMap<ChunkId, usize>,
}

impl InFlight {
    /// Nothing in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// Track message `msg` of `nchunks` chunks (at least 1: an empty message is one chunk).
    pub fn add_message(&mut self, msg: u64, nchunks: u32) {
        let nchunks = nchunks.max(1);
        self.msgs.insert(
            msg,
            Acks {
                nchunks,
                acked: 0,
                bits: vec![0; nchunks.div_ceil(64) as usize],
            },
        );
    }

    /// `id` went out on `rail` (first time or resent).
    pub fn sent(&mut self, id: ChunkId, rail: usize) {
        if self.msgs.contains_key(&id.msg) {
            self.on_rail.insert(id, rail);
        }
    }

    /// The receiver acknowledged `id`. Returns the message number when this was the
    /// message's last unacknowledged chunk (the message is then forgotten). Unknown or
    /// repeated acknowledgements return `None`.
    pub fn acked(&mut self, id: ChunkId) -> Option<u64> {
        let a = self.msgs.get_mut(&id.msg)?;
        if id.index >= a.nchunks {
            return None;
        }
        let (w, b) = ((id.index / 64) as usize, id.index % 64);
        if a.bits[w] & (1 << b) != 0 {
            return None;
        }
        a.bits[w] |= 1 << b;
        a.acked += 1;
        self.on_rail.remove(&id);
        if a.acked == a.nchunks {
            self.msgs.remove(&id.msg);
            Some(id.msg)
        } else {
            None
        }
    }

    /// Whether `id` was acknowledged (or its message is complete or unknown).
    pub fn is_acked(&self, id: ChunkId) -> bool {
        self.msgs.get(&id.msg).is_none_or(|a| {
            id.index >= a.nchunks || a.bits[(id.index / 64) as usize] & (1 << (id.index % 64)) != 0
        })
    }

    /// `rail` failed: its unacknowledged chunks, in message and chunk order, which the
    /// caller must resend elsewhere (and report with [`sent`](Self::sent) again).
    pub fn fail_rail(&mut self, rail: usize) -> Vec<ChunkId> {
        let mut lost: Vec<ChunkId> = self
            .on_rail
            .iter()
            .filter(|(_, &r)| r == rail)
            .map(|(&id, _)| id)
            .collect();
        for id in &lost {
            self.on_rail.remove(id);
        }
        lost.sort_unstable();
        lost
    }

    /// Unacknowledged chunks on the wire on `rail`.
    pub fn on_rail(&self, rail: usize) -> usize {
        self.on_rail.values().filter(|&&r| r == rail).count()
    }

    /// Messages not fully acknowledged.
    pub fn messages(&self) -> usize {
        self.msgs.len()
    }

    /// Forget everything (the connection failed for good).
    pub fn clear(&mut self) {
        self.msgs.clear();
        self.on_rail.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(msg: u64, index: u32) -> ChunkId {
        ChunkId { msg, index }
    }

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
        // Failed probes double the window up to 8×.
        h.probe_failed(&a, t + ms(100));
        assert!(!h.probe_due(&a, t + ms(299)));
        assert!(h.probe_due(&a, t + ms(300)));
        h.probe_failed(&a, t + ms(300));
        h.probe_failed(&a, t + ms(300));
        h.probe_failed(&a, t + ms(300));
        assert!(!h.probe_due(&a, t + ms(1099)));
        assert!(h.probe_due(&a, t + ms(1100)));
        assert_eq!(h.recovered(&a, t + ms(1200)), Some(ms(1200)));
        assert_eq!(h.recovered(&a, t + ms(1300)), None, "already up");
        assert!(h.is_up(&a));
        // A fresh failure starts from the base window again.
        assert!(h.fail(&a, t + ms(2000)));
        assert!(h.probe_due(&a, t + ms(2100)));
    }

    #[test]
    fn in_flight_resends_exactly_the_unacknowledged_chunks() {
        let mut f = InFlight::new();
        f.add_message(1, 3);
        f.add_message(2, 1);
        f.add_message(3, 0); // empty message: one chunk
        for (i, rail) in [(0, 0), (1, 1), (2, 0)] {
            f.sent(id(1, i), rail);
        }
        f.sent(id(2, 0), 0);
        f.sent(id(3, 0), 1);
        assert_eq!(f.on_rail(0), 3);
        assert_eq!(f.acked(id(1, 0)), None);
        assert_eq!(f.acked(id(1, 0)), None, "duplicate ack counts once");
        assert_eq!(f.acked(id(1, 7)), None, "out of range");
        assert_eq!(f.acked(id(9, 0)), None, "unknown message");
        assert_eq!(f.acked(id(3, 0)), Some(3));
        let lost = f.fail_rail(0);
        assert_eq!(lost, vec![id(1, 2), id(2, 0)]);
        assert_eq!(f.on_rail(0), 0);
        assert!(f.fail_rail(0).is_empty(), "nothing twice");
        for &c in &lost {
            f.sent(c, 1);
        }
        assert!(!f.is_acked(id(1, 2)) && f.is_acked(id(1, 0)));
        assert_eq!(f.acked(id(2, 0)), Some(2));
        assert_eq!(f.acked(id(1, 1)), None);
        assert_eq!(f.messages(), 1);
        assert_eq!(f.acked(id(1, 2)), Some(1));
        assert_eq!(f.messages(), 0);
        // A late ack from the failed rail's copy is ignored.
        assert_eq!(f.acked(id(1, 2)), None);
    }

    #[test]
    fn large_messages_use_many_bitmap_words() {
        let mut f = InFlight::new();
        f.add_message(5, 200);
        for i in 0..200 {
            f.sent(id(5, i), (i % 3) as usize);
        }
        for i in (0..200).rev().filter(|i| i % 3 != 1) {
            assert_eq!(f.acked(id(5, i)), None);
        }
        let lost = f.fail_rail(1);
        assert_eq!(lost.len(), (0..200).filter(|i| i % 3 == 1).count());
        assert!(lost.windows(2).all(|w| w[0] < w[1]));
        let last = lost.len() - 1;
        for (k, &c) in lost.iter().enumerate() {
            f.sent(c, 2);
            assert_eq!(f.acked(c), (k == last).then_some(5));
        }
    }
}
