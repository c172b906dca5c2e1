//! In-flight operations: per-connection queues posted in order, tested until
//! done, with timeouts and peer-failure checks. Driven by a waiting caller
//! (no thread hand-off for short operations) or by the progress thread.

use super::connection::{Connection, Dir};
use super::shared::CommShared;
use crate::error::{Error, Result};
use crate::plugin::{RawMemHandle, RawRequest};
use crate::proxy::Progress;
use ferrocx_sdk::abi::FX_INVALID_ARGUMENT;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a waiting caller keeps driving progress with nothing moving
/// before it parks and leaves the work to the progress thread.
const PARK_AFTER: Duration = Duration::from_millis(2);

/// Completion state of a group of operations submitted together.
pub(crate) struct Batch {
    remaining: AtomicUsize,
    error: Mutex<Option<Error>>,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Batch {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Batch {
            remaining: AtomicUsize::new(n),
            error: Mutex::new(None),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        })
    }
    fn finish(&self, err: Option<Error>) {
        if let Some(e) = err {
            self.error.lock().get_or_insert(e);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }
    pub(crate) fn is_done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }
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
    batch: Arc<Batch>,
    since: Instant,
}

struct Posted {
    q: Queued,
    req: RawRequest,
}

struct ConnQueue {
    conn: Connection,
    waiting: VecDeque<Queued>,
    posted: Vec<Posted>,
    /// Whether this connection is in `State::active`.
    listed: bool,
}

impl ConnQueue {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.posted.is_empty()
    }
}

/// Slot of (peer, dir) in `State::conns`: a dense table, no hashing per operation.
fn slot(peer: usize, dir: Dir) -> usize {
    peer * 2 + usize::from(dir == Dir::Recv)
}

/// What [`Engine::submit`] did.
pub(crate) enum Submitted {
    /// Queued; wait for this batch.
    Queued(Arc<Batch>),
    /// Nothing queued: these connections must be established first.
    Missing(Vec<Op>, Vec<(usize, Dir)>),
}

struct State {
    /// Indexed by [`slot`]; `None` until connected.
    conns: Vec<Option<ConnQueue>>,
    /// Slots with waiting or posted operations: what a sweep visits.
    active: Vec<usize>,
    in_flight: usize,
    /// Set once a fatal error broke the communicator.
    broken: Option<Error>,
    /// Sweeps so far; timeouts are checked on every 256th (reading the clock per op costs).
    sweeps: u64,
    shutdown: bool,
}

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

/// The operation engine of one communicator.
pub(crate) struct Engine {
    shared: Arc<CommShared>,
    state: Mutex<State>,
    wake: Condvar,
    /// Callers currently driving progress themselves; the progress thread yields to them.
    driving: AtomicUsize,
    /// Raised by the bootstrap when a peer dies or aborts.
    peer_event: AtomicBool,
}

