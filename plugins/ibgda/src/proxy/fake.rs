//! The proxy's test world: a GPU side that pushes records when their time comes
//! and reads completions, an in-memory carrier with per-path latency and
//! injected faults, and destination windows that apply each request once
//! through the health [`Receiver`]. Time is simulated.

use super::{Carrier, CarrierRequest, Proxy, ProxyEvent, QueueId, Refused};
use crate::fault::{Fault, FaultInjector};
use crate::health::{Completion, Memory, Nanos, Path, PeerId, Receiver, Seq};
use crate::queue::{get_u64, put_u64, CqEntry, CqStatus, QueueError, WorkRecord};
use crate::rng::Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// One peer's window, with a count of how often each byte was written.
pub(super) struct Dest {
    pub window: Vec<u8>,
    pub writes: Vec<u32>,
    pub receiver: Receiver,
}

impl Dest {
    pub fn new(peer: PeerId, bytes: usize) -> Self {
        Dest {
            window: vec![0; bytes],
            writes: vec![0; bytes],
            receiver: Receiver::new(peer),
        }
    }

    pub fn word(&self, at: u64) -> u64 {
        get_u64(&self.window, at as usize)
    }
}

/// Applies one request's work record to a destination (called by the
/// receiver only for a request not applied before).
struct Apply<'a> {
    window: &'a mut Vec<u8>,
    writes: &'a mut Vec<u32>,
    src: &'a [u8],
    work: WorkRecord,
}

impl Memory for Apply<'_> {
    fn write(&mut self, _from: PeerId, _seq: Seq, _dst: u64, _len: u32) {
        let (dst, src, bytes) = match self.work {
            WorkRecord::Put {
                dst, src, bytes, ..
            }
            | WorkRecord::PutSignal {
                dst, src, bytes, ..
            } => (dst as usize, src as usize, bytes as usize),
            _ => panic!("a write for {:?}", self.work),
        };
        self.window[dst..dst + bytes].copy_from_slice(&self.src[src..src + bytes]);
        for w in &mut self.writes[dst..dst + bytes] {
            *w += 1;
        }
        // The signal after the data, as the device API promises.
        if let WorkRecord::PutSignal {
            signal, value, op, ..
        } = self.work
        {
            let old = get_u64(self.window, signal as usize);
            put_u64(self.window, signal as usize, op.apply(old, value));
        }
    }

    fn fetch_add(&mut self, _from: PeerId, _seq: Seq, dst: u64, add: u64) -> u64 {
        let old = get_u64(self.window, dst as usize);
        put_u64(self.window, dst as usize, old.wrapping_add(add));
        old
    }
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Arrive {
        peer: PeerId,
        path: Path,
        req: CarrierRequest,
        fault: Option<Fault>,
    },
    Return(Completion),
}

/// The fake transport: each hop takes 1..=`lat_us` µs; completions of the
/// requests a [`crate::fault::FaultPlan`] hits are dropped or delayed; a peer in
/// `dead` neither applies nor answers anything; a path in `refuse` refuses posts;
/// with `max_bytes`, [`Carrier::check`] rejects longer puts.
pub(super) struct FakeCarrier {
    pub faults: FaultInjector,
    pub dead: BTreeSet<PeerId>,
    pub refuse: BTreeSet<(PeerId, Path)>,
    pub max_bytes: Option<u32>,
    /// Every post: (time, peer, path, seq, attempt).
    pub posts: Vec<(Nanos, PeerId, Path, Seq, u32)>,
    lat_us: u64,
    rng: Rng,
    now: Nanos,
    events: BTreeMap<(Nanos, u64), Ev>,
    tie: u64,
}

impl FakeCarrier {
    pub fn new(faults: FaultInjector, lat_us: u64, seed: u64) -> Self {
        FakeCarrier {
            faults,
            dead: BTreeSet::new(),
            refuse: BTreeSet::new(),
            max_bytes: None,
            posts: Vec::new(),
            lat_us,
            rng: Rng::new(seed),
            now: Nanos(0),
            events: BTreeMap::new(),
            tie: 0,
        }
    }

