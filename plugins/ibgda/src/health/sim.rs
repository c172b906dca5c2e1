//! A simulated fabric for the health tests: one sender, one receiver per peer,
//! two paths per peer whose every hop a policy may delay or drop. Time is simulated
//! ([`Nanos`]), events run in time order, ties in the order they were scheduled.

use super::{
    Action, Completion, HealthConfig, Nanos, Op, Path, PathFault, PeerError, PeerId, Receiver,
    Request, Sender, Seq,
};
use crate::health::Memory;
use crate::rng::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// Which way a hop goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    /// Request, sender to peer.
    Out,
    /// Completion, peer to sender.
    Back,
}

/// One hop the policy decides about.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hop {
    pub peer: PeerId,
    pub path: Path,
    pub dir: Dir,
    pub now: Nanos,
}

/// What happens to a hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Deliver(Duration),
    Drop,
}

pub(super) type Policy = Box<dyn FnMut(&mut Rng, Hop) -> Fate>;

#[derive(Debug, Clone, Copy)]
enum Event {
    Arrive {
        peer: PeerId,
        path: Path,
        req: Request,
    },
    Return(Completion),
}

/// The window memory of one peer, recording every application.
#[derive(Debug, Default)]
pub(super) struct LogMemory {
    pub words: BTreeMap<u64, u64>,
    /// (from, seq) → times applied.
    pub writes: BTreeMap<(PeerId, Seq), u32>,
    /// (from, seq) → (add, fetched) of each application.
    pub adds: BTreeMap<(PeerId, Seq), Vec<(u64, u64)>>,
}

impl Memory for LogMemory {
    fn write(&mut self, from: PeerId, seq: Seq, _dst: u64, _len: u32) {
        *self.writes.entry((from, seq)).or_default() += 1;
    }

    fn fetch_add(&mut self, from: PeerId, seq: Seq, dst: u64, add: u64) -> u64 {
        let w = self.words.entry(dst).or_default();
        let old = *w;
        *w = w.wrapping_add(add);
        self.adds.entry((from, seq)).or_default().push((add, old));
        old
    }
}

/// What the sender's actions said, in order, with their times.
#[derive(Debug, Default)]
pub(super) struct Log {
    pub actions: Vec<(Nanos, Action)>,
    pub completes: BTreeMap<(PeerId, Seq), Vec<Option<u64>>>,
    pub fails: BTreeMap<(PeerId, Seq), Vec<(Nanos, PeerError)>>,
    pub reports: Vec<(Nanos, PeerId, Path, PathFault)>,
    pub restored: Vec<(Nanos, PeerId, Path)>,
    /// Requests that reached a receiver (every copy).
    pub arrivals: u64,
}

pub(super) struct Sim {
    pub now: Nanos,
    pub sender: Sender,
    pub receivers: BTreeMap<PeerId, Receiver>,
    pub mems: BTreeMap<PeerId, LogMemory>,
    pub log: Log,
    pub rng: Rng,
    /// Ops posted, by (peer, seq).
    pub ops: BTreeMap<(PeerId, Seq), Op>,
    events: BTreeMap<(Nanos, u64), Event>,
    tie: u64,
    policy: Policy,
}

pub(super) const ME: PeerId = PeerId(0);

impl Sim {
    pub fn new(cfg: HealthConfig, peers: &[(PeerId, bool)], seed: u64, policy: Policy) -> Self {
        let mut sender = Sender::new(ME, cfg).expect("valid test config");
        let mut receivers = BTreeMap::new();
        let mut mems = BTreeMap::new();
        for &(p, backup) in peers {
            sender.add_peer(p, backup);
            receivers.insert(p, Receiver::new(p));
            mems.insert(p, LogMemory::default());
        }
        Sim {
            now: Nanos(0),
            sender,
            receivers,
            mems,
            log: Log::default(),
            rng: Rng::new(seed),
            ops: BTreeMap::new(),
            events: BTreeMap::new(),
            tie: 0,
            policy,
        }
    }

    /// Posts `op` to `peer` now and carries out the resulting actions.
    pub fn post(&mut self, peer: PeerId, op: Op) -> Result<Seq, super::PostError> {
        let seq = self.sender.post(peer, op, self.now)?;
        self.ops.insert((peer, seq), op);
        self.drain();
        Ok(seq)
    }

    /// Runs every event and deadline up to `t`, then sets the clock to `t`.
    pub fn run_until(&mut self, t: Nanos) {
        loop {
            let e = self.events.keys().next().map(|k| k.0);
            let d = self.sender.next_deadline();
            let next = match (e, d) {
                (Some(e), Some(d)) => e.min(d),
                (a, b) => match a.or(b) {
                    Some(x) => x,
                    None => break,
                },
            };
            if next > t {
                break;
            }
            self.now = next;
            if e == Some(next) {
                let Some((_, ev)) = self.events.pop_first() else {
                    break;
                };
                self.handle(ev);
            } else {
                self.sender.handle_timeout(next);
                // The contract that keeps a driver from spinning: after
                // `handle_timeout(now)` nothing is due at or before `now`.
                let after = self.sender.next_deadline();
                assert!(
                    after.is_none_or(|d| d > next),
                    "handle_timeout({next}) left a deadline at {after:?}"
                );
            }
            self.drain();
        }
        self.now = self.now.max(t);
    }

