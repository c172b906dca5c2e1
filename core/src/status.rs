//! What this rank is doing (its last operation, whether a thread waits in a call),
//! answered to any peer that asks over the bootstrap, and the hang report built from
//! every rank's answer (the comparison itself is `ferrocx_algo::status`, sans-IO).
//!
//! A timeout names one transfer; the report names the rank that never reached the
//! call. The rank whose wait expires asks every rank before it gives up and puts the
//! report in its error ([`Error::Hang`]); the abort notice carries it to the others.

use crate::bootstrap::Bootstrap;
use crate::error::Error;
use crate::plan::{Label, StageDone};
use ferrocx_algo::status::{crossed, report, CallRef, Phase, RankStatus};
use parking_lot::Mutex;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a report waits for the ranks' answers (each answers from a reader thread
/// at once; silent ranks are named as such).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// How long a [`Tracker::crossed`] query waits for the ranks' answers.
const CROSSED_WAIT: Duration = Duration::from_millis(500);
/// A wait this long asks whether it is crossed with a peer's ([`Tracker::crossed`]),
/// then after twice as long each time, up to [`CROSSED_MAX`].
const CROSSED_FIRST: Duration = Duration::from_millis(250);
const CROSSED_MAX: Duration = Duration::from_secs(8);

/// When a waiting thread runs [`Tracker::crossed`]: after [`CROSSED_FIRST`], then
/// backing off (a long wait for a slow rank costs a handful of queries).
pub(crate) struct CrossedCheck {
    next: Instant,
    every: Duration,
}

impl CrossedCheck {
    /// A wait starts now.
    pub fn new() -> Self {
        CrossedCheck {
            next: Instant::now() + CROSSED_FIRST,
            every: CROSSED_FIRST,
        }
    }

    /// How often to call [`poll`](Self::poll) at most usefully.
    pub const TICK: Duration = Duration::from_millis(100);

    /// The mismatch, when it is time to check and the check finds one.
    pub fn poll(&mut self, tracker: &Tracker, boot: &Bootstrap) -> Option<Error> {
        if Instant::now() < self.next {
            return None;
        }
        let found = tracker.crossed(boot);
        self.every = (self.every * 2).min(CROSSED_MAX);
        self.next = Instant::now() + self.every;
        found
    }
}

/// Query ids, so a late answer to an earlier query is not taken for a new one.
static NEXT_QUERY: AtomicU64 = AtomicU64::new(1);

struct Last {
    label: Label,
    /// Set once the operation is queued; `None` while it is being started (or ran
    /// synchronously on a collective plugin).
    done: Option<Arc<StageDone>>,
    running: bool,
    failed: bool,
}

/// States of a [`PluginCall`].
const RUNNING: u32 = 0;
const DONE: u32 = 1;
const FAILED: u32 = 2;

/// The last host-memory call a collective plugin ran, recorded without a lock or
/// a locked instruction: on the small-message path a call costs a few hundred
/// nanoseconds, and each atomic read-modify-write tens. A seqlock: the calling
/// thread (holding the communicator's collective lock) is the only writer; a
/// status query retries while a write is under way.
#[derive(Default)]
struct PluginCall {
    /// Odd while the record is being written.
    version: AtomicU64,
    /// The call's encoded fingerprint.
    fp: [AtomicU64; 4],
    /// Index into `Tracker::plugin_names`.
    plugin: AtomicU32,
    /// `RUNNING`, `DONE` or `FAILED`.
    state: AtomicU32,
}