    fn schedule(&mut self, extra: Duration, ev: Ev) {
        let lat = Duration::from_micros(1 + self.rng.below(self.lat_us));
        self.tie += 1;
        self.events
            .insert((self.now.after(lat + extra), self.tie), ev);
    }

    fn next_event(&self) -> Option<Nanos> {
        self.events.keys().next().map(|k| k.0)
    }

    /// Runs the hops due by `now`; returns the completions that reached the
    /// proxy's side.
    fn run_due(
        &mut self,
        now: Nanos,
        dests: &mut BTreeMap<PeerId, Dest>,
        src: &[u8],
    ) -> Vec<Completion> {
        self.now = now;
        let mut back = Vec::new();
        while let Some(entry) = self.events.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                Ev::Arrive {
                    peer,
                    path,
                    req,
                    fault,
                } => {
                    if self.dead.contains(&peer) {
                        continue;
                    }
                    let Dest {
                        window,
                        writes,
                        receiver,
                    } = dests.get_mut(&peer).expect("a destination per peer");
                    let mut apply = Apply {
                        window,
                        writes,
                        src,
                        work: req.work,
                    };
                    let Some(c) = receiver.on_request(path, &req.req, &mut apply) else {
                        continue;
                    };
                    match fault {
                        None => self.schedule(Duration::ZERO, Ev::Return(c)),
                        Some(Fault::Delay(d)) => self.schedule(d, Ev::Return(c)),
                        Some(Fault::Drop) => {}
                    }
                }
                Ev::Return(c) => {
                    if !self.dead.contains(&c.peer) {
                        back.push(c);
                    }
                }
            }
        }
        back
    }
}

impl Carrier for FakeCarrier {
    fn post(&mut self, peer: PeerId, path: Path, req: &CarrierRequest) -> Result<(), Refused> {
        self.posts
            .push((self.now, peer, path, req.req.seq, req.attempt));
        if self.refuse.contains(&(peer, path)) {
            return Err(Refused { status: 0x5a });
        }
        let fault = self.faults.on_post(peer, path);
        self.schedule(
            Duration::ZERO,
            Ev::Arrive {
                peer,
                path,
                req: *req,
                fault,
            },
        );
        Ok(())
    }

    fn check(&self, _peer: PeerId, work: &WorkRecord) -> Result<(), String> {
        match (*work, self.max_bytes) {
            (WorkRecord::Put { bytes, .. } | WorkRecord::PutSignal { bytes, .. }, Some(max))
                if bytes > max =>
            {
                Err(format!("a put of {bytes} bytes exceeds {max}"))
            }
            _ => Ok(()),
        }
    }
}

/// The whole simulated rank: GPU side, proxy, carrier, peers.
pub(super) struct World {
    pub now: Nanos,
    pub proxy: Proxy,
    pub carrier: FakeCarrier,
    pub dests: BTreeMap<PeerId, Dest>,
    /// This rank's window: the source of every put.
    pub src: Vec<u8>,
    /// What the GPU still has to push per queue, each with the time it may.
    pub todo: BTreeMap<QueueId, VecDeque<(Nanos, WorkRecord)>>,
    /// What the GPU pushed: (queue, request id) → record.
    pub pushed: BTreeMap<(QueueId, u64), WorkRecord>,
    /// Completions the GPU read, in order per queue, with their time.
    pub cqes: BTreeMap<QueueId, Vec<(Nanos, CqEntry)>>,
    pub events: Vec<(Nanos, ProxyEvent)>,
    /// Pushes refused because the request queue was full.
    pub full: u64,
    /// Whether the GPU reads its completion queues.
    pub gpu_reads_cq: bool,
    /// Things seen so far (completions read and events taken), which gives
    /// the two below an order within one instant.
    pub seen: usize,
    /// When the GPU first read a failed completion, and when the host first
    /// took a peer-unreachable event.
    pub first_failed_cqe: Option<usize>,
    pub first_unreachable_event: Option<usize>,
}

