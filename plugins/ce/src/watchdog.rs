//! The watchdog: one host thread per communicator that releases a user
//! stream stuck at a ce barrier. It is never on the data path — a launch
//! only records an event behind the collective and hands it over — and it
//! never spins: it parks on a condition variable, waking every
//! [`POLL`] while eager collectives are pending (to poll their events, check
//! deadlines and the abort flag) and otherwise only when told: by a launch
//! that finds it parked idle, or that finds `VERIFY_BATCH` calls' notes to
//! compare (never once per call: a wake costs the launching thread a futex
//! call).
//!
//! * An entry whose event completed is dropped (its event goes back to the
//!   pool): at every wake, and by launches once `RETIRE_AT` are tracked
//!   (the event `RETIRE_BEHIND` calls before the newest asked first, at most
//!   `RETIRE_MOST` retired) or a barrier route is (the newest asked first).
//!   Completions come in launch order, so only the front is asked: a few
//!   event queries (`Tracker::retire_front`), whatever is pending.
//! * An entry still pending at its deadline (launch + `Host::timeout()`):
//!   the thread reads this rank's eager flag arrays (`cuMemcpyDtoHAsync` on
//!   its own non-blocking stream into pinned memory, then waits — bounded —
//!   for that stream; never the user's), works out which ranks never arrived
//!   (`watch.rs`), releases the stream by writing a value 2³⁰ past the oldest
//!   pending barrier's into every slot of both eager arrays
//!   (`cuMemsetD32Async` on its stream: every pending `GEQ` wait, compared
//!   cyclically, passes) and breaks the communicator with that message:
//!   `status()` returns it and every later launch fails with it.
//! * The abort flag (`Host::aborted()`) with collectives pending: release at
//!   once, the communicator breaks.
//! * A communicator broken otherwise (a launch failed half way) with
//!   collectives pending: release at once.
//!
//! Launches captured into a CUDA graph are not tracked: a graph replays its
//! waits (`EQ 1` on the graph arrays) long after the launch, and the host
//! cannot tell a slow replay from a stuck one nor release it without
//! corrupting the next replay. Their waits are kernels instead
//! (`kernels::graph_wait`, where ce has its kernels) that give up at
//! `FERROCX_TIMEOUT` or at the abort word, recording the rank they waited
//! for in the error word, which this thread reads at every wake; it raises
//! the abort word when the host aborts (a peer died). Without kernels
//! (`FERROCX_CE_REDUCE=0`, no NVRTC) captured barriers are stream waits, and
//! a replayed graph whose peer never arrives waits forever.

use crate::notes;
use crate::sync::{Array, FlagLayout};
use crate::watch::{self, Entry, Expect, Snapshot, Tracker};
use ferrocx_sdk::cuda::{check, sys, Event, PinnedHost, Stream};
use ferrocx_sdk::device::Device;
use ferrocx_sdk::spans::{self, Point};
use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the thread looks at pending collectives.
pub const POLL: Duration = Duration::from_millis(100);
/// How long it parks with nothing pending (it is woken when work comes).
const IDLE: Duration = Duration::from_secs(1);
/// Completed calls whose notes make a launch wake the thread to compare
/// them (well inside the `notes::RING / 2` it compares per wake), so a
/// stream of fast calls is checked whole without a wake per call.
const VERIFY_BATCH: usize = notes::RING / 4;
/// Tracked calls from which a launch retires the completed ones itself (the
/// thread does at every wake). Each retire costs 1 event query where the
/// probe ([`RETIRE_BEHIND`]) completed, else about 1 + log2(n)
/// (`Tracker::retire_front`; a query costs 1.5–3 µs), so a larger batch
/// means fewer per call: at 4, asking from the oldest, `order` took 2.9–4.0
/// µs of a launch, at 32 with bisection 0.8–1.9 (2 of 4 H200s,
/// `bench/results/2026-11-27-session13/run3`, `FERROCX_SPANS=1`).
const RETIRE_AT: usize = 32;
/// Where a launch's retirement asks first, in calls before the newest
/// tracked one. Small device calls are bound by the host, so the GPU runs a
/// call or two behind it: the newest is pending, and asking it first cost a
/// bisection (about 6 queries) every ~30 calls — `ce: retire` 0.6–1.3 µs per
/// call of 6.6–8.5 (2 H100s, `bench/results/2026-11-28-session18/run3/s`,
/// `FERROCX_SPANS=1`). A call this far back has completed unless the GPU is
/// that far behind: one query retires all but these.
const RETIRE_BEHIND: usize = RETIRE_AT / 4;
/// The most entries a launch retires: after a long queue drained (a loop
/// that queued thousands of calls, then synchronized), the next launch
/// retired them all at once — 140–440 µs on 2 H200s, the first call of
/// fxperf's first timed row (`bench/results/2026-11-28-session24/first-row`).
/// Each launch adds one, so a backlog goes within a few dozen launches.
const RETIRE_MOST: usize = 4 * RETIRE_AT;
/// Longest wait for its own stream (a flag read, a release).
const OWN_STREAM_WAIT: Duration = Duration::from_secs(5);