/// This rank's last operation and its waiting threads.
#[derive(Default)]
pub(crate) struct Tracker {
    last: Mutex<Option<Last>>,
    /// The last operation is `plugin_call` (else `last`).
    plugin_last: AtomicBool,
    plugin_call: PluginCall,
    plugin_names: Mutex<Vec<Arc<str>>>,
    /// The crossed pair the last [`crossed`](Self::crossed) check saw.
    crossed_seen: Mutex<Option<(usize, String, usize, String)>>,
    /// No crossed checks (see [`calls_unchecked`](Self::calls_unchecked)).
    unchecked: AtomicBool,
    /// Collectives numbered so far (the next one's sequence number; see
    /// [`number_coll`](Self::number_coll)).
    colls_begun: AtomicU64,
    waiting: AtomicU32,
    /// One report at a time: concurrent ones would take each other's answers.
    asking: Mutex<()>,
}

/// Counts a thread as waiting in a call until dropped.
pub(crate) struct Waiting<'a>(&'a AtomicU32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Tracker {
    /// The call check is off (`FERROCX_CHECK_CALLS=0`): [`crossed`](Self::crossed)
    /// finds nothing (a mismatch is not looked for).
    pub fn calls_unchecked(&self) {
        self.unchecked.store(true, Ordering::Relaxed);
    }

    /// The collective plugins' names, by index (once, at creation).
    pub fn name_plugins(&self, names: Vec<Arc<str>>) {
        *self.plugin_names.lock() = names;
    }

    /// Collective plugin `plugin` starts running the call whose fingerprint
    /// encodes as `fp` on host memory, this thread waiting in it until
    /// [`plugin_end`](Self::plugin_end).
    pub fn plugin_begin(&self, fp: &[u8; 32], plugin: usize) {
        let c = &self.plugin_call;
        let v = c.version.load(Ordering::Relaxed);
        c.version.store(v.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, bytes) in c.fp.iter().zip(fp.chunks_exact(8)) {
            word.store(
                u64::from_le_bytes(bytes.try_into().expect("8 bytes")),
                Ordering::Relaxed,
            );
        }
        c.plugin.store(plugin as u32, Ordering::Relaxed);
        c.state.store(RUNNING, Ordering::Relaxed);
        c.version.store(v.wrapping_add(2), Ordering::Release);
        self.plugin_last.store(true, Ordering::Release);
    }

    /// The plugin's call returned.
    pub fn plugin_end(&self, ok: bool) {
        let state = if ok { DONE } else { FAILED };
        self.plugin_call.state.store(state, Ordering::Release);
    }

    /// The plugin call recorded last: its label, call and state.
    fn plugin_status(&self) -> (String, Option<CallRef>, u32) {
        let c = &self.plugin_call;
        loop {
            let v = c.version.load(Ordering::Acquire);
            if v % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut fp = [0u8; 32];
            for (bytes, word) in fp.chunks_exact_mut(8).zip(&c.fp) {
                bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
            }
            let plugin = c.plugin.load(Ordering::Relaxed) as usize;
            let state = c.state.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if c.version.load(Ordering::Relaxed) != v {
                continue;
            }
            let name = self.plugin_names.lock().get(plugin).cloned();
            return match (ferrocx_algo::Fingerprint::decode(&fp), name) {
                (Ok(fp), Some(name)) => (
                    Label::Plugin(fp, name).to_string(),
                    Some(CallRef::of(&fp)),
                    state,
                ),
                _ => ("a collective on a plugin".to_string(), None, state),
            };
        }
    }

    /// The next collective's sequence number, taken (equal on every rank: plugin
    /// dispatch and the call check use it). The count also lets the crossed
    /// check tell a peer behind (in a collective this rank made) from one in a
    /// call this rank never made.
    ///
    /// The caller holds the communicator's `coll_serial` lock, which orders
    /// every numbering: a load and a store, not a locked add, whose wait for
    /// the store buffer cost about a tenth of a small host call (session 35).
    pub fn number_coll(&self) -> u64 {
        let n = self.colls_begun.load(Ordering::Relaxed);
        self.colls_begun.store(n + 1, Ordering::Relaxed);
        n
    }

    /// Collectives numbered so far (the next one's sequence number).
    pub fn colls_begun(&self) -> u64 {
        self.colls_begun.load(Ordering::Relaxed)
    }

