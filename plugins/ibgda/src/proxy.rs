//! The proxy NIC handler's logic, sans-IO: a host thread's loop that consumes the
//! GPU-written request queues, routes each request through the health
//! [`Sender`] (which picks the path and re-posts on failure), hands the posts to
//! a [`Carrier`] and writes every outcome into the queue's completion queue.
//!
//! Nothing here sleeps, spawns or reads a clock: the caller polls with the time
//! ([`Proxy::poll`], at the latest at [`Proxy::next_deadline`]) and feeds the
//! carrier's completions back ([`Proxy::on_completion`],
//! [`Proxy::on_error_completion`]).
//!
//! Guarantees, each tested in `proxy/tests.rs`:
//!
//! * every request taken from a queue gets exactly one completion entry:
//!   [`CqStatus::Ok`], or an error naming the peer and the failed paths
//!   (unreachable peer), or [`CqStatus::BadRecord`] (bytes that do not decode,
//!   or a request the carrier's [`Carrier::check`] refuses: never posted, no
//!   path blamed); a dead peer therefore ends in errors within the health
//!   machine's bound (two timeouts), never a hang;
//! * a request is taken only while its queue owes fewer than `max_owed`
//!   completions (in flight or waiting for room in the completion queue), so
//!   a kernel that never reads completions holds bounded host memory and then
//!   meets a full request queue; completions it has not read yet do not stop
//!   the proxy (a kernel that posts more than a ring holds before it reads
//!   completions would otherwise deadlock with it);
//! * a [`WorkRecord::Quiet`] marker completes once every earlier request of its
//!   queue has, and holds back the requests after it until then (fence).
//!
//! The queues live in memory the caller gives ([`Proxy::add_queue_in`]: pinned
//! host memory the GPU writes) or the proxy allocates ([`Proxy::add_queue`]);
//! a request queue is taken by its stamps alone (the GPU keeps no producer
//! index there).
//!
//! The queues are per (peer, path) because the mlx5 handler needs one per QP;
//! under the proxy the health lives here, so whichever queue a record comes from,
//! the [`Sender`] routes it.

mod carrier;
mod event;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

pub use carrier::{Carrier, CarrierRequest, Refused};
pub use event::ProxyEvent;

use crate::health::{
    Action, Completion, ConfigError, HealthConfig, Nanos, Op, Path, PeerError, PeerId, PostError,
    Sender, Seq, UnknownCompletion,
};
use crate::queue::{
    CompletionQueue, CqEntry, CqStatus, PathSet, QueueError, QueueMemory, RequestQueue, WorkRecord,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// Which queue: the peer it goes to and the path it was set up for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueId {
    /// The peer.
    pub peer: PeerId,
    /// The path (the GPU's choice; the proxy routes by health anyway).
    pub path: Path,
}

impl fmt::Display for QueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "queue to {} on the {}", self.peer, self.path)
    }
}

/// Sizes and limits of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Timeout and recovery window of the health machine.
    pub health: HealthConfig,
    /// Slots of each request queue.
    pub sq_slots: u32,
    /// Slots of each completion queue.
    pub cq_slots: u32,
    /// Most requests of one queue taken and not yet written into its
    /// completion queue (in flight, plus completions waiting for room there).
    /// Completions the GPU has not read yet do not count: a kernel that posts
    /// more than a ring holds before it reads completions (post, post, …,
    /// quiet) must not wait for room in the request ring while the proxy
    /// waits for room in the completion ring. This bounds the host memory a
    /// kernel that never reads completions can make the proxy hold.
    pub max_owed: u32,
    /// Most records taken from one queue per [`Proxy::poll`], so one busy queue
    /// cannot starve the others.
    pub take_per_poll: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            health: HealthConfig::default(),
            sq_slots: 256,
            cq_slots: 256,
            max_owed: 16 * 256,
            take_per_poll: 32,
        }
    }
}