struct State {
    tracker: Tracker<Event>,
    pool: Vec<Event>,
    /// Calls of completed collectives whose notes were not compared with
    /// the peers' yet (`crate::notes`).
    unverified: Vec<(u64, notes::Call)>,
    broken: Option<PluginError>,
    stop: bool,
    /// An LL kernel was launched (eager or captured), or a captured
    /// barrier's wait kernel: the error word is read at every wake, since a
    /// kernel that gave up on its own (graph replays are not tracked) must
    /// not leave later calls running on a raised abort word.
    ll_used: bool,
    /// The abort word was raised for the host's abort (so that untracked
    /// waits, a replayed graph's, give up too).
    abort_raised: bool,
    /// The stream of the newest tracked collective.
    last_stream: Option<usize>,
    /// The thread is parked for [`IDLE`] (nothing pending): a new entry
    /// must wake it. Otherwise it looks again within [`POLL`] by itself, and
    /// a launch does not pay for a wake (a futex call, and a thread that
    /// contends for the lock and the driver).
    parked_idle: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    host: Host,
    rank: usize,
}

impl State {
    /// Retire the completed entries at the front, at most `most`
    /// ([`Tracker::retire_front`], its probe `behind` calls before the
    /// newest). An event that cannot be queried counts as done, and its
    /// batch's notes are not kept: the first such error comes back.
    fn retire(&mut self, behind: usize, most: usize) -> Option<PluginError> {
        let mut failed = None;
        let freed = self.tracker.retire_front(behind, most, |e: &Event| {
            e.done().unwrap_or_else(|x| {
                failed.get_or_insert(x);
                true
            })
        });
        self.retired(freed, failed.is_none());
        failed
    }