    /// An operation starts (`label`: e.g. the call's fingerprint).
    pub fn begin(&self, label: Label) {
        self.plugin_last.store(false, Ordering::Release);
        *self.last.lock() = Some(Last {
            label,
            done: None,
            running: true,
            failed: false,
        });
    }

    /// The operation begun last was queued; it is in flight until `done` completes.
    pub fn queued(&self, done: &Arc<StageDone>) {
        if let Some(l) = self.last.lock().as_mut() {
            l.done = Some(done.clone());
            l.running = false;
        }
    }

    /// An operation was queued at once (its connections existed): [`begin`](Self::begin)
    /// and [`queued`](Self::queued) in one update.
    pub fn queued_as(&self, label: Label, done: &Arc<StageDone>) {
        self.plugin_last.store(false, Ordering::Release);
        *self.last.lock() = Some(Last {
            label,
            done: Some(done.clone()),
            running: false,
            failed: false,
        });
    }

    /// The operation begun last finished without being queued (a collective plugin
    /// ran it).
    pub fn finished(&self) {
        if let Some(l) = self.last.lock().as_mut() {
            l.running = false;
        }
    }

    /// The operation begun last failed, or the communicator broke while it was in
    /// flight.
    pub fn failed(&self) {
        if self.plugin_last.load(Ordering::Acquire) {
            // Only a call still running failed (a finished one stays finished).
            let _ = self.plugin_call.state.compare_exchange(
                RUNNING,
                FAILED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            return;
        }
        if let Some(l) = self.last.lock().as_mut() {
            if l.running || l.done.as_ref().is_some_and(|d| !d.is_done()) {
                l.failed = true;
            }
            l.running = false;
        }
    }

    /// A thread waits in a call until the guard drops.
    pub fn waiting(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(&self.waiting)
    }

    pub fn status(&self) -> RankStatus {
        if self.plugin_last.load(Ordering::Acquire) {
            let (label, call, state) = self.plugin_status();
            let running = state == RUNNING;
            let phase = match state {
                RUNNING => Phase::InFlight(label),
                FAILED => Phase::Failed(label),
                _ => Phase::Past(label),
            };
            return RankStatus {
                phase,
                // A host call blocks its thread until the plugin returns.
                waiting: running || self.waiting.load(Ordering::Acquire) > 0,
                call,
                colls_begun: self.colls_begun(),
            };
        }
        let last = self.last.lock();
        let phase = match last.as_ref() {
            None => Phase::NoCall,
            Some(l) if l.failed => Phase::Failed(l.label.to_string()),
            Some(l) if l.running || l.done.as_ref().is_some_and(|d| !d.is_done()) => {
                Phase::InFlight(l.label.to_string())
            }
            Some(l) => Phase::Past(l.label.to_string()),
        };
        let call = match last.as_ref().map(|l| &l.label) {
            Some(Label::Call(fp, 0) | Label::Plugin(fp, _)) => Some(CallRef::of(fp)),
            _ => None,
        };
        RankStatus {
            phase,
            waiting: self.waiting.load(Ordering::Acquire) > 0,
            call,
            colls_begun: self.colls_begun(),
        }
    }

    /// Every rank's status (this one's from here), asked over `boot`; `None` for ranks
    /// that did not answer within `limit` (at most [`ANSWER_WAIT`]).
    pub fn gather(&self, boot: &Bootstrap, limit: Duration) -> Vec<Option<RankStatus>> {
        let _one = self.asking.lock();
        let id = NEXT_QUERY.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + limit.min(ANSWER_WAIT);
        let mut all: Vec<Option<RankStatus>> = boot
            .query_status(&id.to_le_bytes(), deadline)
            .into_iter()
            .map(|a| a.and_then(|b| RankStatus::decode(&b)))
            .collect();
        all[boot.rank()] = Some(self.status());
        all
    }

    /// For a wait that has lasted ([`CrossedCheck`]):
    /// ask every rank where it is, and when two ranks are blocked on each other in
    /// different calls — one in a send or receive with the other, the other in a
    /// collective the first has not begun; or both in one collective on two paths
    /// (`ferrocx_algo::status::crossed`) — and the previous check saw the same, that
    /// is the mismatch to fail with. The call checks cannot see it when the two calls
    /// travel different paths (a send on the core's connections, a small collective
    /// on shm-coll's mailboxes; a collective grouped on one rank, which the core
    /// runs, and not on another, where shm-coll does); without this the ranks would
    /// wait for `FERROCX_TIMEOUT`.
    pub fn crossed(&self, boot: &Bootstrap) -> Option<Error> {
        // Only a rank waiting in a single call can be in such a pair.
        if boot.nranks() < 2
            || self.unchecked.load(Ordering::Relaxed)
            || self.status().call.is_none()
        {
            return None;
        }
        let found = crossed(&self.gather(boot, CROSSED_WAIT));
        let mut seen = self.crossed_seen.lock();
        match found {
            Some(f) if seen.as_ref() == Some(&f) => {
                let (a, call_a, b, call_b) = f;
                Some(Error::mismatch(a, call_a, b, call_b))
            }
            other => {
                *seen = other;
                None
            }
        }
    }

    /// The report for the whole communicator, e.g. `rank 2 is past … ; ranks 0,1 wait in …`.
    pub fn report(&self, boot: &Bootstrap, limit: Duration) -> String {
        report(&self.gather(boot, limit))
    }

    /// A timeout becomes [`Error::Hang`] with every rank's status; other errors pass.
    pub fn attribute(&self, boot: &Bootstrap, err: Error) -> Error {
        if !matches!(err, Error::Timeout { .. }) || boot.nranks() < 2 {
            return err;
        }
        // Two ranks often time out together: the report of the one that asked first
        // saw everyone, while the other may find it gone already.
        let theirs = || {
            boot.abort_notice()
                .map(|(from, reason)| Error::from_abort(from, &reason))
                .filter(|e| matches!(e, Error::Hang { .. }))
        };
        if let Some(h) = theirs() {
            return h;
        }
        let all = self.gather(boot, boot.timeout());
        if all.iter().any(Option::is_none) {
            if let Some(h) = theirs() {
                return h;
            }
        }
        let report = report(&all);
        Error::Hang {
            rank: boot.rank(),
            waited: err.to_string(),
            report,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_operation_is_in_flight_until_its_counter_completes() {
        let t = Tracker::default();
        assert_eq!(t.status().phase, Phase::NoCall);
        t.begin(Label::Text("op A".into()));
        assert_eq!(t.status().phase, Phase::InFlight("op A".into()));
        let done = StageDone::new(1);
        t.queued(&done);
        {
            let _w = t.waiting();
            let s = t.status();
            assert_eq!(s.phase, Phase::InFlight("op A".into()));
            assert!(s.waiting);
        }
        assert!(!t.status().waiting);
        done.finish(None);
        assert_eq!(t.status().phase, Phase::Past("op A".into()));
        t.begin(Label::Text("op B".into()));
        t.finished();
        assert_eq!(
            t.status().phase,
            Phase::Past("op B".into()),
            "ran on a plugin"
        );
        t.begin(Label::Text("op C".into()));
        t.failed();
        assert_eq!(t.status().phase, Phase::Failed("op C".into()), "refused");
        t.begin(Label::Text("op D".into()));
        let d = StageDone::new(1);
        t.queued(&d);
        t.failed();
        assert_eq!(
            t.status().phase,
            Phase::Failed("op D".into()),
            "broke in flight"
        );
        d.finish(None);
        assert_eq!(t.status().phase, Phase::Failed("op D".into()));
    }
}
