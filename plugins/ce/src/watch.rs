//! The watchdog's decisions (sans-IO): which queued collectives are still
//! pending, which one is overdue, and — from a snapshot of this rank's eager
//! flag arrays — which ranks it is waiting for. `watchdog.rs` polls the
//! events, reads the flags and releases the stream; this file only decides.

use crate::sync::{Array, Barrier, Cmp, Mode};
use ferrocx_sdk::collective::P2pOp;
use ferrocx_sdk::PluginError;
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// One eager barrier a tracked collective waits at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// Its ordinal among the communicator's eager barriers.
    pub index: u64,
    /// Its array.
    pub array: Array,
    /// The value every peer writes into this rank's slot for it.
    pub value: u32,
}

impl Expect {
    /// What the watchdog expects of an eager barrier.
    pub fn of(b: &Barrier) -> Self {
        debug_assert_eq!(b.mode, Mode::Eager);
        Expect {
            index: b.index,
            array: b.array,
            value: b.value,
        }
    }
}

/// What a tracked call is, for messages ("alltoall of 4096 bytes per rank"),
/// kept as numbers: every launch makes one and only an error reads it, so
/// the text is made then (a launch formatting it cost an allocation, and a
/// free at retirement: thousands at once after a long queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// A collective: its name, bytes per rank, its root where rooted, and the
    /// kernel that runs it (`None`: a barrier route).
    Coll {
        /// The collective's name.
        name: &'static str,
        /// Bytes per rank.
        block: usize,
        /// The root, for rooted collectives.
        root: Option<usize>,
        /// The kernel's name (`Exchange::name`).
        kernel: Option<&'static str>,
    },
    /// A point-to-point kernel's group: its first two ops, and how many it
    /// sends and receives.
    P2p {
        /// The first two ops.
        first: [Option<P2pOp>; 2],
        /// Sends in the group.
        sends: usize,
        /// Receives in the group.
        recvs: usize,
    },
}

impl What {
    /// A point-to-point group `ops`.
    pub fn p2p(ops: &[P2pOp]) -> Self {
        let sends = ops
            .iter()
            .filter(|o| o.dir == ferrocx_sdk::collective::P2pDir::Send)
            .count();
        What::P2p {
            first: [ops.first().copied(), ops.get(1).copied()],
            sends,
            recvs: ops.len() - sends,
        }
    }
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ferrocx_sdk::collective::P2pDir;
        let one = |f: &mut fmt::Formatter<'_>, op: &P2pOp| match op.dir {
            P2pDir::Send => write!(f, "send of {} bytes to rank {}", op.bytes, op.peer),
            P2pDir::Recv => write!(f, "receive of {} bytes from rank {}", op.bytes, op.peer),
        };
        match self {
            What::Coll {
                name,
                block,
                root,
                kernel,
            } => {
                write!(f, "{name} of {block} bytes per rank")?;
                if let Some(r) = root {
                    write!(f, ", root {r}")?;
                }
                match kernel {
                    Some(k) => write!(f, " ({k})"),
                    None => Ok(()),
                }
            }
            What::P2p {
                first: [Some(a), b],
                sends,
                recvs,
            } if sends + recvs <= 2 => {
                one(f, a)?;
                match b {
                    Some(b) => {
                        write!(f, " and ")?;
                        one(f, b)
                    }
                    None => Ok(()),
                }
            }
            What::P2p { sends, recvs, .. } => write!(f, "{sends} sends and {recvs} receives"),
        }
    }
}

/// One collective queued on a stream, tracked until its event completes.
#[derive(Debug)]
pub struct Entry<E> {
    /// The communicator's collective sequence number.
    pub seq: u64,
    /// What it is, for messages.
    pub what: What,
    /// Its barriers, in stream order.
    pub expects: Vec<Expect>,
    /// Completes once the stream passed the collective.
    pub event: E,
    /// When it is declared stuck.
    pub deadline: Instant,
    /// Its note `(seq, value)` when calls are checked (`crate::notes`).
    pub note: Option<(u64, crate::notes::Call)>,
}

/// The bit that marks an entry's `seq` as a point-to-point kernel's number
/// (its own count, not the collectives'): such entries carry no note.
pub const P2P_SEQ: u64 = 1 << 63;

impl<E> Entry<E> {
    /// "ce collective #7 (alltoall of …)" or "ce point-to-point call #3 (send of …)".
    pub fn label(&self) -> String {
        if self.seq & P2P_SEQ != 0 {
            format!(
                "ce point-to-point call #{} ({})",
                self.seq & !P2P_SEQ,
                self.what
            )
        } else {
            format!("ce collective #{} ({})", self.seq, self.what)
        }
    }
}