/// The proxy could not be set up as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyError {
    /// The health timing cannot work.
    Config(ConfigError),
    /// A queue size is not valid, or memory given for a queue is not its size.
    Queue(QueueError),
    /// `take_per_poll` is zero: nothing would ever be taken.
    ZeroTakePerPoll,
    /// `max_owed` is zero: nothing would ever be taken.
    ZeroMaxOwed,
    /// The queue was added before.
    DuplicateQueue(QueueId),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::Config(e) => write!(f, "proxy health config: {e}"),
            ProxyError::Queue(e) => write!(f, "proxy queue size: {e}"),
            ProxyError::ZeroTakePerPoll => f.write_str("proxy take_per_poll is zero"),
            ProxyError::ZeroMaxOwed => f.write_str("proxy max_owed is zero"),
            ProxyError::DuplicateQueue(q) => write!(f, "{q} was already added"),
        }
    }
}

impl std::error::Error for ProxyError {}

// The host side runs the proxy on a thread of its own.
const _: () = {
    const fn send<T: Send>() {}
    send::<Proxy>()
};

/// One queue pair's memory and the proxy's bookkeeping for it.
struct QueueState {
    sq: Box<dyn QueueMemory + Send>,
    cq: Box<dyn QueueMemory + Send>,
    /// Request ids taken and not yet given a completion.
    outstanding: BTreeSet<u64>,
    /// A quiet marker waiting for `outstanding` to empty; nothing is taken
    /// meanwhile.
    quiet: Option<u64>,
    /// The first error since the last quiet, which that quiet then reports.
    error_since_quiet: Option<CqEntry>,
    /// Completions not yet written (the GPU has not made room).
    backlog: VecDeque<CqEntry>,
    /// Set when the memory proved inconsistent; the queue is not used again.
    broken: bool,
}

impl fmt::Debug for QueueState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueState")
            .field("sq_bytes", &self.sq.len_bytes())
            .field("cq_bytes", &self.cq.len_bytes())
            .field("outstanding", &self.outstanding)
            .field("quiet", &self.quiet)
            .field("error_since_quiet", &self.error_since_quiet)
            .field("backlog", &self.backlog)
            .field("broken", &self.broken)
            .finish()
    }
}

/// A request handed to the sender, remembered until it resolves.
#[derive(Debug, Clone, Copy)]
struct Pending {
    queue: QueueId,
    req_id: u64,
    work: WorkRecord,
}

/// The proxy handler of one rank.
#[derive(Debug)]
pub struct Proxy {
    cfg: ProxyConfig,
    sq: RequestQueue,
    cq: CompletionQueue,
    sender: Sender,
    peers: BTreeSet<PeerId>,
    queues: BTreeMap<QueueId, QueueState>,
    pending: BTreeMap<(PeerId, Seq), Pending>,
    deaths: Deaths,
    events: VecDeque<ProxyEvent>,
    /// The path of the completion being fed to the sender, which its `Complete`
    /// action does not repeat.
    completing: Option<Path>,
}

impl Proxy {
    /// The proxy of rank `me`.
    pub fn new(me: PeerId, cfg: ProxyConfig) -> Result<Self, ProxyError> {
        if cfg.take_per_poll == 0 {
            return Err(ProxyError::ZeroTakePerPoll);
        }
        if cfg.max_owed == 0 {
            return Err(ProxyError::ZeroMaxOwed);
        }
        Ok(Proxy {
            cfg,
            sq: RequestQueue::new(cfg.sq_slots).map_err(ProxyError::Queue)?,
            cq: CompletionQueue::new(cfg.cq_slots).map_err(ProxyError::Queue)?,
            sender: Sender::new(me, cfg.health).map_err(ProxyError::Config)?,
            peers: BTreeSet::new(),
            queues: BTreeMap::new(),
            pending: BTreeMap::new(),
            deaths: Deaths::default(),
            events: VecDeque::new(),
            completing: None,
        })
    }