impl World {
    pub fn new(
        proxy: Proxy,
        carrier: FakeCarrier,
        dests: BTreeMap<PeerId, Dest>,
        src: Vec<u8>,
    ) -> Self {
        World {
            now: Nanos(0),
            proxy,
            carrier,
            dests,
            src,
            todo: BTreeMap::new(),
            pushed: BTreeMap::new(),
            cqes: BTreeMap::new(),
            events: Vec::new(),
            full: 0,
            gpu_reads_cq: true,
            seen: 0,
            first_failed_cqe: None,
            first_unreachable_event: None,
        }
    }

    /// Everything that can happen at `now`, until nothing more does.
    fn settle(&mut self) {
        loop {
            let mut progress = false;
            for c in self.carrier.run_due(self.now, &mut self.dests, &self.src) {
                self.proxy
                    .on_completion(c, &mut self.carrier, self.now)
                    .expect("the carrier only returns completions of posted requests");
                progress = true;
            }
            self.carrier.now = self.now;
            progress |= self.proxy.poll(&mut self.carrier, self.now) > 0;
            progress |= self.gpu();
            while let Some(e) = self.proxy.poll_event() {
                self.seen += 1;
                if matches!(e, ProxyEvent::PeerUnreachable(_)) {
                    self.first_unreachable_event.get_or_insert(self.seen);
                }
                self.events.push((self.now, e));
                // Taking an event lets completions that waited for it go.
                progress = true;
            }
            if !progress {
                return;
            }
        }
    }

    /// The GPU side: reads completions, pushes what is due while there is room.
    fn gpu(&mut self) -> bool {
        let (sq, cq) = (self.proxy.request_queue(), self.proxy.completion_queue());
        let mut progress = false;
        for (&id, todo) in &mut self.todo {
            let (sqm, cqm) = self.proxy.memory_mut(id).expect("queue set up");
            while self.gpu_reads_cq {
                match cq.pop(cqm).expect("completion queue consistent") {
                    Some((_, e)) => {
                        self.seen += 1;
                        if e.as_ref().is_ok_and(|e| e.status != CqStatus::Ok) {
                            self.first_failed_cqe.get_or_insert(self.seen);
                        }
                        self.cqes
                            .entry(id)
                            .or_default()
                            .push((self.now, e.expect("valid completion")));
                        progress = true;
                    }
                    None => break,
                }
            }
            while let Some(&(t, rec)) = todo.front() {
                if t > self.now {
                    break;
                }
                match sq.push(sqm, &rec) {
                    Ok(req_id) => {
                        self.pushed.insert((id, req_id), rec);
                        todo.pop_front();
                        progress = true;
                    }
                    Err(QueueError::Full { .. }) => {
                        self.full += 1;
                        break;
                    }
                    Err(e) => panic!("push to {id}: {e}"),
                }
            }
        }
        progress
    }

    fn done(&self) -> bool {
        let all_answered = self.pushed.len() == self.cqes.values().map(Vec::len).sum::<usize>();
        self.todo.values().all(VecDeque::is_empty) && all_answered
    }

    /// Runs until the time is `t` (`None`: until every record pushed has its
    /// completion). False if nothing was left to happen before that (a hang).
    pub fn run(&mut self, until: Option<Nanos>, limit: Nanos) -> bool {
        loop {
            self.settle();
            if until.is_none() && self.done() {
                return true;
            }
            let release = self
                .todo
                .values()
                .filter_map(|t| t.front().map(|r| r.0))
                .filter(|&t| t > self.now)
                .min();
            let next = [
                self.carrier.next_event(),
                self.proxy.next_deadline(),
                release,
            ]
            .into_iter()
            .flatten()
            .min();
            match (next, until) {
                (Some(n), Some(u)) if n > u => {
                    self.now = u;
                    return true;
                }
                (None, Some(u)) => {
                    self.now = u;
                    return true;
                }
                (None, None) => return false,
                (Some(n), _) if n > limit => return false,
                (Some(n), _) => self.now = n.max(self.now),
            }
        }
    }
}
