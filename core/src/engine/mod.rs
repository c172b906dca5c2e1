//! The engine: in-flight work of a communicator — plans (runners executing
//! schedules) and the sends/receives they queue per connection, posted in
//! order and tested until done, with timeouts and peer-failure checks.
//! Driven by a waiting caller (no thread hand-off for short operations,
//! [`Request`]) or by the progress thread.

mod request;

pub use request::Request;

use crate::error::{Error, Result};
use crate::plan::{Plan, Post, Poster, ScratchBuf, StageDone, Step};
use crate::plugin::{Connection, Dir};
use crate::plugin::{RawMemHandle, RawRequest};
use crate::proxy::Progress;
use crate::registration::Registrations;
use crate::shared::CommShared;
use ferrocx_sdk::abi::FX_INVALID_ARGUMENT;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long a waiting caller keeps driving progress with nothing moving
/// before it parks and leaves the work to the progress thread.
const PARK_AFTER: Duration = Duration::from_millis(20);

/// How long a fatal transport error waits for the bootstrap to name a dead peer.
const ROOT_CAUSE_GRACE: Duration = Duration::from_millis(250);

/// Scratch buffers kept for reuse.
const POOL_MAX: usize = 16;

/// Counters of an engine, for leak checks and diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Plans submitted and not yet reclaimed.
    pub live_plans: usize,
    /// Sends and receives queued or posted.
    pub queued_ops: usize,
    /// Scratch buffers kept for reuse.
    pub pooled_scratch: usize,
    /// Bytes held by those buffers.
    pub pooled_scratch_bytes: usize,
}

/// One send or receive.
pub(crate) struct Op {
    pub dir: Dir,
    pub peer: usize,
    pub ptr: usize,
    pub len: usize,
    pub mh: Option<RawMemHandle>,
}

struct Queued {
    op: Op,
    done: Arc<StageDone>,
    since: Instant,
}

struct Posted {
    q: Queued,
    req: RawRequest,
}

struct ConnQueue {
    /// `None` while the connection is being made: operations queue in
    /// `waiting` and are posted once it is ([`Engine::add_connections`]).
    conn: Option<Connection>,
    waiting: VecDeque<Queued>,
    posted: Vec<Posted>,
    /// Whether this connection is in `State::active`.
    listed: bool,
}

impl ConnQueue {
    fn new(conn: Option<Connection>) -> Self {
        ConnQueue {
            conn,
            waiting: VecDeque::new(),
            posted: Vec::new(),
            listed: false,
        }
    }

    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.posted.is_empty()
    }
}

/// What [`Engine::submit`] did.
pub(crate) enum Submitted {
    /// Queued; the counter completes when every plan has.
    Queued(Arc<StageDone>),
    /// Nothing queued: these (channel, peer, dir) connections must be made first.
    Missing(Vec<Plan>, Vec<(usize, usize, Dir)>),
}

/// A submitted plan and its progress.
pub(crate) struct PlanRun {
    plan: Plan,
    done: Arc<StageDone>,
    /// First non-fatal failure (a point-to-point size mismatch).
    error: Option<Error>,
}

struct State {
    /// Indexed by [`Engine::slot`]; `None` until connected.
    conns: Vec<Option<ConnQueue>>,
    /// Slots with waiting or posted operations: what a sweep visits.
    active: Vec<usize>,
    in_flight: usize,
    /// Plans in submission order; only the front one runs.
    plans: VecDeque<PlanRun>,
    pool: Vec<ScratchBuf>,
    /// Finished plans go back to the submitting side through this queue.
    reclaim: mpsc::Sender<PlanRun>,
    /// Set once a fatal error broke the communicator.
    broken: Option<Error>,
    /// Sweeps so far; timeouts are checked on every 256th (reading the clock per op costs).
    sweeps: u64,
    shutdown: bool,
}

/// Queues a runner's transfers on the connections (inside the state lock).
struct Queuer<'a> {
    conns: &'a mut [Option<ConnQueue>],
    active: &'a mut Vec<usize>,
    in_flight: &'a mut usize,
    regs: &'a Registrations,
    nranks: usize,
    /// Read once, when the first transfer is queued (the clock costs).
    now: Option<Instant>,
}

