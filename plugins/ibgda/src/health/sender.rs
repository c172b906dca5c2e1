//! The sending side: requests in flight per peer, their deadlines, failover and
//! the switch back.

use super::{
    Completion, ConfigError, HealthConfig, Nanos, Op, Path, PathFault, PathHealth, PeerError,
    PeerId, PostError, Request, Seq, UnknownCompletion,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// What the sender asks its caller to do or tells it, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Write `req` into the send queue of `path` to `peer` and ring its doorbell.
    /// `attempt` is 0 for the first post, 1 for the re-post after a failover, ….
    Post {
        /// The peer.
        peer: PeerId,
        /// The path to post on.
        path: Path,
        /// The request.
        req: Request,
        /// How many times it was posted before.
        attempt: u32,
    },
    /// `path` to `peer` was just marked bad (once per transition, not per failed
    /// request).
    Report {
        /// The peer.
        peer: PeerId,
        /// The path marked bad.
        path: Path,
        /// Why.
        why: PathFault,
    },
    /// `path` to `peer` went a recovery window without failure and is usable
    /// again; for the primary, new traffic goes back to it from now on.
    Restored {
        /// The peer.
        peer: PeerId,
        /// The path taken back.
        path: Path,
        /// How long it was down.
        down_for: Duration,
    },
    /// The request completed; for a fetch-add, with the value it fetched.
    Complete {
        /// The peer.
        peer: PeerId,
        /// The request.
        seq: Seq,
        /// The fetched value (fetch-add) or `None` (write).
        fetched: Option<u64>,
    },
    /// The request failed because its peer became unreachable. It may or may not
    /// have been applied at the peer (its data may have landed with only the
    /// completion lost); it was not applied twice.
    Fail {
        /// The peer.
        peer: PeerId,
        /// The request.
        seq: Seq,
        /// Why the peer is unreachable, naming both paths.
        error: PeerError,
    },
}

/// Counters, for tests and `fxinfo`-style reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Requests posted for the first time.
    pub posted: u64,
    /// Re-posts on the other path after a failure.
    pub reposted: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests failed (peer unreachable).
    pub failed: u64,
    /// Completions accepted from an earlier attempt, after the request had been
    /// re-posted (its data landed, only the completion was late).
    pub late_completions: u64,
    /// Completions ignored because their request was already completed or failed.
    pub duplicate_completions: u64,
    /// Paths marked bad.
    pub reports: u64,
    /// Paths taken back after their recovery window.
    pub restored: u64,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    op: Op,
    path: Path,
    /// When the current attempt was posted.
    posted: Nanos,
    deadline: Nanos,
    attempt: u32,
}

#[derive(Debug)]
struct Link {
    health: PathHealth,
    next_seq: u64,
    inflight: BTreeMap<Seq, InFlight>,
    /// Set once both paths are bad; sticky.
    dead: Option<PeerError>,
}

impl Link {
    fn completed_below(&self) -> Seq {
        self.inflight
            .keys()
            .next()
            .copied()
            .unwrap_or(Seq(self.next_seq))
    }
}

/// The sending side of one rank: every peer's paths and requests in flight.
///
/// Drive it with [`post`](Self::post), [`on_completion`](Self::on_completion),
/// [`on_error_completion`](Self::on_error_completion) and
/// [`handle_timeout`](Self::handle_timeout) (at [`next_deadline`](Self::next_deadline)
/// or later), and carry out what [`poll_action`](Self::poll_action) returns.
#[derive(Debug)]
pub struct Sender {
    me: PeerId,
    cfg: HealthConfig,
    links: BTreeMap<PeerId, Link>,
    /// Every pending deadline, earliest first.
    deadlines: BTreeSet<(Nanos, PeerId, Seq)>,
    actions: VecDeque<Action>,
    stats: SenderStats,
}