/// Pending entries below a failed probe from which [`Tracker::retire_front`]
/// gallops from the oldest instead of bisecting: launches keep about 32
/// tracked while the GPU keeps up (`watchdog::RETIRE_AT`), so more means a
/// GPU far behind the host, with few completed since the last look.
pub const GALLOP_ABOVE: usize = 64;

/// The pending collectives of one communicator, oldest first.
#[derive(Debug)]
pub struct Tracker<E> {
    entries: VecDeque<Entry<E>>,
    /// Entries that wait at barriers (asked on every launch: kept, not scanned).
    barriers: usize,
}

impl<E> Default for Tracker<E> {
    fn default() -> Self {
        Tracker {
            entries: VecDeque::new(),
            barriers: 0,
        }
    }
}

impl<E> Tracker<E> {
    /// Track one more collective.
    pub fn push(&mut self, e: Entry<E>) {
        self.barriers += usize::from(!e.expects.is_empty());
        self.entries.push_back(e);
    }

    /// Drop the oldest entries whose event completed, at most `most` of
    /// them; they come back (their events for reuse, their notes to check).
    /// Launches are ordered (`Watchdog::order` chains streams), so the
    /// completed entries are a prefix. The entry `behind` places before the
    /// newest is asked first (the newest itself with `behind` 0, or when
    /// fewer are tracked; the `most`-th oldest when that lies further back):
    /// where it completed, the prefix through it goes — one query where a
    /// host-bound stream of calls keeps the GPU a call or two behind it,
    /// whose newest entry is still pending. Otherwise the prefix ends below
    /// it and is found by bisection (about log2(n) queries), or with more
    /// than [`GALLOP_ABOVE`] below it by galloping from the oldest first
    /// (entries 0, 2, 6, 14, …, then bisection: about 2·log2(k) for k
    /// completed): a GPU that far behind the host finished a call or two
    /// since the last launch, found in two or three queries rather than
    /// log2 of everything pending. `most` bounds a launch's work after a long
    /// queue drained: thousands completed at once go over several launches.
    pub fn retire_front(
        &mut self,
        behind: usize,
        most: usize,
        mut done: impl FnMut(&E) -> bool,
    ) -> Vec<Entry<E>> {
        let n = self.entries.len().min(most);
        if n == 0 {
            return Vec::new();
        }
        let newest = self.entries.len() - 1;
        let probe = if behind < newest + 1 {
            newest - behind
        } else {
            newest
        }
        .min(n - 1);
        if done(&self.entries[probe].event) {
            let out: Vec<_> = self.entries.drain(..=probe).collect();
            return self.forget(out);
        }
        // entries[..lo] completed, entries[hi..] pending.
        let (mut lo, mut hi) = (0, probe);
        let mut step = 1;
        while hi > GALLOP_ABOVE && lo < hi {
            let at = (lo + step - 1).min(hi - 1);
            if done(&self.entries[at].event) {
                lo = at + 1;
                step *= 2;
            } else {
                hi = at;
                break;
            }
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if done(&self.entries[mid].event) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let out: Vec<_> = self.entries.drain(..lo).collect();
        self.forget(out)
    }

    /// Counts `gone` (just removed) out of the barrier entries.
    fn forget(&mut self, gone: Vec<Entry<E>>) -> Vec<Entry<E>> {
        self.barriers -= gone.iter().filter(|e| !e.expects.is_empty()).count();
        gone
    }

    /// The oldest pending entry whose deadline passed.
    pub fn overdue(&self, now: Instant) -> Option<&Entry<E>> {
        self.entries.iter().find(|e| e.deadline <= now)
    }

    /// The oldest pending entry.
    pub fn oldest(&self) -> Option<&Entry<E>> {
        self.entries.front()
    }

    /// The oldest pending entry that waits at barriers (LL calls do not).
    pub fn oldest_with_barriers(&self) -> Option<&Entry<E>> {
        if self.barriers == 0 {
            return None;
        }
        self.entries.iter().find(|e| !e.expects.is_empty())
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.deadline).min()
    }

    /// The event of the newest entry.
    pub fn last_event(&self) -> Option<&E> {
        self.entries.back().map(|e| &e.event)
    }

    /// Forget everything; the events come back.
    pub fn clear(&mut self) -> Vec<E> {
        self.barriers = 0;
        self.entries.drain(..).map(|e| e.event).collect()
    }