    /// Adds the queue pair `id` in memory of its own (set up empty); the first
    /// queue to a peer also sets up the peer's paths in the health machine.
    pub fn add_queue(&mut self, id: QueueId, peer_has_backup: bool) -> Result<(), ProxyError> {
        let sq = vec![0u8; self.sq.ring().bytes()];
        let cq = vec![0u8; self.cq.ring().bytes()];
        self.add_queue_in(id, peer_has_backup, Box::new(sq), Box::new(cq))
    }

    /// Adds the queue pair `id` in the memory given (the GPU-visible memory the
    /// GPU side maps), which must be [`Ring::bytes`](crate::queue::Ring::bytes)
    /// long for [`request_queue`](Self::request_queue) and
    /// [`completion_queue`](Self::completion_queue); both rings are set up
    /// empty. The first queue to a peer also sets up the peer's paths.
    pub fn add_queue_in(
        &mut self,
        id: QueueId,
        peer_has_backup: bool,
        mut sq: Box<dyn QueueMemory + Send>,
        mut cq: Box<dyn QueueMemory + Send>,
    ) -> Result<(), ProxyError> {
        if self.queues.contains_key(&id) {
            return Err(ProxyError::DuplicateQueue(id));
        }
        // Both lengths before writing either: a refusal leaves the memory as given.
        for (mem, ring) in [(&sq, self.sq.ring()), (&cq, self.cq.ring())] {
            if mem.len_bytes() != ring.bytes() {
                return Err(ProxyError::Queue(QueueError::WrongLength {
                    expected: ring.bytes(),
                    got: mem.len_bytes(),
                }));
            }
        }
        self.sq.ring().init(&mut *sq).map_err(ProxyError::Queue)?;
        self.cq.ring().init(&mut *cq).map_err(ProxyError::Queue)?;
        if self.peers.insert(id.peer) {
            self.sender.add_peer(id.peer, peer_has_backup);
        }
        self.queues.insert(
            id,
            QueueState {
                sq,
                cq,
                outstanding: BTreeSet::new(),
                quiet: None,
                error_since_quiet: None,
                backlog: VecDeque::new(),
                broken: false,
            },
        );
        Ok(())
    }

    /// The request queue layout (what the GPU side writes with).
    pub fn request_queue(&self) -> RequestQueue {
        self.sq
    }

    /// The completion queue layout (what the GPU side reads with).
    pub fn completion_queue(&self) -> CompletionQueue {
        self.cq
    }

    /// The shared memory of queue `id`: (request queue, completion queue). The GPU
    /// side's view, for tests; in the plugin this is mapped GPU-visible memory.
    pub fn memory_mut(
        &mut self,
        id: QueueId,
    ) -> Option<(&mut dyn QueueMemory, &mut dyn QueueMemory)> {
        let q = self.queues.get_mut(&id)?;
        Some((&mut *q.sq, &mut *q.cq))
    }

    /// One round of the proxy loop at `now`: fails over what timed out, takes
    /// what the queues hold (as far as their completion queues have room),
    /// carries it, and writes completions. Returns the records taken.
    pub fn poll(&mut self, carrier: &mut impl Carrier, now: Nanos) -> usize {
        if self.sender.next_deadline().is_some_and(|d| d <= now) {
            self.sender.handle_timeout(now);
            self.drain(carrier, now);
        }
        let ids: Vec<QueueId> = self.queues.keys().copied().collect();
        let mut taken = 0;
        for id in ids {
            for (req_id, rec) in self.take(id) {
                taken += 1;
                self.start(id, req_id, rec, carrier, now);
            }
            self.flush(id);
        }
        taken
    }

    /// A completion the carrier saw on `c.path`.
    pub fn on_completion(
        &mut self,
        c: Completion,
        carrier: &mut impl Carrier,
        now: Nanos,
    ) -> Result<(), UnknownCompletion> {
        self.completing = Some(c.path);
        let r = self.sender.on_completion(c, now);
        self.drain(carrier, now);
        self.completing = None;
        r
    }