    /// Runs until nothing is in flight and no event is pending; false if that did
    /// not happen by `limit` (a hang).
    pub fn run_until_idle(&mut self, limit: Nanos) -> bool {
        while self.sender.total_in_flight() > 0 || !self.events.is_empty() {
            let e = self.events.keys().next().map(|k| k.0);
            let d = self.sender.next_deadline();
            let Some(next) = [e, d].into_iter().flatten().min() else {
                return false;
            };
            if next > limit {
                return false;
            }
            self.run_until(next);
        }
        true
    }

    fn schedule(&mut self, after: Duration, ev: Event) {
        self.tie += 1;
        self.events.insert((self.now.after(after), self.tie), ev);
    }

    fn fate(&mut self, peer: PeerId, path: Path, dir: Dir) -> Fate {
        let hop = Hop {
            peer,
            path,
            dir,
            now: self.now,
        };
        (self.policy)(&mut self.rng, hop)
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Arrive { peer, path, req } => {
                self.log.arrivals += 1;
                let (Some(rx), Some(mem)) =
                    (self.receivers.get_mut(&peer), self.mems.get_mut(&peer))
                else {
                    return;
                };
                if let Some(c) = rx.on_request(path, &req, mem) {
                    if let Fate::Deliver(d) = self.fate(peer, path, Dir::Back) {
                        self.schedule(d, Event::Return(c));
                    }
                }
            }
            Event::Return(c) => {
                self.sender
                    .on_completion(c, self.now)
                    .expect("completions come from posted requests");
            }
        }
    }

    fn drain(&mut self) {
        while let Some(a) = self.sender.poll_action() {
            self.log.actions.push((self.now, a));
            match a {
                Action::Post {
                    peer, path, req, ..
                } => {
                    if let Fate::Deliver(d) = self.fate(peer, path, Dir::Out) {
                        self.schedule(d, Event::Arrive { peer, path, req });
                    }
                }
                Action::Complete { peer, seq, fetched } => {
                    self.log
                        .completes
                        .entry((peer, seq))
                        .or_default()
                        .push(fetched);
                }
                Action::Fail { peer, seq, error } => {
                    self.log
                        .fails
                        .entry((peer, seq))
                        .or_default()
                        .push((self.now, error));
                }
                Action::Report { peer, path, why } => {
                    self.log.reports.push((self.now, peer, path, why));
                }
                Action::Restored { peer, path, .. } => {
                    self.log.restored.push((self.now, peer, path));
                }
            }
        }
    }

    /// Checks what must hold in every run, whatever the faults: each posted request
    /// resolved exactly once (completed xor failed); applied at most once; applied
    /// if completed; a completed fetch-add reports the value its one application
    /// fetched; each word's fetch-adds tile `[0, final)` without overlap.
    pub fn check_exactly_once(&self) {
        for (&(peer, seq), op) in &self.ops {
            let done = self.log.completes.get(&(peer, seq)).map_or(0, Vec::len);
            let failed = self.log.fails.get(&(peer, seq)).map_or(0, Vec::len);
            assert_eq!(
                done + failed,
                1,
                "{peer} {seq}: completed {done} times, failed {failed} times"
            );
            let mem = &self.mems[&peer];
            match op {
                Op::Write { .. } => {
                    let n = mem.writes.get(&(ME, seq)).copied().unwrap_or(0);
                    assert!(n <= 1, "{peer} {seq}: write applied {n} times");
                    if done == 1 {
                        assert_eq!(n, 1, "{peer} {seq}: completed but never applied");
                    }
                }
                Op::FetchAdd { add, .. } => {
                    let apps = mem.adds.get(&(ME, seq)).cloned().unwrap_or_default();
                    assert!(apps.len() <= 1, "{peer} {seq}: fetch-add applied {apps:?}");
                    if done == 1 {
                        assert_eq!(apps.len(), 1, "{peer} {seq}: completed but never applied");
                        assert_eq!(apps[0].0, *add);
                        let seen = self.log.completes[&(peer, seq)][0];
                        assert_eq!(seen, Some(apps[0].1), "{peer} {seq}: fetched value");
                    }
                }
            }
        }
        for (peer, mem) in &self.mems {
            let mut per_word: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
            for (&(_, seq), apps) in &mem.adds {
                if let Some(Op::FetchAdd { dst, .. }) = self.ops.get(&(*peer, seq)) {
                    for &(add, old) in apps {
                        per_word.entry(*dst).or_default().push((old, add));
                    }
                }
            }
            for (word, mut spans) in per_word {
                spans.sort_unstable();
                let mut at = 0u64;
                for (old, add) in spans {
                    assert_eq!(
                        old, at,
                        "{peer} word {word}: fetch-adds overlap or leave a gap"
                    );
                    at += add;
                }
                assert_eq!(at, mem.words[&word], "{peer} word {word}: final value");
            }
        }
    }
}