    /// Entries pending.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// This rank's eager flag arrays as read from the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The eager-ready array, one slot per rank.
    pub ready: Vec<u32>,
    /// The eager-complete array.
    pub complete: Vec<u32>,
}

impl Snapshot {
    /// The slots of `array` (an eager one).
    pub fn slots(&self, array: Array) -> &[u32] {
        match array {
            Array::EagerComplete => &self.complete,
            _ => &self.ready,
        }
    }
}

/// Where a stuck collective waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    /// Position of the barrier in the collective's list.
    pub at: usize,
    /// The ranks whose slot is still below the barrier's value.
    pub missing: Vec<usize>,
}

/// The first barrier of `expects` (in stream order: the one the stream waits
/// at) with peers that have not arrived (their slot is behind its value,
/// compared as the stream does: cyclically), and those peers; `None` when
/// every peer arrived at every barrier.
pub fn missing(me: usize, expects: &[Expect], snap: &Snapshot) -> Option<Stuck> {
    expects.iter().enumerate().find_map(|(at, x)| {
        let slots = snap.slots(x.array);
        let missing: Vec<usize> = slots
            .iter()
            .enumerate()
            .filter(|&(r, &v)| r != me && !Cmp::Geq.holds(v, x.value))
            .map(|(r, _)| r)
            .collect();
        (!missing.is_empty()).then_some(Stuck { at, missing })
    })
}

/// How far past the oldest pending barrier the release value lies.
pub const RELEASE_AHEAD: u32 = 1 << 30;

/// The value that releases every eager wait of this rank's stream: 2³⁰ past
/// the value of the oldest pending barrier. Compared cyclically (`GEQ`), it
/// satisfies every value from 2³⁰ before that barrier's to 2³⁰ after it —
/// every barrier pending on the stream, of either array, and any a racing
/// launch may still queue — while `0xFFFF_FFFF` would lie *behind* every
/// value below 2³¹.
pub fn release_value(oldest: &[Expect]) -> u32 {
    oldest
        .first()
        .map_or(0, |x| x.value)
        .wrapping_add(RELEASE_AHEAD)
}