    /// Take back what retired entries hold: events for reuse, notes to check
    /// (`keep_notes`: none of their events failed).
    fn retired(&mut self, freed: Vec<Entry<Event>>, keep_notes: bool) {
        for e in freed {
            if let (Some(note), true) = (e.note, keep_notes) {
                self.unverified.push(note);
            }
            self.pool.push(e.event);
        }
        // Older ones than a ring's worth could not be told apart any more.
        let excess = self.unverified.len().saturating_sub(notes::RING / 2);
        self.unverified.drain(..excess);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the thread owns to read and release this rank's eager flags.
pub struct Reader {
    stream: Stream,
    host: PinnedHost,
    /// Pinned memory for the note ring.
    ring: PinnedHost,
    done: Event,
    own: u64,
    layout: FlagLayout,
    // Last: the device (its retained context) outlives the objects above.
    dev: Arc<dyn Device>,
}

impl Reader {
    /// Objects of `dev`'s context (bound on this thread): a private stream,
    /// pinned memory for the two eager arrays, an event; `own` is this
    /// rank's flag buffer.
    pub fn new(
        dev: Arc<dyn Device>,
        stream: Stream,
        own: u64,
        layout: FlagLayout,
    ) -> PluginResult<Self> {
        Ok(Reader {
            stream,
            host: PinnedHost::new(Self::bytes(&layout))?,
            ring: PinnedHost::new(layout.ring_bytes())?,
            done: Event::new()?,
            own,
            layout,
            dev,
        })
    }

    /// The eager arrays: the first two of the buffer, contiguous.
    fn bytes(layout: &FlagLayout) -> usize {
        layout.offset(Array::EagerComplete, 0) + layout.stride()
    }

    /// Wait (polling, bounded) until the work queued on the private stream so far is done.
    fn settle(&self, what: &str) -> Result<(), String> {
        self.done
            .record_on(&self.stream)
            .map_err(|e| e.message().to_string())?;
        let until = Instant::now() + OWN_STREAM_WAIT;
        loop {
            match self.done.done() {
                Ok(true) => return Ok(()),
                Ok(false) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
                Ok(false) => {
                    return Err(format!(
                        "{what} did not finish within {OWN_STREAM_WAIT:?} on the watchdog's stream"
                    ))
                }
                Err(e) => return Err(e.message().to_string()),
            }
        }
    }

    /// `bytes` (a multiple of 4) at `offset` of this rank's buffer, copied
    /// through `dst` (pinned, at least `bytes` long) on the private stream,
    /// as 4-byte words.
    fn fetch(
        &self,
        dst: &PinnedHost,
        offset: usize,
        bytes: usize,
        what: &str,
    ) -> Result<Vec<u32>, String> {
        debug_assert!(bytes.is_multiple_of(4) && offset + bytes <= self.layout.bytes());
        // SAFETY: `own` holds the whole layout (offset + bytes lie in it); `dst`
        // holds at least `bytes` bytes (the callers' buffers are sized for what
        // they fetch); the private stream is of the same context.
        let r = unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                dst.host().cast(),
                self.own + offset as u64,
                bytes,
                self.stream.raw(),
            )
        };
        check(r, &format!("cuMemcpyDtoHAsync ({what})")).map_err(|e| e.message().to_string())?;
        self.settle(&format!("reading {what}"))?;
        Ok((0..bytes / 4)
            .map(|i| {
                // SAFETY: i < bytes / 4, inside `dst`; the copy completed (settled
                // above); pinned allocations are page-aligned.
                unsafe { std::ptr::read_volatile((dst.host() as *const u32).add(i)) }
            })
            .collect())
    }

    /// This rank's note ring (`crate::notes`): `nranks × RING × WORDS` words.
    fn read_ring(&self) -> Result<Vec<u32>, String> {
        let l = &self.layout;
        self.fetch(
            &self.ring,
            l.ring_offset(),
            l.ring_bytes(),
            "the call notes",
        )
    }

    /// This rank's eager arrays.
    fn read(&self) -> Result<Snapshot, String> {
        let words = self.fetch(&self.host, 0, Self::bytes(&self.layout), "the flags")?;
        let n = self.layout.nranks;
        let at = |a: Array| self.layout.offset(a, 0) / 4;
        let slots = |a: Array| words[at(a)..at(a) + n].to_vec();
        Ok(Snapshot {
            ready: slots(Array::EagerReady),
            complete: slots(Array::EagerComplete),
        })
    }

    /// The LL kernel's error word, when set (`ferrocx_sdk::kernels::ll`).
    fn ll_fault(&self) -> Result<Option<u64>, String> {
        use ferrocx_sdk::kernels::ll::CTL_ERROR;
        let at = self.layout.ll_ctl_offset() + CTL_ERROR * 8;
        // The eager arrays' pinned buffer holds more than these 8 bytes.
        let w = self.fetch(&self.host, at, 8, "the LL error word")?;
        let code = u64::from(w[0]) | u64::from(w[1]) << 32;
        Ok((code != 0).then_some(code))
    }