    /// An error completion the carrier saw on `path` (the transport's `status`).
    pub fn on_error_completion(
        &mut self,
        peer: PeerId,
        path: Path,
        seq: Seq,
        status: u32,
        carrier: &mut impl Carrier,
        now: Nanos,
    ) -> Result<(), UnknownCompletion> {
        let r = self
            .sender
            .on_error_completion(peer, path, seq, status, now);
        self.drain(carrier, now);
        r
    }

    /// When [`poll`](Self::poll) next has time-driven work (a completion deadline
    /// or a path restore); new records and completions need a poll regardless.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.sender.next_deadline()
    }

    /// The next thing to report, oldest first.
    pub fn poll_event(&mut self) -> Option<ProxyEvent> {
        let e = self.events.pop_front();
        if self.events.is_empty() {
            // Announced: the next poll writes the completions that waited.
            self.deaths.announcing = false;
        }
        e
    }

    /// Reports `peer` unreachable, once.
    fn report_dead(&mut self, peer: PeerId, error: PeerError) {
        self.deaths.announce(&mut self.events, peer, Some(error));
    }

    /// The health machine, for its routes, health and counters.
    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    /// Requests taken from queue `id` and not yet given a completion.
    pub fn outstanding(&self, id: QueueId) -> usize {
        self.queues.get(&id).map_or(0, |q| q.outstanding.len())
    }

    /// Completions decided but not yet written for queue `id` (its completion
    /// queue is full).
    pub fn backlog(&self, id: QueueId) -> usize {
        self.queues.get(&id).map_or(0, |q| q.backlog.len())
    }

    /// Takes the records queue `id` may start now: while it owes fewer than
    /// `max_owed` completions, up to a quiet marker.
    fn take(&mut self, id: QueueId) -> Vec<(u64, WorkRecord)> {
        let (sq, cq, max_owed, max) = (self.sq, self.cq, self.cfg.max_owed, self.cfg.take_per_poll);
        let Some(q) = self.queues.get_mut(&id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while !q.broken && q.quiet.is_none() && out.len() < max {
            // The completion ring's indices are checked (inconsistent memory
            // breaks the queue), but its unread entries do not hold back taking.
            if let Err(error) = cq.ring().used(&*q.cq) {
                broken(q, &mut self.events, id, true, error);
                break;
            }
            let owed = (q.outstanding.len() + q.backlog.len()) as u64;
            if owed >= u64::from(max_owed) {
                break;
            }
            match sq.pop(&mut *q.sq) {
                Ok(None) => break,
                Ok(Some((req_id, Ok(WorkRecord::Quiet)))) => {
                    q.outstanding.insert(req_id);
                    q.quiet = Some(req_id);
                }
                Ok(Some((req_id, Ok(rec)))) => {
                    q.outstanding.insert(req_id);
                    out.push((req_id, rec));
                }
                Ok(Some((req_id, Err(error)))) => {
                    self.events.push_back(ProxyEvent::BadRecord {
                        queue: id,
                        req_id,
                        error,
                    });
                    q.outstanding.insert(req_id);
                    finish_in(
                        q,
                        CqEntry {
                            req_id,
                            status: CqStatus::BadRecord,
                            peer: id.peer,
                            paths: PathSet::NONE,
                            value: 0,
                        },
                    );
                }
                Err(error) => {
                    broken(q, &mut self.events, id, false, error);
                }
            }
        }
        let dead = self.sender.peer_error(id.peer);
        self.deaths.announce(&mut self.events, id.peer, dead);
        release_quiet(q, id.peer, dead);
        out
    }

    /// Hands a taken record to the sender.
    fn start(
        &mut self,
        id: QueueId,
        req_id: u64,
        work: WorkRecord,
        carrier: &mut impl Carrier,
        now: Nanos,
    ) {
        let op = match work {
            // The signal travels with its put and is applied after the data, once,
            // by the receiving side: to the health machine both are one write.
            WorkRecord::Put { dst, bytes, .. } | WorkRecord::PutSignal { dst, bytes, .. } => {
                Op::Write { dst, len: bytes }
            }
            WorkRecord::FetchAdd { dst, add, .. } => Op::FetchAdd { dst, add },
            WorkRecord::Quiet => return,
        };
        if let Err(why) = carrier.check(id.peer, &work) {
            self.events.push_back(ProxyEvent::Rejected {
                queue: id,
                req_id,
                why,
            });
            let e = CqEntry {
                req_id,
                status: CqStatus::BadRecord,
                peer: id.peer,
                paths: PathSet::NONE,
                value: 0,
            };
            return self.finish(id, req_id, e);
        }
        match self.sender.post(id.peer, op, now) {
            Ok(seq) => {
                self.pending.insert(
                    (id.peer, seq),
                    Pending {
                        queue: id,
                        req_id,
                        work,
                    },
                );
                self.drain(carrier, now);
            }
            Err(PostError::PeerUnreachable(e)) => {
                self.report_dead(id.peer, e);
                self.finish(id, req_id, unreachable(req_id, e))
            }
            Err(PostError::UnknownPeer(peer)) => self.finish(
                id,
                req_id,
                CqEntry {
                    req_id,
                    status: CqStatus::UnknownPeer,
                    peer,
                    paths: PathSet::NONE,
                    value: 0,
                },
            ),
        }
    }

    /// Carries out the sender's actions.
    fn drain(&mut self, carrier: &mut impl Carrier, now: Nanos) {
        while let Some(a) = self.sender.poll_action() {
            match a {
                Action::Post {
                    peer,
                    path,
                    req,
                    attempt,
                } => {
                    if attempt > 0 {
                        self.events.push_back(ProxyEvent::Failover {
                            peer,
                            seq: req.seq,
                            to: path,
                            attempt,
                        });
                    }
                    let Some(p) = self.pending.get(&(peer, req.seq)) else {
                        continue;
                    };
                    let creq = CarrierRequest {
                        req,
                        work: p.work,
                        attempt,
                    };
                    if let Err(Refused { status }) = carrier.post(peer, path, &creq) {
                        // Same as an error completion; its re-post joins this loop.
                        if let Err(e) = self
                            .sender
                            .on_error_completion(peer, path, req.seq, status, now)
                        {
                            self.events.push_back(ProxyEvent::StrayCompletion(e));
                        }
                    }
                }
                Action::Report { peer, path, why } => {
                    self.events
                        .push_back(ProxyEvent::PathDown { peer, path, why });
                }
                Action::Restored {
                    peer,
                    path,
                    down_for,
                } => self.events.push_back(ProxyEvent::PathRestored {
                    peer,
                    path,
                    down_for,
                }),
                Action::Complete { peer, seq, fetched } => {
                    if let Some(p) = self.pending.remove(&(peer, seq)) {
                        let paths = self.completing.map_or(PathSet::NONE, PathSet::of);
                        let e = CqEntry {
                            req_id: p.req_id,
                            status: CqStatus::Ok,
                            peer,
                            paths,
                            value: fetched.unwrap_or(0),
                        };
                        self.finish(p.queue, p.req_id, e);
                    }
                }
                Action::Fail { peer, seq, error } => {
                    self.report_dead(peer, error);
                    if let Some(p) = self.pending.remove(&(peer, seq)) {
                        self.finish(p.queue, p.req_id, unreachable(p.req_id, error));
                    }
                }
            }
        }
    }

    /// Records the completion of `req_id` and writes what the GPU has room for.
    fn finish(&mut self, id: QueueId, req_id: u64, e: CqEntry) {
        if let Some(q) = self.queues.get_mut(&id) {
            debug_assert_eq!(e.req_id, req_id);
            finish_in(q, e);
            let dead = self.sender.peer_error(id.peer);
            self.deaths.announce(&mut self.events, id.peer, dead);
            release_quiet(q, id.peer, dead);
        }
        self.flush(id);
    }

    /// Writes queue `id`'s backlog into its completion queue, oldest first, as
    /// far as there is room.
    fn flush(&mut self, id: QueueId) {
        let cq = self.cq;
        let Some(q) = self.queues.get_mut(&id) else {
            return;
        };
        if self.deaths.announcing {
            return;
        }
        while let Some(e) = q.backlog.front() {
            if q.broken {
                return;
            }
            match cq.push(&mut *q.cq, e) {
                Ok(_) => {
                    q.backlog.pop_front();
                }
                Err(QueueError::Full { .. }) => return,
                Err(error) => {
                    broken(q, &mut self.events, id, true, error);
                }
            }
        }
    }
}