/// "rank 1", "rank 1 and rank 3", "rank 1, rank 3 and rank 5": every rank
/// named on its own, so a message names "rank 3" whatever else is missing.
fn ranks(list: &[usize]) -> String {
    let names: Vec<String> = list.iter().map(|r| format!("rank {r}")).collect();
    match names.split_last() {
        None => "no rank".into(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Why the watchdog released a stream: the error that breaks the communicator.
///
/// * `read`: the snapshot of this rank's flags, or why it could not be read.
/// * `released`: `Err(why)` when the release itself may not have happened.
pub fn verdict<E>(
    me: usize,
    entry: &Entry<E>,
    timeout: Duration,
    read: &Result<Snapshot, String>,
    released: &Result<(), String>,
) -> PluginError {
    let what = entry.label();
    let tail = match released {
        Ok(()) => "; the stream was released and the communicator is broken".to_string(),
        Err(why) => format!("; releasing the stream failed ({why}); the communicator is broken"),
    };
    let secs = timeout.as_secs_f64();
    if entry.expects.is_empty() {
        // An LL call: its kernel waits for the peers' lines, not at barriers.
        return PluginError::timeout(format!(
            "{what} did not complete within {secs}s on rank {me}: its kernel still waited for a peer's data (a peer that never made this call, or died){tail}"
        ));
    }
    match read {
        Ok(snap) => match missing(me, &entry.expects, snap) {
            Some(s) => {
                let x = &entry.expects[s.at];
                PluginError::remote(format!(
                    "{} never arrived at {what} within {secs}s: rank {me} waited at barrier {} of {} ({}, value {}){tail}",
                    ranks(&s.missing),
                    s.at + 1,
                    entry.expects.len(),
                    x.array.name(),
                    x.value,
                ))
            }
            None => PluginError::timeout(format!(
                "{what} did not complete within {secs}s on rank {me} although every rank arrived at its barriers: the stream is held up by work queued before or inside it{tail}"
            )),
        },
        Err(why) => PluginError::timeout(format!(
            "{what} did not complete within {secs}s on rank {me}; its flags could not be read ({why}){tail}"
        )),
    }
}

/// The error when the communicator was aborted with collectives queued.
pub fn aborted<E>(me: usize, entry: &Entry<E>, released: &Result<(), String>) -> PluginError {
    let tail = match released {
        Ok(()) => "the stream was released".to_string(),
        Err(why) => format!("releasing the stream failed ({why})"),
    };
    PluginError::remote(format!(
        "the communicator was aborted while {} was queued on rank {me}: {tail}",
        entry.label()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::abi::{FX_REMOTE, FX_TIMEOUT};

    fn entry(expects: Vec<Expect>, ev: u32, deadline: Instant) -> Entry<u32> {
        Entry {
            seq: 7,
            what: What::Coll {
                name: "alltoall",
                block: 64,
                root: None,
                kernel: None,
            },
            expects,
            event: ev,
            deadline,
            note: None,
        }
    }

    fn x(index: u64, array: Array, value: u32) -> Expect {
        Expect {
            index,
            array,
            value,
        }
    }

    #[test]
    fn tracker_retires_done_entries_and_finds_the_overdue() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = Tracker::default();
        for i in 0..4 {
            t.push(entry(vec![], i, t0 + s * (i + 1)));
        }
        assert_eq!(t.next_deadline(), Some(t0 + s));
        assert_eq!(t.last_event(), Some(&3));
        // Front only: stops at the first pending one (the newest is pending).
        let events = |v: Vec<Entry<u32>>| v.into_iter().map(|e| e.event).collect::<Vec<_>>();
        assert_eq!(events(t.retire_front(0, usize::MAX, |&e| e == 0)), vec![0]);
        assert_eq!(t.len(), 3);
        // The oldest pending: none completed.
        assert!(t.retire_front(0, usize::MAX, |_| false).is_empty());
        assert_eq!(t.len(), 3);
        assert!(t.overdue(t0).is_none());
        assert_eq!(t.overdue(t0 + s * 5).map(|e| e.event), Some(1));
        assert_eq!(t.oldest().map(|e| e.event), Some(1));
        assert_eq!(t.clear(), vec![1, 2, 3]);
        assert!(t.is_empty() && t.next_deadline().is_none());
    }

    /// The kept count of barrier entries follows pushes and every way out.
    #[test]
    fn tracker_finds_the_oldest_barrier_entry_as_entries_come_and_go() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        let b = |ev| entry(vec![x(0, Array::EagerReady, 1)], ev, t0);
        t.push(entry(vec![], 0, t0));
        assert!(t.oldest_with_barriers().is_none());
        t.push(b(1));
        t.push(b(2));
        t.push(entry(vec![], 3, t0));
        assert_eq!(t.oldest_with_barriers().map(|e| e.event), Some(1));
        t.retire_front(0, usize::MAX, |&e| e <= 1);
        assert_eq!(t.oldest_with_barriers().map(|e| e.event), Some(2));
        t.retire_front(0, usize::MAX, |&e| e <= 2);
        assert!(t.oldest_with_barriers().is_none());
        t.push(b(4));
        assert_eq!(t.oldest_with_barriers().map(|e| e.event), Some(4));
        t.retire_front(0, usize::MAX, |_| true);
        assert!(t.oldest_with_barriers().is_none());
        t.push(b(5));
        t.clear();
        t.push(entry(vec![], 6, t0));
        assert!(t.oldest_with_barriers().is_none());
    }

    #[test]
    fn tracker_retires_everything_after_one_query_when_the_newest_completed() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        for i in 0..5 {
            t.push(entry(vec![], i, t0));
        }
        let mut asked = Vec::new();
        let freed = t.retire_front(0, usize::MAX, |&e| {
            asked.push(e);
            true
        });
        assert_eq!(asked, vec![4], "only the newest is queried");
        assert_eq!(
            freed.iter().map(|e| e.event).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert!(t.is_empty());
        // Newest pending: bisection, a few queries for many entries.
        for i in 0..32 {
            t.push(entry(vec![], i, t0));
        }
        let mut n = 0;
        let freed = t.retire_front(0, usize::MAX, |&e| {
            n += 1;
            e < 20
        });
        assert_eq!(freed.len(), 20);
        assert!(n <= 7, "{n} queries for 32 entries");
        assert_eq!(t.oldest().map(|e| e.event), Some(20));
        t.clear();
        // One entry: asked once, not twice.
        t.push(entry(vec![], 9, t0));
        let mut n = 0;
        assert_eq!(
            t.retire_front(0, usize::MAX, |_| {
                n += 1;
                true
            })
            .len(),
            1
        );
        assert_eq!(n, 1);
    }

    /// Asked from `behind` places before the newest: one query retires all
    /// but the newest `behind` where the GPU is a few calls behind the host;
    /// a GPU further behind costs the bisection below the probe; fewer
    /// entries than that ask the newest.
    #[test]
    fn tracker_asks_behind_the_newest_first() {
        let t0 = Instant::now();
        let filled = |n: u32| {
            let mut t = Tracker::default();
            for i in 0..n {
                t.push(entry(vec![], i, t0));
            }
            t
        };
        let events = |v: Vec<Entry<u32>>| v.into_iter().map(|e| e.event).collect::<Vec<_>>();
        // 32 tracked, the newest two pending: one query (entry 23), 24 retired.
        let mut t = filled(32);
        let mut asked = Vec::new();
        let freed = t.retire_front(8, usize::MAX, |&e| {
            asked.push(e);
            e < 30
        });
        assert_eq!(asked, vec![23]);
        assert_eq!(events(freed), (0..24).collect::<Vec<_>>());
        assert_eq!(t.oldest().map(|e| e.event), Some(24));
        // The GPU 12 calls behind: the probe is pending, the prefix (20) is
        // found below it.
        let mut t = filled(32);
        let mut n = 0;
        let freed = t.retire_front(8, usize::MAX, |&e| {
            n += 1;
            e < 20
        });
        assert_eq!(freed.len(), 20);
        assert!(n <= 6, "{n} queries for 32 entries");
        assert_eq!(t.oldest().map(|e| e.event), Some(20));
        // The completed prefix ends at the probe: bisection retires 23.
        let mut t = filled(32);
        assert_eq!(t.retire_front(8, usize::MAX, |&e| e < 23).len(), 23);
        assert_eq!(t.oldest().map(|e| e.event), Some(23));
        // All completed: all but the newest 8 retired, after one query.
        let mut t = filled(20);
        let mut n = 0;
        let freed = t.retire_front(8, usize::MAX, |_| {
            n += 1;
            true
        });
        assert_eq!((n, freed.len(), t.len()), (1, 12, 8));
        // One more than `behind`: the probe is the oldest.
        let mut t = filled(9);
        let mut asked = Vec::new();
        let freed = t.retire_front(8, usize::MAX, |&e| {
            asked.push(e);
            false
        });
        assert_eq!((asked, freed.len()), (vec![0], 0));
        // None completed: nothing retired.
        let mut t = filled(32);
        assert!(t.retire_front(8, usize::MAX, |_| false).is_empty());
        assert_eq!(t.len(), 32);
        // At most `behind`: the newest is asked (one entry: once).
        let mut t = filled(1);
        let mut n = 0;
        assert_eq!(
            t.retire_front(8, usize::MAX, |_| {
                n += 1;
                true
            })
            .len(),
            1
        );
        assert_eq!(n, 1);
        let mut t = filled(5);
        let mut asked = Vec::new();
        let freed = t.retire_front(8, usize::MAX, |&e| {
            asked.push(e);
            true
        });
        assert_eq!((asked, freed.len()), (vec![4], 5));
        assert!(t.is_empty());
    }

    /// A GPU far behind the host: with thousands pending and one or two
    /// completed, a few queries find them (galloping from the oldest); a
    /// long queue that completed whole goes `most` at a time, one query each.
    #[test]
    fn tracker_gallops_when_far_behind_and_retires_at_most_most() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        for i in 0..4000u32 {
            t.push(entry(vec![], i, t0));
        }
        for k in [0u32, 1, 2, 5, 40, 1000] {
            let mut t2 = Tracker::default();
            for i in 0..4000u32 {
                t2.push(entry(vec![], i, t0));
            }
            let mut n = 0;
            let freed = t2.retire_front(8, usize::MAX, |&e| {
                n += 1;
                e < k
            });
            assert_eq!(freed.len(), k as usize);
            assert_eq!(t2.oldest().map(|e| e.event), Some(k));
            let bound = 2 + 2 * (32 - k.leading_zeros());
            assert!(n <= bound, "{n} queries for {k} completed of 4000");
        }
        // Everything completed (a queue drained): 128 a launch, one query each.
        for round in 0..3u32 {
            let mut n = 0;
            let freed = t.retire_front(8, 128, |_| {
                n += 1;
                true
            });
            assert_eq!((n, freed.len()), (1, 128));
            assert_eq!(freed[0].event, round * 128);
        }
        // `most` also bounds what a probe that failed leaves to find.
        let mut n = 0;
        let freed = t.retire_front(8, 128, |&e| {
            n += 1;
            e < 500
        });
        assert_eq!(freed.len(), 116, "to entry 499");
        assert!(n <= 2 + 2 * 7, "{n}");
        assert_eq!(t.oldest().map(|e| e.event), Some(500));
    }

    #[test]
    fn names_the_ranks_below_the_first_unmet_barrier() {
        // Rank 0 of 4 waits in its second barrier (complete, value 3); rank 2
        // never wrote it, rank 3 is a barrier ahead... of nothing: arrived.
        let xs = [x(4, Array::EagerReady, 3), x(5, Array::EagerComplete, 3)];
        let snap = Snapshot {
            ready: vec![0, 3, 3, 3],
            complete: vec![0, 3, 2, 4],
        };
        assert_eq!(
            missing(0, &xs, &snap),
            Some(Stuck {
                at: 1,
                missing: vec![2]
            })
        );
        let snap2 = Snapshot {
            ready: vec![0, 2, 3, 2],
            complete: vec![0, 2, 2, 2],
        };
        assert_eq!(
            missing(0, &xs, &snap2),
            Some(Stuck {
                at: 0,
                missing: vec![1, 3]
            })
        );
        let all = Snapshot {
            ready: vec![0, 3, 3, 3],
            complete: vec![9, 3, 3, 3],
        };
        assert_eq!(missing(0, &xs, &all), None, "own slot ignored");
        // Across the wraparound: 0 is one past u32::MAX.
        let wrap = [x(8, Array::EagerReady, 0), x(9, Array::EagerComplete, 0)];
        let snap3 = Snapshot {
            ready: vec![0, 0, 1],
            complete: vec![0, 0, u32::MAX],
        };
        assert_eq!(
            missing(0, &wrap, &snap3),
            Some(Stuck {
                at: 1,
                missing: vec![2]
            })
        );
    }

    #[test]
    fn the_release_value_passes_every_pending_wait_of_both_arrays() {
        for v0 in [1u32, 7, 1 << 31, u32::MAX - 2, u32::MAX] {
            let r = release_value(&[x(0, Array::EagerReady, v0)]);
            // Pending barriers: v0 - 1 ..= v0 + 1000 (either array), and a slot at v0 - 1.
            for d in 0..1000u32 {
                assert!(Cmp::Geq.holds(r, v0.wrapping_add(d)), "v0 {v0} + {d}");
            }
            assert!(Cmp::Geq.holds(r, v0.wrapping_sub(1)));
        }
        assert!(!Cmp::Geq.holds(u32::MAX, 1), "why not 0xFFFF_FFFF");
    }

    #[test]
    fn verdicts_say_who_what_and_how() {
        let t = Instant::now();
        let e = entry(
            vec![x(0, Array::EagerReady, 1), x(1, Array::EagerComplete, 1)],
            0,
            t,
        );
        let snap = Snapshot {
            ready: vec![1, 1, 0],
            complete: vec![0, 0, 0],
        };
        let err = verdict(1, &e, Duration::from_secs(10), &Ok(snap), &Ok(()));
        assert_eq!(err.code(), FX_REMOTE);
        let m = err.message();
        assert!(
            m.starts_with("rank 2 never arrived at ce collective #7 (alltoall"),
            "{m}"
        );
        assert!(m.contains("barrier 1 of 2 (ready, value 1)"), "{m}");
        assert!(m.contains("released"), "{m}");
        let two = Snapshot {
            ready: vec![1, 1, 1],
            complete: vec![0, 1, 0],
        };
        let m = verdict(1, &e, Duration::from_secs(1), &Ok(two), &Err("x".into()));
        assert!(
            m.message().starts_with("rank 0 and rank 2 never arrived"),
            "{m}"
        );
        assert_eq!(ranks(&[1, 3, 5]), "rank 1, rank 3 and rank 5");
        assert!(
            m.message().contains("releasing the stream failed (x)"),
            "{m}"
        );
        let none = Snapshot {
            ready: vec![1, 1, 1],
            complete: vec![1, 1, 1],
        };
        let m = verdict(1, &e, Duration::from_secs(1), &Ok(none), &Ok(()));
        assert_eq!(m.code(), FX_TIMEOUT);
        assert!(m.message().contains("every rank arrived"), "{m}");
        let m = verdict(1, &e, Duration::from_secs(1), &Err("no".into()), &Ok(()));
        assert!(m.message().contains("could not be read (no)"), "{m}");
        let m = aborted(1, &e, &Ok(()));
        assert!(
            m.message().contains("aborted") && m.message().contains("#7"),
            "{m}"
        );
    }
}