    /// Write `value` into every slot of both eager arrays, and raise the LL
    /// kernel's abort word (its waits, of this call and every later one, give up).
    fn release(&self, value: u32) -> Result<(), String> {
        let words = Self::bytes(&self.layout) / 4;
        // SAFETY: `own` holds the eager arrays (`words` words); the private stream is
        // live and of the same context.
        let r = unsafe { sys::cuMemsetD32Async(self.own, value, words, self.stream.raw()) };
        check(r, "cuMemsetD32Async").map_err(|e| e.message().to_string())?;
        self.raise_abort()
    }

    /// Raise the LL control words' abort word: every kernel wait (LL,
    /// Simple, point-to-point, a captured barrier's) of this call and every
    /// later one gives up.
    fn raise_abort(&self) -> Result<(), String> {
        let abort = self.own
            + (self.layout.ll_ctl_offset() + ferrocx_sdk::kernels::ll::CTL_ABORT * 8) as u64;
        // SAFETY: the abort word (8 bytes) lies in `own`'s layout; the private
        // stream is live and of the same context.
        let r = unsafe { sys::cuMemsetD32Async(abort, 1, 2, self.stream.raw()) };
        check(r, "cuMemsetD32Async (LL abort word)").map_err(|e| e.message().to_string())?;
        self.settle("the release")
    }
}