impl Poster for Queuer<'_> {
    fn device_ok(&self, channel: usize, peer: usize, dir: Dir) -> Option<bool> {
        let i = Engine::slot_of(self.nranks, channel, peer, dir);
        match self.conns.get(i).and_then(Option::as_ref) {
            // No slot at all: posting says so (an internal error).
            None => Some(false),
            Some(q) => q.conn.as_ref().map(|c| c.plugin.takes_device_memory()),
        }
    }

    fn post(&mut self, posts: &[Post]) -> Arc<StageDone> {
        let done = StageDone::new(posts.len());
        let now = *self.now.get_or_insert_with(Instant::now);
        for p in posts {
            let i = Engine::slot_of(self.nranks, p.channel, p.peer, p.dir);
            let Some(q) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                done.finish(Some(Error::Io(format!(
                    "internal: no connection for channel {} peer {} {:?}",
                    p.channel, p.peer, p.dir
                ))));
                continue;
            };
            // A connection still being made has no plugin to look up yet:
            // those first operations go unregistered.
            let mh = match &q.conn {
                Some(c) if !self.regs.is_empty() => self.regs.lookup(&c.plugin, p.ptr, p.len),
                _ => None,
            };
            q.waiting.push_back(Queued {
                op: Op {
                    dir: p.dir,
                    peer: p.peer,
                    ptr: p.ptr,
                    len: p.len,
                    mh,
                },
                done: done.clone(),
                since: now,
            });
            if !q.listed {
                q.listed = true;
                self.active.push(i);
            }
            *self.in_flight += 1;
        }
        done
    }
}

/// The operation engine of one communicator.
pub(crate) struct Engine {
    shared: Arc<CommShared>,
    regs: Arc<Registrations>,
    state: Mutex<State>,
    wake: Condvar,
    /// Callers currently driving progress themselves; the progress thread yields to them.
    driving: AtomicUsize,
    /// Raised by the bootstrap when a peer dies or aborts.
    peer_event: AtomicBool,
    reclaimed: Mutex<mpsc::Receiver<PlanRun>>,
    live_plans: AtomicUsize,
}