/// Queue `id` of `q` is broken (its request queue, or with `completion_queue`
/// its completion queue): nothing more is taken from it or written to it.
fn broken(
    q: &mut QueueState,
    events: &mut VecDeque<ProxyEvent>,
    id: QueueId,
    completion_queue: bool,
    error: QueueError,
) {
    q.broken = true;
    events.push_back(ProxyEvent::QueueBroken {
        queue: id,
        completion_queue,
        error,
    });
}

/// The error completion of a request to an unreachable peer: the failed paths.
fn unreachable(req_id: u64, e: PeerError) -> CqEntry {
    let paths = if e.backup.is_some() {
        PathSet::BOTH
    } else {
        PathSet::of(Path::Primary)
    };
    CqEntry {
        req_id,
        status: CqStatus::PeerUnreachable,
        peer: e.peer,
        paths,
        value: 0,
    }
}

fn finish_in(q: &mut QueueState, e: CqEntry) {
    if q.outstanding.remove(&e.req_id) {
        if e.status != CqStatus::Ok && q.error_since_quiet.is_none() {
            q.error_since_quiet = Some(e);
        }
        q.backlog.push_back(e);
    }
}

/// The peers reported unreachable, and whether a report is still untaken.
#[derive(Debug, Default)]
struct Deaths {
    reported: BTreeSet<PeerId>,
    /// A death is reported but its event not yet taken: completions wait for
    /// it, so that whoever sees a failed completion (a kernel, then its host)
    /// finds the plugin's status already saying why.
    announcing: bool,
}