/// The watchdog of one communicator.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Start the thread.
    pub fn start(host: Host, rank: usize, reader: Reader) -> PluginResult<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                tracker: Tracker::default(),
                pool: Vec::new(),
                unverified: Vec::new(),
                broken: None,
                stop: false,
                ll_used: false,
                abort_raised: false,
                last_stream: None,
                parked_idle: false,
            }),
            wake: Condvar::new(),
            host,
            rank,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ferrocx-ce-watch-{rank}"))
            .spawn(move || run(s, reader))
            .map_err(|e| PluginError::io("starting the ce watchdog thread", e))?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
        })
    }

    /// The error that broke the communicator, if any.
    pub fn status(&self) -> PluginResult<()> {
        match &self.shared.lock().broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Break the communicator with `e` (unless already broken); pending
    /// collectives are released.
    pub fn break_with(&self, e: PluginError) {
        self.shared.lock().broken.get_or_insert(e);
        self.shared.wake.notify_all();
    }

    /// Before queuing an eager collective on `stream`: retire completed
    /// entries, and when the newest pending one went to another stream,
    /// make `stream` wait for it (ce collectives of a communicator run in
    /// launch order, whatever streams they are issued on).
    ///
    /// # Safety
    /// `stream` is a live stream (or null) of the device's context, bound on
    /// this thread.
    pub unsafe fn order(&self, stream: sys::CUstream) -> PluginResult<()> {
        let _span = spans::enter(Point::CeOrder);
        let mut st = self.shared.lock();
        // A pending barrier route is retired at once, newest first
        // (`barriers_pending` reads the tracker right after this launch);
        // self-timed kernels only once a few are tracked, asked from
        // `RETIRE_BEHIND` calls back.
        if st.tracker.oldest_with_barriers().is_some() {
            let _span = spans::enter(Point::CeRetire);
            st.retire(0, RETIRE_MOST);
        } else if st.tracker.len() >= RETIRE_AT {
            let _span = spans::enter(Point::CeRetire);
            st.retire(RETIRE_BEHIND, RETIRE_MOST);
        }
        // By level, not by crossing: notes that `drain` retired count too.
        if st.unverified.len() >= VERIFY_BATCH {
            self.shared.wake.notify_all();
        }
        if st.last_stream != Some(stream as usize) {
            if let Some(ev) = st.tracker.last_event() {
                // SAFETY: the caller's contract for the stream; the event is live (held
                // by its entry) and of the same context.
                let r = unsafe { sys::cuStreamWaitEvent(stream, ev.raw(), 0) };
                check(
                    r,
                    "cuStreamWaitEvent (ordering ce collectives across streams)",
                )?;
            }
        }
        Ok(())
    }

    /// Make `ev` the tip of every eager launch so far (`chain.rs`: the
    /// first capture): `side` (ce's own stream, never captured) waits for
    /// the newest pending one, then records `ev`.
    ///
    /// # Safety
    /// `side` is a live stream of the device's context, bound on this thread.
    pub unsafe fn bridge(&self, side: sys::CUstream, ev: &Event) -> PluginResult<()> {
        let st = self.shared.lock();
        if let Some(last) = st.tracker.last_event() {
            // SAFETY: the caller's contract; the event is live (held by its
            // entry, under the lock) and of the same context.
            let r = unsafe { sys::cuStreamWaitEvent(side, last.raw(), 0) };
            check(r, "cuStreamWaitEvent (bridging ce's launch chain)")?;
        }
        // SAFETY: the caller's contract.
        unsafe { ev.record(side) }
    }

    /// Whether a tracked collective with barriers may still be pending: a
    /// stream at one of its barriers needs this thread's release if a peer
    /// never comes. Asked right after a launch, whose `order` retired what
    /// had completed: no event is queried again here (a barrier route that
    /// completed since reads as pending, which only costs a caller a wait).
    pub fn barriers_pending(&self) -> bool {
        self.shared.lock().tracker.oldest_with_barriers().is_some()
    }

    /// After queuing an eager collective on `stream`: track it.
    ///
    /// # Safety
    /// As for [`order`](Self::order).
    pub unsafe fn track(
        &self,
        stream: sys::CUstream,
        seq: u64,
        what: watch::What,
        expects: Vec<Expect>,
        note: Option<(u64, notes::Call)>,
    ) -> PluginResult<()> {
        let _span = spans::enter(Point::CeTrack);
        let mut st = self.shared.lock();
        let ev = match st.pool.pop() {
            Some(e) => e,
            None => Event::new()?,
        };
        // SAFETY: the caller's contract for the stream; the event is of the same context.
        if let Err(e) = unsafe { ev.record(stream) } {
            st.pool.push(ev);
            return Err(e);
        }
        let wake = st.parked_idle;
        st.tracker.push(Entry {
            seq,
            what,
            expects,
            event: ev,
            deadline: Instant::now() + self.shared.host.timeout(),
            note,
        });
        st.last_stream = Some(stream as usize);
        drop(st);
        if wake {
            self.shared.wake.notify_all();
        }
        Ok(())
    }

    /// An LL kernel was queued (eager or captured): watch its error word.
    pub fn ll_launched(&self) {
        let mut st = self.shared.lock();
        if !st.ll_used {
            st.ll_used = true;
            drop(st);
            self.shared.wake.notify_all();
        }
    }

    /// Wait until every tracked collective completed, at most `limit`;
    /// whether they did.
    pub fn drain(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            {
                let mut st = self.shared.lock();
                st.retire(0, usize::MAX);
                if st.tracker.is_empty() {
                    return true;
                }
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stop the thread and drop every event (the device's context is bound
    /// on this thread).
    pub fn stop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut st = self.shared.lock();
        let pending = st.tracker.clear();
        drop(pending);
        st.pool.clear();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The error of a kernel sharing the LL control words (LL, Simple,
/// point-to-point, a captured barrier's wait) that recorded `code` in its
/// error word.
fn ll_timeout(me: usize, timeout: Duration, code: u64) -> PluginError {
    let why = if code & 0xffff_ffff == ferrocx_sdk::kernels::ll::ERR_TIMEOUT {
        let peer = match code >> 32 {
            0 => "a peer".to_string(),
            p => format!("rank {}", p - 1),
        };
        format!(
            "waited more than FERROCX_TIMEOUT ({}s) for {peer}'s data or room for its own (a rank that never made the call, or died)",
            timeout.as_secs_f64()
        )
    } else if code & 0xffff_ffff == ferrocx_sdk::kernels::p2p::ERR_SIZE {
        // Only the receive sees both sizes: the core's mismatch wording, so
        // a program can match it (Error::Mismatch).
        let peer = (code >> 32).saturating_sub(1);
        return PluginError::remote(format!(
            "mismatched calls: rank {me} called a device receive from rank {peer} whose size differs from its send (ce point-to-point), rank {peer} called a device send to rank {me} of another size"
        ));
    } else if code & 0xffff_ffff == ferrocx_sdk::kernels::p2p::ERR_SIZE_SENT {
        let peer = (code >> 32).saturating_sub(1);
        return PluginError::remote(format!(
            "mismatched calls: rank {me} called a device send to rank {peer} whose size differs from its receive (ce point-to-point), rank {peer} called a device receive from rank {me} of another size"
        ));
    } else if code & 0xffff_ffff == ferrocx_sdk::kernels::simple::ERR_WINDOW {
        let peer = (code >> 32).saturating_sub(1);
        return PluginError::invalid(format!(
            "a ce direct kernel on rank {me}: rank {peer}'s buffer for this call is not where rank {me}'s window puts it (another offset or another window, a rank in place beside one out of place, or the call routed otherwise on rank {peer}): ce's windows must be symmetric, every rank passing its buffers at the same offset in the same window; nothing was read or written, and the communicator is broken"
        ));
    } else if code & 0xffff_ffff == ferrocx_sdk::kernels::ll::ERR_SPENT {
        return PluginError::internal(format!(
            "ce's LL kernels on rank {me} reached the {} calls one communicator may make (replays of captured calls included; their flags would repeat): nothing was moved, and the communicator is broken; create a new one",
            ferrocx_sdk::kernels::ll::MAX_CALLS
        ));
    } else if code & 0xffff_ffff == ferrocx_sdk::kernels::graph_wait::ERR_BARRIER {
        let peer = (code >> 32).saturating_sub(1);
        return PluginError::timeout(format!(
            "a captured ce barrier (a CUDA graph's replay) on rank {me} waited more than FERROCX_TIMEOUT ({}s) for rank {peer}, which never arrived (it never replayed its graph this far, or died); the replay's output is undefined and the communicator is broken",
            timeout.as_secs_f64()
        ));
    } else {
        format!("failed with code {code}")
    };
    PluginError::timeout(format!(
        "a ce exchange kernel (LL, LL128, Simple or point-to-point) on rank {me} {why}; its output is undefined and the communicator is broken"
    ))
}

/// An entry's description without its event.
fn describe(e: &Entry<Event>) -> Entry<()> {
    Entry {
        seq: e.seq,
        what: e.what,
        expects: e.expects.clone(),
        event: (),
        deadline: e.deadline,
        note: e.note,
    }
}

fn run(shared: Arc<Shared>, reader: Reader) {
    // Keep the device's context bound on this thread for its whole life.
    let _bound = reader.dev.bind();
    ferrocx_sdk::cuda::relax_capture_checks_on_this_thread();
    let me = shared.rank;
    let timeout = shared.host.timeout();
    let mut last_verify = Instant::now();
    let mut st = shared.lock();
    while !st.stop {
        // A failed event is the error to report (its call may never have
        // reached its barrier, so its notes say nothing): applied first, and the
        // notes of that batch dropped. Front only, like a launch (calls
        // complete in launch order): a few event queries under the lock,
        // not one per pending call (thousands, with the host far ahead of
        // the GPU, held a launch up for milliseconds). The oldest entry left
        // was asked and is pending, so `overdue` sees no completed call.
        if let Some(x) = st.retire(0, usize::MAX) {
            st.broken.get_or_insert(PluginError::system(format!(
                "a ce collective failed on rank {me}'s stream: {}",
                x.message()
            )));
        }
        if st.broken.is_some() {
            st.unverified.clear();
        }
        if st.ll_used && !st.abort_raised && shared.host.aborted() {
            // A peer died or the communicator was aborted: waits of replayed
            // graphs (not tracked) give up now, not at their deadlines.
            st.abort_raised = true;
            drop(st);
            if let Err(why) = reader.raise_abort() {
                shared.host.warn(format!(
                    "ce watchdog on rank {me}: raising the abort word failed: {why}"
                ));
            }
            st = shared.lock();
            continue;
        }
        if st.ll_used && st.broken.is_none() {
            // Read without the lock: a kernel that timed out on its own.
            drop(st);
            let fault = reader.ll_fault();
            st = shared.lock();
            if let Ok(Some(e)) = fault.map(|f| f.map(|code| ll_timeout(me, timeout, code))) {
                shared.host.warn(format!("ce watchdog: {}", e.message()));
                st.broken.get_or_insert(e);
                continue;
            }
        }
        // Compare in batches while calls keep completing (a pass reads the
        // ring from the device: one per completed call, or per call the GPU
        // finished before the host queued the next, would keep this thread and
        // the driver busy beside the launching thread), and whatever is left
        // a poll period after the last comparison.
        let due = st.unverified.len() >= VERIFY_BATCH || last_verify.elapsed() >= POLL;
        if !st.unverified.is_empty() && due {
            last_verify = Instant::now();
            // Compare the completed collectives' notes with the peers' (notes.rs):
            // read the ring without the lock.
            let calls = std::mem::take(&mut st.unverified);
            drop(st);
            let verdict = reader
                .read_ring()
                .map(|ring| notes::verify(me, reader.layout.nranks, &ring, &calls));
            st = shared.lock();
            match verdict {
                Ok(Some(m)) => {
                    let e = PluginError::remote(notes::mismatch_message(me, &m));
                    shared.host.warn(format!("ce watchdog: {}", e.message()));
                    st.broken.get_or_insert(e);
                }
                Ok(None) => {}
                Err(why) => shared.host.debug(format!(
                    "ce watchdog on rank {me}: the call notes could not be read ({why}); not checked"
                )),
            }
            // The lock was let go: look at everything (stop, breaks, retirements) again.
            continue;
        }
        if !st.tracker.is_empty() {
            // What to do, decided under the lock; the device work without it.
            let aborted = shared.host.aborted();
            // LL calls have no barriers (their release is the abort word).
            let value = st
                .tracker
                .oldest_with_barriers()
                .map_or(0, |e| watch::release_value(&e.expects));
            let job = if st.broken.is_some() {
                Some((None, false))
            } else if aborted {
                st.tracker.oldest().map(|e| (Some(describe(e)), true))
            } else {
                st.tracker
                    .overdue(Instant::now())
                    .map(|e| (Some(describe(e)), false))
            };
            if let Some((entry, aborted)) = job {
                drop(st);
                let read = match (&entry, aborted) {
                    (Some(_), false) => Some(reader.read()),
                    _ => None,
                };
                let released = reader.release(value);
                let err = entry.as_ref().map(|e| match &read {
                    Some(r) => watch::verdict(me, e, timeout, r, &released),
                    None => watch::aborted(me, e, &released),
                });
                st = shared.lock();
                if let Some(err) = err {
                    shared.host.warn(format!("ce watchdog: {}", err.message()));
                    st.broken.get_or_insert(err);
                } else if let Err(why) = released {
                    shared.host.warn(format!("ce watchdog on rank {me}: releasing the stream of a broken communicator failed: {why}"));
                }
                let pending = st.tracker.clear();
                drop(pending);
                continue;
            }
        }
        let wait = match st.tracker.next_deadline() {
            // Notes not due yet: at the end of the poll period.
            None if !st.unverified.is_empty() => POLL
                .saturating_sub(last_verify.elapsed())
                .max(Duration::from_millis(1)),
            None => IDLE,
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), POLL),
        };
        st.parked_idle = wait == IDLE;
        st = shared
            .wake
            .wait_timeout(st, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        st.parked_idle = false;
    }
}