impl Engine {
    pub fn new(shared: Arc<CommShared>, regs: Arc<Registrations>, nchannels: usize) -> Arc<Self> {
        let nslots = shared.nranks * 2 * nchannels;
        let (tx, rx) = mpsc::channel();
        Arc::new(Engine {
            shared,
            regs,
            state: Mutex::new(State {
                conns: (0..nslots).map(|_| None).collect(),
                active: Vec::new(),
                in_flight: 0,
                plans: VecDeque::new(),
                pool: Vec::new(),
                reclaim: tx,
                broken: None,
                sweeps: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            driving: AtomicUsize::new(0),
            peer_event: AtomicBool::new(false),
            reclaimed: Mutex::new(rx),
            live_plans: AtomicUsize::new(0),
        })
    }

    /// Slot of (channel, peer, dir) in `State::conns`: a dense table, no hashing per operation.
    fn slot_of(nranks: usize, channel: usize, peer: usize, dir: Dir) -> usize {
        (channel * nranks + peer) * 2 + usize::from(dir == Dir::Recv)
    }

    /// Drop finished plans (their schedules, staging copies) on the calling thread.
    fn reclaim(&self) {
        let rx = self.reclaimed.lock();
        while let Ok(run) = rx.try_recv() {
            drop(run);
            self.live_plans.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Fail as a call would once the communicator broke or was destroyed.
    pub fn usable(&self) -> Result<()> {
        self.check_usable(&self.state.lock())
    }

    /// Wait until everything submitted before has completed (a call that runs
    /// outside the engine keeps the order of earlier asynchronous operations).
    /// Costs one atomic load when nothing is in flight.
    pub fn drain(&self) -> Result<()> {
        // Finished plans count until reclaimed: nothing counted, nothing to do.
        if self.live_plans.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        self.reclaim();
        if self.live_plans.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        // An empty plan completes once every plan ahead of it has.
        match self.submit(vec![Plan::new()], true)? {
            Submitted::Queued(done) => self.wait(&done, true),
            Submitted::Missing(..) => unreachable!("an empty plan needs no connection"),
        }
    }

    /// One sweep if nobody else holds the engine (for `Request::test`).
    pub fn poke(&self) {
        if let Some(mut st) = self.state.try_lock() {
            self.sweep_locked(&mut st);
        }
    }

    /// Current counters.
    pub fn stats(&self) -> EngineStats {
        self.reclaim();
        let st = self.state.lock();
        EngineStats {
            live_plans: self.live_plans.load(Ordering::Acquire),
            queued_ops: st.in_flight,
            pooled_scratch: st.pool.len(),
            pooled_scratch_bytes: st.pool.iter().map(|b| b.capacity() * 8).sum(),
        }
    }

    /// Whether a peer died or sent an abort notice (one atomic load).
    pub fn peer_event_seen(&self) -> bool {
        self.peer_event.load(Ordering::Acquire)
    }

    /// Called from the bootstrap's reader threads.
    pub fn notify_peer_event(&self) {
        self.peer_event.store(true, Ordering::Release);
        self.shared.stop_waits();
        let _g = self.state.lock();
        self.wake.notify_all();
    }

    /// The error that broke the communicator, if any.
    pub fn broken(&self) -> Option<Error> {
        self.state.lock().broken.clone()
    }

    /// Mark the communicator broken by a failure outside the data path
    /// (e.g. connection setup timed out): later operations are refused.
    /// Returns the error that broke it (a timeout becomes [`Error::Hang`]; an
    /// earlier failure stays the cause).
    pub fn break_with(&self, err: Error) -> Error {
        let mut st = self.state.lock();
        if st.broken.is_none() {
            self.break_all(&mut st, err);
        }
        st.broken.clone().expect("set by break_all")
    }

    /// Add newly established connections. Operations already queued on one
    /// (see [`submit_connecting`](Self::submit_connecting)) are posted from
    /// the next sweep on.
    pub fn add_connections(&self, conns: Vec<Connection>) {
        let mut st = self.state.lock();
        if st.broken.is_some() || st.shutdown {
            return; // dropped here: nothing may use them
        }
        let mut work = false;
        for c in conns {
            let i = Self::slot_of(self.shared.nranks, c.channel as usize, c.peer, c.dir);
            match st.conns[i].as_mut() {
                // Not expected (a connection is made by one caller at a time):
                // the one in use stays.
                Some(q) if q.conn.is_some() => {
                    tracing::warn!(target: "ferrocx::comm", "rank {}: a second connection with rank {} ({:?}, channel {}) dropped", self.shared.rank, c.peer, c.dir, c.channel);
                }
                Some(q) => {
                    // Operations queued before it existed look up their
                    // registrations now (the plugin is known).
                    if !self.regs.is_empty() {
                        for w in q.waiting.iter_mut().filter(|w| w.op.mh.is_none()) {
                            w.op.mh = self.regs.lookup(&c.plugin, w.op.ptr, w.op.len);
                        }
                    }
                    q.conn = Some(c);
                    // Waiting operations post now, and a device stage waiting
                    // for the connection decides how to move its data.
                    work = true;
                }
                None => st.conns[i] = Some(ConnQueue::new(Some(c))),
            }
        }
        if work {
            self.wake.notify_one();
        }
    }

    /// Name of the transport used for (peer, dir) on `channel`, if connected.
    pub fn transport_of(&self, peer: usize, dir: Dir, channel: usize) -> Option<String> {
        self.state
            .lock()
            .conns
            .get(Self::slot_of(self.shared.nranks, channel, peer, dir))?
            .as_ref()
            .and_then(|c| c.conn.as_ref())
            .map(|c| c.plugin.name().to_string())
    }

    fn check_usable(&self, st: &State) -> Result<()> {
        if let Some(e) = &st.broken {
            return Err(Error::Destroyed(format!(
                "an earlier failure broke the communicator: {e}"
            )));
        }
        if st.shutdown {
            return Err(Error::Destroyed("communicator destroyed".into()));
        }
        Ok(())
    }

    /// Whether every connection `plans` use exists (then [`submit`](Self::submit)
    /// queues them without connecting).
    pub fn connected(&self, plans: &[Plan]) -> bool {
        let st = self.state.lock();
        let nranks = self.shared.nranks;
        plans.iter().all(|p| {
            p.all_needs(|(c, peer, d)| st.conns[Self::slot_of(nranks, c, peer, d)].is_some())
        })
    }

    /// Queue plans; they run in order after everything submitted before.
    /// With `driving`, the caller promises to [`wait`](Self::wait) with
    /// `registered = true` and drive progress itself; otherwise the progress
    /// thread is woken. When a connection the plans need does not exist yet,
    /// nothing is queued and the plans come back with the list to establish
    /// (checked under the one lock `submit` takes anyway: no allocation when
    /// everything is connected, the common case).
    pub fn submit(&self, plans: Vec<Plan>, driving: bool) -> Result<Submitted> {
        self.reclaim();
        let mut st = self.state.lock();
        self.check_usable(&st)?;
        let nranks = self.shared.nranks;
        let connected = |st: &State, (c, p, d): (usize, usize, Dir)| {
            st.conns[Self::slot_of(nranks, c, p, d)].is_some()
        };
        if !plans.iter().all(|p| p.all_needs(|n| connected(&st, n))) {
            let mut needs = Vec::new();
            for p in &plans {
                p.needs(&mut needs);
            }
            needs.sort_unstable();
            needs.dedup();
            needs.retain(|&n| !connected(&st, n));
            return Ok(Submitted::Missing(plans, needs));
        }
        Ok(Submitted::Queued(
            self.queue_locked(&mut st, plans, driving),
        ))
    }

    /// Queue plans whose connections `making` (channel, peer, dir) are being
    /// made now: their operations on those wait in the engine until
    /// [`add_connections`](Self::add_connections) brings each, and the others
    /// go on meanwhile (the progress thread drives them; the caller is not
    /// counted as driving, see [`add_driver`](Self::add_driver)). A connection
    /// that then cannot be made must break the communicator: these plans
    /// cannot be taken back.
    pub fn submit_connecting(
        &self,
        plans: Vec<Plan>,
        making: &[(usize, usize, Dir)],
    ) -> Result<Arc<StageDone>> {
        self.reclaim();
        let mut st = self.state.lock();
        self.check_usable(&st)?;
        for &(c, peer, d) in making {
            let i = Self::slot_of(self.shared.nranks, c, peer, d);
            st.conns[i].get_or_insert_with(|| ConnQueue::new(None));
        }
        Ok(self.queue_locked(&mut st, plans, false))
    }

    /// Count the caller as driving progress, for work it submitted without
    /// (as if `submit` had been called with `driving`).
    pub fn add_driver(&self) {
        self.driving.fetch_add(1, Ordering::AcqRel);
    }

    fn queue_locked(&self, st: &mut State, plans: Vec<Plan>, driving: bool) -> Arc<StageDone> {
        let done = StageDone::new(plans.len());
        for plan in plans {
            self.live_plans.fetch_add(1, Ordering::AcqRel);
            st.plans.push_back(PlanRun {
                plan,
                done: done.clone(),
                error: None,
            });
        }
        if driving {
            self.driving.fetch_add(1, Ordering::AcqRel);
        } else {
            self.wake.notify_one();
        }
        done
    }

    /// Wait for `done`. The caller drives progress itself (no thread hand-off)
    /// as long as something moves; after [`PARK_AFTER`] without progress it
    /// parks and lets the progress thread continue. `registered`: `submit`
    /// already counted this caller as driving.
    pub fn wait(&self, done: &StageDone, registered: bool) -> Result<()> {
        if !registered {
            self.driving.fetch_add(1, Ordering::AcqRel);
        }
        let mut idle = 0u32;
        let mut idle_since: Option<Instant> = None;
        while !done.is_done() {
            let moved = match self.state.try_lock() {
                Some(mut st) => self.sweep_locked(&mut st),
                None => false,
            };
            if moved {
                idle = 0;
                idle_since = None;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::hint::spin_loop();
                continue;
            }
            // Yield so ranks sharing a core can run; check the clock now and then.
            std::thread::yield_now();
            if idle.is_multiple_of(16) {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > PARK_AFTER {
                    break;
                }
            }
        }
        self.driving.fetch_sub(1, Ordering::AcqRel);
        if !done.is_done() {
            {
                let _g = self.state.lock();
                self.wake.notify_one();
            }
            // Counted for status reports only here: a wait worth reporting parks.
            let _waiting = self.shared.status.waiting();
            let mut crossed = crate::status::CrossedCheck::new();
            done.park_checking(|| {
                if let Some(e) = crossed.poll(&self.shared.status, &self.shared.bootstrap) {
                    self.break_with(e);
                }
            });
        }
        // Finished plans are dropped by the next submit (or `stats`), not here.
        match done.take_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Fail everything, free connections, remember `err`.
    fn break_all(&self, st: &mut State, err: Error) {
        // Ranks that disagree about the call also fail its transfers (sizes, peers):
        // when a call check already saw the disagreement, that is the error to report.
        let err = match err {
            Error::Mismatch { .. } => err,
            e => st.plans.iter().find_map(|r| r.plan.mismatch()).unwrap_or(e),
        };
        // A timeout is usually a rank that never reached the call: ask every rank
        // where it is (answered by their reader threads; bounded, a few ms when all
        // answer) so every rank's error names it.
        let err = self.shared.status.attribute(&self.shared.bootstrap, err);
        tracing::error!(target: "ferrocx::comm", "rank {}: {err}", self.shared.rank);
        self.shared.status.failed();
        self.shared.stop_waits();
        if st.broken.is_none() {
            st.broken = Some(err.clone());
        }
        // Peers first: they learn the cause before they can see this rank's state change.
        if !matches!(err, Error::PeerFailed { .. }) {
            self.shared.bootstrap.broadcast_abort(&err.to_string());
        }
        Self::fail_all(st, &err);
    }

    /// Fail every queued operation and plan with `err`; free connections.
    fn fail_all(st: &mut State, err: &Error) {
        // Every GPU stream held at a plan's gate goes first: freeing a
        // connection (device memory, events, IPC mappings) may wait for the
        // device to go idle, which a held stream never lets it. Seen on 2 ×
        // H200 after a mismatch: this thread in cuMemFree, another in
        // cuIpcCloseMemHandle, the user's stream at a gate only this thread
        // opens (2 of 82 runs, bench/results/2026-11-27-session11/run6).
        for run in st.plans.iter_mut() {
            run.plan.finish_device();
        }
        for q in st.conns.iter_mut().filter_map(Option::take) {
            for p in q.posted {
                p.q.done.finish(Some(err.clone()));
            }
            for w in q.waiting {
                w.done.finish(Some(err.clone()));
            }
            // Dropping q.conn frees it; the plugin cancels its requests.
        }
        st.active.clear();
        st.in_flight = 0;
        while let Some(mut run) = st.plans.pop_front() {
            // Never leave a GPU stream waiting on a plan that will not run.
            run.plan.finish_device();
            // Reclaim first: a waiter woken by `finish` may read the stats at once.
            let done = run.done.clone();
            let _ = st.reclaim.send(run);
            done.finish(Some(err.clone()));
        }
    }

    fn describe(&self, q: &Queued, transport: &str) -> String {
        let verb = if q.op.dir == Dir::Send {
            "send"
        } else {
            "receive"
        };
        let prep = if q.op.dir == Dir::Send { "to" } else { "from" };
        format!(
            "{verb} of {} bytes {prep} rank {} via {transport}",
            q.op.len, q.op.peer
        )
    }

    /// Advance the front plan's runners; start the next plan when one ends.
    /// Returns a fatal error.
    fn advance_plans(&self, st: &mut State, moved: &mut bool) -> Option<Error> {
        let State {
            conns,
            active,
            in_flight,
            plans,
            pool,
            reclaim,
            ..
        } = st;
        let mut q = Queuer {
            conns,
            active,
            in_flight,
            regs: &self.regs,
            nranks: self.shared.nranks,
            now: None,
        };
        while let Some(run) = plans.front_mut() {
            // A device plan starts once the users' streams reached its launch point.
            if let Some(d) = run.plan.device.as_mut() {
                match d.ready() {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => return Some(e),
                }
            }
            // Channels whose earliest unfinished runner is still waiting:
            // later runners of the same channel must not start before it ends.
            let mut blocked = 0u64;
            for slot in run.plan.runners.iter_mut() {
                let Some(r) = slot.as_mut() else { continue };
                let bit = 1u64 << r.channel;
                if blocked & bit != 0 {
                    continue;
                }
                if r.dev.is_none() && r.scratch.is_none() && r.scratch_bytes() > 0 {
                    let words = r.scratch_bytes().div_ceil(8);
                    let buf = match pool.iter().position(|b| b.capacity() >= words) {
                        Some(i) => pool.swap_remove(i),
                        None => Vec::with_capacity(words),
                    };
                    r.set_scratch(buf);
                }
                match r.advance(&mut q) {
                    Step::Blocked => {
                        blocked |= bit;
                        continue;
                    }
                    Step::Done => {}
                    // A mismatched send/receive breaks the communicator like a
                    // collective's: the other side must learn of it too.
                    Step::Failed(e) if r.fatal || matches!(e, Error::Mismatch { .. }) => {
                        return Some(e)
                    }
                    Step::Failed(e) => {
                        run.error.get_or_insert(e);
                    }
                }
                *moved = true;
                run.plan.left -= 1;
                if let Some(b) = slot.take().and_then(|mut r| r.scratch.take()) {
                    if pool.len() < POOL_MAX {
                        pool.push(b);
                    }
                }
            }
            if run.plan.left > 0 {
                break;
            }
            let mut run = plans.pop_front().expect("front exists");
            run.plan.finish_device();
            let (done, err) = (run.done.clone(), run.error.take());
            let _ = reclaim.send(run);
            done.finish(err);
            *moved = true;
        }
        None
    }

    /// One pass over every connection with work. Returns whether anything moved.
    ///
    /// Order matters for rendezvous transports: first every waiting operation
    /// is posted, then receives are tested before sends, so a rank advertises
    /// where its data should go before it spends time copying its own sends
    /// (otherwise two ranks exchanging large messages copy one after the other).
    fn sweep_locked(&self, st: &mut State) -> bool {
        if (st.in_flight == 0 && st.plans.is_empty()) || st.broken.is_some() {
            return false;
        }
        if self.peer_event.load(Ordering::Acquire) || self.shared.abort.load(Ordering::Acquire) != 0
        {
            if let Err(e) = self.shared.check_peers() {
                self.break_all(st, e);
                return true;
            }
        }
        let mut moved = false;
        if let Some(e) = self.advance_plans(st, &mut moved) {
            self.break_all(st, e);
            return true;
        }
        st.sweeps = st.sweeps.wrapping_add(1);
        let check_clock = st.sweeps.is_multiple_of(256);
        let mut fatal = self.post_all(st, &mut moved);
        for dir in [Dir::Recv, Dir::Send] {
            if fatal.is_some() {
                break;
            }
            fatal = self.test_all(st, dir, check_clock, &mut moved);
        }
        if moved {
            Self::prune_active(st);
        }
        if let Some(e) = fatal {
            // A peer's death explains most transport failures: name it if known.
            // The bootstrap may learn of it a moment after a transport does (a
            // survivor that saw the death first resets its connections to us), so
            // give it a short grace period before blaming the messenger.
            let e = self.shared.peer_cause_within(ROOT_CAUSE_GRACE).unwrap_or(e);
            self.break_all(st, e);
            return true;
        }
        if moved {
            // Completed transfers may let runners go on right away.
            if let Some(e) = self.advance_plans(st, &mut moved) {
                self.break_all(st, e);
            }
        }
        moved
    }

    /// Background progress and posting, in order per connection; stops at the
    /// first operation a plugin cannot take yet. Returns a fatal error.
    fn post_all(&self, st: &mut State, moved: &mut bool) -> Option<Error> {
        for &i in &st.active {
            let Some(q) = st.conns[i].as_mut() else {
                continue;
            };
            let Some(conn) = q.conn.as_ref() else {
                continue; // still being made
            };
            let plugin = &conn.plugin;
            if plugin.has_proxy_progress() {
                match plugin.proxy_progress(conn.raw, conn.peer) {
                    Ok(worked) => *moved |= worked,
                    Err(e) => return Some(e),
                }
            }
            while let Some(w) = q.waiting.front() {
                // SAFETY: the submitter guaranteed the buffer outlives the request.
                let posted = unsafe {
                    match w.op.dir {
                        Dir::Send => plugin.isend(
                            conn.raw,
                            w.op.ptr as *const u8,
                            w.op.len,
                            w.op.mh,
                            w.op.peer,
                        ),
                        Dir::Recv => plugin.irecv(
                            conn.raw,
                            w.op.ptr as *mut u8,
                            w.op.len,
                            w.op.mh,
                            w.op.peer,
                        ),
                    }
                };
                match posted {
                    Ok(Some(req)) => {
                        let w = q.waiting.pop_front().expect("front exists");
                        q.posted.push(Posted { q: w, req });
                        *moved = true;
                    }
                    Ok(None) => break,
                    Err(e) => return Some(e),
                }
            }
        }
        None
    }

    /// Test the posted operations of every connection in direction `dir`;
    /// complete what is done, enforce the timeout. Returns a fatal error.
    fn test_all(
        &self,
        st: &mut State,
        dir: Dir,
        check_clock: bool,
        moved: &mut bool,
    ) -> Option<Error> {
        let timeout = self.shared.timeout;
        let mut finished = 0;
        let mut fatal = None;
        let want = usize::from(dir == Dir::Recv);
        'conns: for &i in st.active.iter().filter(|&&i| i % 2 == want) {
            let Some(q) = st.conns[i].as_mut() else {
                continue;
            };
            // One still being made has nothing posted; its own setup times out.
            let Some(conn) = q.conn.as_ref() else {
                continue;
            };
            let plugin = &conn.plugin;
            let mut i = 0;
            while i < q.posted.len() {
                let p = &q.posted[i];
                let hook = if p.q.op.dir == Dir::Send {
                    "test(send)"
                } else {
                    "test(recv)"
                };
                match plugin.test(p.req, p.q.op.peer, hook) {
                    Ok(Some(n)) => {
                        let p = q.posted.swap_remove(i);
                        finished += 1;
                        *moved = true;
                        let err = (p.q.op.dir == Dir::Recv && n != p.q.op.len).then(|| {
                            Error::InvalidArgument(format!(
                                "mismatched sizes: rank {} sent {n} bytes but rank {} posted a receive of {} bytes",
                                p.q.op.peer, self.shared.rank, p.q.op.len
                            ))
                        });
                        p.q.done.finish(err);
                    }
                    Ok(None) => {
                        if check_clock && p.q.since.elapsed() > timeout {
                            fatal = Some(Error::Timeout {
                                what: self.describe(&p.q, plugin.name()),
                                peer: Some(p.q.op.peer),
                                after: timeout,
                            });
                            break 'conns;
                        }
                        i += 1;
                    }
                    Err(e) => {
                        // The request is gone after an error.
                        let p = q.posted.swap_remove(i);
                        finished += 1;
                        *moved = true;
                        let recoverable =
                            matches!(e, Error::Plugin { code, .. } if code == FX_INVALID_ARGUMENT);
                        p.q.done.finish(Some(e.clone()));
                        if !recoverable {
                            fatal = Some(e);
                            break 'conns;
                        }
                    }
                }
            }
            if let Some(w) = q.waiting.front().filter(|_| check_clock) {
                if w.since.elapsed() > timeout {
                    fatal = Some(Error::Timeout {
                        what: self.describe(w, plugin.name()),
                        peer: Some(w.op.peer),
                        after: timeout,
                    });
                    break;
                }
            }
        }
        st.in_flight -= finished;
        fatal
    }

    /// Drop connections without work from the active list.
    fn prune_active(st: &mut State) {
        let State { conns, active, .. } = st;
        active.retain(|&i| match conns[i].as_mut() {
            Some(q) if !q.idle() => true,
            Some(q) => {
                q.listed = false;
                false
            }
            None => false,
        });
    }

    /// Stop: fail what is queued, free connections, wake the progress thread.
    pub fn shutdown(&self, why: &str) {
        let mut st = self.state.lock();
        st.shutdown = true;
        Self::fail_all(&mut st, &Error::Destroyed(why.to_string()));
        st.pool.clear();
        self.wake.notify_all();
        drop(st);
        self.reclaim();
    }
}

impl Progress for Engine {
    fn wait_for_work(&self) -> bool {
        let mut st = self.state.lock();
        loop {
            if st.shutdown {
                return false;
            }
            let work = st.in_flight > 0 || !st.plans.is_empty();
            if work && self.driving.load(Ordering::Acquire) == 0 {
                return true;
            }
            if work {
                // A caller is driving: check back soon in case it parks.
                self.wake.wait_for(&mut st, Duration::from_millis(1));
            } else {
                self.wake.wait(&mut st);
            }
        }
    }

    fn sweep(&self) -> bool {
        let mut st = self.state.lock();
        self.sweep_locked(&mut st)
    }
}