impl Engine {
    pub fn new(shared: Arc<CommShared>) -> Arc<Self> {
        let nslots = shared.nranks * 2;
        Arc::new(Engine {
            shared,
            state: Mutex::new(State {
                conns: (0..nslots).map(|_| None).collect(),
                active: Vec::new(),
                in_flight: 0,
                broken: None,
                sweeps: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            driving: AtomicUsize::new(0),
            peer_event: AtomicBool::new(false),
        })
    }

    /// Current counters.
    pub fn stats(&self) -> EngineStats {
        let st = self.state.lock();
        EngineStats {
            queued_ops: st.in_flight,
            ..Default::default()
        }
    }

    /// Called from the bootstrap's reader threads.
    pub fn notify_peer_event(&self) {
        self.peer_event.store(true, Ordering::Release);
        let _g = self.state.lock();
        self.wake.notify_all();
    }

    /// The error that broke the communicator, if any.
    pub fn broken(&self) -> Option<Error> {
        self.state.lock().broken.clone()
    }

    /// Mark the communicator broken by a failure outside the data path
    /// (e.g. connection setup timed out): later operations are refused.
    pub fn break_with(&self, err: Error) {
        let mut st = self.state.lock();
        if st.broken.is_none() {
            self.break_all(&mut st, err);
        }
    }

    /// Add newly established connections.
    pub fn add_connections(&self, conns: Vec<Connection>) {
        let mut st = self.state.lock();
        for c in conns {
            let i = slot(c.peer, c.dir);
            st.conns[i] = Some(ConnQueue {
                conn: c,
                waiting: VecDeque::new(),
                posted: Vec::new(),
                listed: false,
            });
        }
    }

    /// Name of the transport used for (peer, dir), if connected.
    pub fn transport_of(&self, peer: usize, dir: Dir) -> Option<String> {
        self.state
            .lock()
            .conns
            .get(slot(peer, dir))?
            .as_ref()
            .map(|c| c.conn.plugin.name().to_string())
    }

    /// Queue a group of operations and return its batch (the caller must then
    /// [`wait`](Self::wait) for it), or, when a connection is missing, queue
    /// nothing and say which. `mh` finds the registration covering a buffer.
    /// One lock acquisition for the whole group.
    pub fn submit(
        &self,
        mut ops: Vec<Op>,
        mh: impl Fn(&crate::plugin::PluginInstance, usize, usize) -> Option<RawMemHandle>,
    ) -> Result<Submitted> {
        let mut st = self.state.lock();
        if let Some(e) = &st.broken {
            return Err(Error::Destroyed(format!(
                "an earlier failure broke the communicator: {e}"
            )));
        }
        if st.shutdown {
            return Err(Error::Destroyed("communicator destroyed".into()));
        }
        let mut missing: Vec<(usize, Dir)> = ops
            .iter()
            .filter(|o| st.conns[slot(o.peer, o.dir)].is_none())
            .map(|o| (o.peer, o.dir))
            .collect();
        if !missing.is_empty() {
            missing.sort();
            missing.dedup();
            return Ok(Submitted::Missing(ops, missing));
        }
        let batch = Batch::new(ops.len());
        let now = Instant::now();
        let st = &mut *st;
        for mut op in ops.drain(..) {
            let i = slot(op.peer, op.dir);
            let q = st.conns[i].as_mut().expect("checked above");
            op.mh = mh(&q.conn.plugin, op.ptr, op.len);
            q.waiting.push_back(Queued {
                op,
                batch: batch.clone(),
                since: now,
            });
            if !q.listed {
                q.listed = true;
                st.active.push(i);
            }
            st.in_flight += 1;
        }
        // No wake-up here: the submitting thread drives the batch in `wait`,
        // and wakes the progress thread only if it has to park.
        self.driving.fetch_add(1, Ordering::AcqRel);
        Ok(Submitted::Queued(batch))
    }

    /// Wait for a batch. The caller drives progress itself (no thread hand-off)
    /// as long as something moves; after [`PARK_AFTER`] without progress it
    /// parks and lets the progress thread continue.
    pub fn wait(&self, batch: &Batch) -> Result<()> {
        // `driving` was raised by `submit`.
        let mut idle = 0u32;
        let mut idle_since: Option<Instant> = None;
        while !batch.is_done() {
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
        if !batch.is_done() {
            {
                let _g = self.state.lock();
                self.wake.notify_one();
            }
            let mut g = batch.lock.lock();
            while !batch.is_done() {
                // Bounded slices: the progress thread enforces the real timeout.
                batch.cv.wait_for(&mut g, Duration::from_millis(100));
            }
        }
        match batch.error.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Fail everything, free connections, remember `err`.
    fn break_all(&self, st: &mut State, err: Error) {
        tracing::error!(target: "ferrocx::comm", "rank {}: {err}", self.shared.rank);
        let reason = err.to_string();
        if st.broken.is_none() {
            st.broken = Some(err.clone());
        }
        for q in st.conns.iter_mut().filter_map(Option::take) {
            for p in q.posted {
                p.q.batch.finish(Some(err.clone()));
            }
            for w in q.waiting {
                w.batch.finish(Some(err.clone()));
            }
            // Dropping q.conn frees it; the plugin cancels its requests.
        }
        st.active.clear();
        st.in_flight = 0;
        if !matches!(err, Error::PeerFailed { .. }) {
            self.shared.bootstrap.broadcast_abort(&reason);
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

    /// One pass over every connection with work. Returns whether anything moved.
    ///
    /// Order matters for rendezvous transports: first every waiting operation
    /// is posted, then receives are tested before sends, so a rank advertises
    /// where its data should go before it spends time copying its own sends
    /// (otherwise two ranks exchanging large messages copy one after the other).
    fn sweep_locked(&self, st: &mut State) -> bool {
        if st.in_flight == 0 || st.broken.is_some() {
            return false;
        }
        if self.peer_event.load(Ordering::Acquire) || self.shared.abort.load(Ordering::Acquire) != 0
        {
            if let Err(e) = self.shared.check_peers() {
                self.break_all(st, e);
                return true;
            }
        }
        st.sweeps = st.sweeps.wrapping_add(1);
        let check_clock = st.sweeps.is_multiple_of(256);
        let mut moved = false;
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
            let e = match self.shared.check_peers() {
                Err(peer_err) => peer_err,
                Ok(()) => e,
            };
            self.break_all(st, e);
            return true;
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
            let plugin = &q.conn.plugin;
            if plugin.has_proxy_progress() {
                match plugin.proxy_progress(q.conn.raw, q.conn.peer) {
                    Ok(worked) => *moved |= worked,
                    Err(e) => return Some(e),
                }
            }
            while let Some(w) = q.waiting.front() {
                // SAFETY: the caller of submit guaranteed the buffer outlives the batch.
                let posted = unsafe {
                    match w.op.dir {
                        Dir::Send => plugin.isend(
                            q.conn.raw,
                            w.op.ptr as *const u8,
                            w.op.len,
                            w.op.mh,
                            w.op.peer,
                        ),
                        Dir::Recv => plugin.irecv(
                            q.conn.raw,
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
            let plugin = &q.conn.plugin;
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
                        p.q.batch.finish(err);
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
                        p.q.batch.finish(Some(e.clone()));
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
        let err = Error::Destroyed(why.to_string());
        st.active.clear();
        for q in st.conns.iter_mut().filter_map(Option::take) {
            for p in q.posted {
                p.q.batch.finish(Some(err.clone()));
            }
            for w in q.waiting {
                w.batch.finish(Some(err.clone()));
            }
        }
        st.in_flight = 0;
        self.wake.notify_all();
    }
}

impl Progress for Engine {
    fn wait_for_work(&self) -> bool {
        let mut st = self.state.lock();
        loop {
            if st.shutdown {
                return false;
            }
            if st.in_flight > 0 && self.driving.load(Ordering::Acquire) == 0 {
                return true;
            }
            if st.in_flight > 0 {
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