impl Sender {
    /// A sender for rank `me`; fails if `cfg` cannot work.
    pub fn new(me: PeerId, cfg: HealthConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Sender {
            me,
            cfg,
            links: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            actions: VecDeque::new(),
            stats: SenderStats::default(),
        })
    }

    /// Sets up the paths to `peer` (both up). Adding a peer again starts it over
    /// from sequence number 0: a new connection, whose receiver must be new too.
    pub fn add_peer(&mut self, peer: PeerId, has_backup: bool) {
        if self.links.remove(&peer).is_some() {
            self.deadlines.retain(|&(_, p, _)| p != peer);
        }
        self.links.insert(
            peer,
            Link {
                health: PathHealth::new(peer, has_backup, &self.cfg),
                next_seq: 0,
                inflight: BTreeMap::new(),
                dead: None,
            },
        );
    }

    /// Posts `op` to `peer` at `now` on the path that carries its traffic; returns
    /// its sequence number. Refused once the peer is unreachable.
    pub fn post(&mut self, peer: PeerId, op: Op, now: Nanos) -> Result<Seq, PostError> {
        self.restore_due(peer, now);
        let me = self.me;
        let timeout = self.cfg.timeout;
        let link = self
            .links
            .get_mut(&peer)
            .ok_or(PostError::UnknownPeer(peer))?;
        if let Some(e) = link.dead {
            return Err(PostError::PeerUnreachable(e));
        }
        let path = link.health.route().map_err(PostError::PeerUnreachable)?;
        let seq = Seq(link.next_seq);
        link.next_seq += 1;
        let deadline = now.after(timeout);
        link.inflight.insert(
            seq,
            InFlight {
                op,
                path,
                posted: now,
                deadline,
                attempt: 0,
            },
        );
        let req = Request {
            from: me,
            seq,
            op,
            completed_below: link.completed_below(),
        };
        self.deadlines.insert((deadline, peer, seq));
        self.stats.posted += 1;
        self.actions.push_back(Action::Post {
            peer,
            path,
            req,
            attempt: 0,
        });
        Ok(seq)
    }

    /// A completion seen on a path. The first valid completion of a request
    /// completes it, whichever attempt it belongs to; later ones are ignored. A
    /// completion whose value does not fit its operation is a fault of its path.
    pub fn on_completion(&mut self, c: Completion, now: Nanos) -> Result<(), UnknownCompletion> {
        let link = self.link_for(c.peer, c.path, c.seq)?;
        let Some(f) = link.inflight.get(&c.seq).copied() else {
            self.stats.duplicate_completions += 1;
            return Ok(());
        };
        let fault = match (f.op.returns_value(), c.fetched) {
            (true, None) => Some(PathFault::AtomicWithoutValue { seq: c.seq }),
            (false, Some(_)) => Some(PathFault::WriteWithValue { seq: c.seq }),
            _ => None,
        };
        if let Some(why) = fault {
            self.path_failed(c.peer, c.path, why, now);
            if f.path == c.path {
                self.repost(c.peer, c.seq, now);
            }
            return Ok(());
        }
        if let Some(link) = self.links.get_mut(&c.peer) {
            link.inflight.remove(&c.seq);
        }
        self.deadlines.remove(&(f.deadline, c.peer, c.seq));
        if f.path != c.path {
            self.stats.late_completions += 1;
        }
        self.stats.completed += 1;
        self.actions.push_back(Action::Complete {
            peer: c.peer,
            seq: c.seq,
            fetched: c.fetched,
        });
        Ok(())
    }

    /// The NIC completed `seq` on `path` with an error status: the path is bad,
    /// and the request moves to the other path if this was its current attempt.
    pub fn on_error_completion(
        &mut self,
        peer: PeerId,
        path: Path,
        seq: Seq,
        status: u32,
        now: Nanos,
    ) -> Result<(), UnknownCompletion> {
        let link = self.link_for(peer, path, seq)?;
        let current = link.inflight.get(&seq).map(|f| f.path);
        self.path_failed(peer, path, PathFault::ErrorCompletion { seq, status }, now);
        if current == Some(path) {
            self.repost(peer, seq, now);
        }
        Ok(())
    }

    /// Fails over every request whose deadline is at or before `now`, and takes
    /// back paths whose recovery window has passed.
    pub fn handle_timeout(&mut self, now: Nanos) {
        let peers: Vec<PeerId> = self.links.keys().copied().collect();
        for peer in peers {
            self.restore_due(peer, now);
        }
        while let Some(&(deadline, peer, seq)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(f) = self
                .links
                .get(&peer)
                .and_then(|l| l.inflight.get(&seq))
                .copied()
            else {
                continue;
            };
            let why = PathFault::Timeout {
                seq,
                atomic: f.op.returns_value(),
                waited: now.since(f.posted),
            };
            self.path_failed(peer, f.path, why, now);
            self.repost(peer, seq, now);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to do: the
    /// earliest completion deadline or path restore.
    pub fn next_deadline(&self) -> Option<Nanos> {
        let restore = self
            .links
            .values()
            .filter(|l| l.dead.is_none())
            .filter_map(|l| l.health.next_restore())
            .min();
        let deadline = self.deadlines.first().map(|d| d.0);
        match (restore, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next thing to do, oldest first.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The path new requests to `peer` take now (`None`: unknown or unreachable).
    pub fn route(&self, peer: PeerId) -> Option<Path> {
        let link = self.links.get(&peer)?;
        if link.dead.is_some() {
            return None;
        }
        link.health.route().ok()
    }

    /// The health of the paths to `peer`.
    pub fn health(&self, peer: PeerId) -> Option<&PathHealth> {
        self.links.get(&peer).map(|l| &l.health)
    }

    /// Requests to `peer` not yet completed or failed.
    pub fn in_flight(&self, peer: PeerId) -> usize {
        self.links.get(&peer).map_or(0, |l| l.inflight.len())
    }

    /// Requests to every peer not yet completed or failed.
    pub fn total_in_flight(&self) -> usize {
        self.links.values().map(|l| l.inflight.len()).sum()
    }

    /// Why `peer` is unreachable, once it is.
    pub fn peer_error(&self, peer: PeerId) -> Option<PeerError> {
        self.links.get(&peer).and_then(|l| l.dead)
    }

    /// Counters so far.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    fn link_for(
        &mut self,
        peer: PeerId,
        path: Path,
        seq: Seq,
    ) -> Result<&mut Link, UnknownCompletion> {
        let link = self
            .links
            .get_mut(&peer)
            .ok_or(UnknownCompletion::UnknownPeer { peer, path })?;
        if seq.0 >= link.next_seq {
            return Err(UnknownCompletion::NeverPosted {
                peer,
                path,
                seq,
                next: Seq(link.next_seq),
            });
        }
        Ok(link)
    }

    fn restore_due(&mut self, peer: PeerId, now: Nanos) {
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        if link.dead.is_some() {
            return;
        }
        for (path, down_for) in link.health.restore_due(now) {
            self.stats.restored += 1;
            self.actions.push_back(Action::Restored {
                peer,
                path,
                down_for,
            });
        }
    }

    /// Marks `path` bad; when that leaves no usable path, the peer becomes
    /// unreachable and everything in flight to it fails, so nothing waits forever.
    fn path_failed(&mut self, peer: PeerId, path: Path, why: PathFault, now: Nanos) {
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        if link.dead.is_some() {
            return;
        }
        if link.health.mark_bad(path, why, now) {
            self.stats.reports += 1;
            self.actions.push_back(Action::Report { peer, path, why });
        }
        let Err(error) = link.health.route() else {
            return;
        };
        link.dead = Some(error);
        for (seq, f) in std::mem::take(&mut link.inflight) {
            self.deadlines.remove(&(f.deadline, peer, seq));
            self.stats.failed += 1;
            self.actions.push_back(Action::Fail { peer, seq, error });
        }
    }

    /// Posts `seq` again on the path that now carries `peer`'s traffic, with a
    /// fresh deadline (no-op if it is no longer in flight).
    fn repost(&mut self, peer: PeerId, seq: Seq, now: Nanos) {
        let me = self.me;
        let timeout = self.cfg.timeout;
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        let Ok(path) = link.health.route() else {
            return;
        };
        let completed_below = link.completed_below();
        let Some(f) = link.inflight.get_mut(&seq) else {
            return;
        };
        self.deadlines.remove(&(f.deadline, peer, seq));
        f.path = path;
        f.posted = now;
        f.deadline = now.after(timeout);
        f.attempt += 1;
        let (op, attempt, deadline) = (f.op, f.attempt, f.deadline);
        self.deadlines.insert((deadline, peer, seq));
        self.stats.reposted += 1;
        self.actions.push_back(Action::Post {
            peer,
            path,
            req: Request {
                from: me,
                seq,
                op,
                completed_below,
            },
            attempt,
        });
    }
}