impl Deaths {
    /// Reports `peer` unreachable (`dead`) once, before any completion says
    /// so: a quiet can complete with the peer's error when the health machine
    /// marked it dead without a request in flight (no `Fail` action).
    fn announce(
        &mut self,
        events: &mut VecDeque<ProxyEvent>,
        peer: PeerId,
        dead: Option<PeerError>,
    ) {
        if let Some(error) = dead {
            if self.reported.insert(peer) {
                events.push_back(ProxyEvent::PeerUnreachable(error));
                self.announcing = true;
            }
        }
    }
}

/// Completes a waiting quiet marker once everything before it has completed; it
/// reports the first error since the previous quiet, else the peer's error if
/// it is unreachable (a quiet must not tell the GPU all is well with a dead
/// peer), else success.
fn release_quiet(q: &mut QueueState, peer: PeerId, dead: Option<PeerError>) {
    let Some(id) = q.quiet else {
        return;
    };
    if q.outstanding.len() > 1 {
        return;
    }
    q.quiet = None;
    q.outstanding.remove(&id);
    let e = match (q.error_since_quiet.take(), dead) {
        (Some(err), _) => CqEntry { req_id: id, ..err },
        (None, Some(err)) => unreachable(id, err),
        (None, None) => CqEntry {
            req_id: id,
            status: CqStatus::Ok,
            peer,
            paths: PathSet::NONE,
            value: 0,
        },
    };
    q.backlog.push_back(e);
}
