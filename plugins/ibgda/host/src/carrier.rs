//! The proxy handler's carrier between ranks of one host: a put is a copy
//! from this rank's window into the peer's (mapped here through CUDA IPC by
//! the core) on one copy-engine stream per path; its signal, and every
//! fetch-add, is a host atomic on the peer's signal words (a shared segment
//! its GPU maps). The two paths are two streams: a fault injected on one, or
//! a stream that stops completing, leaves the other working.
//!
//! Exactly once: a request re-posted after a lost completion may be copied
//! twice (the same bytes, as when an RDMA WRITE is re-posted), but its signal
//! or fetch-add goes through the destination's [`Receiver`], which applies
//! each (sender, sequence number) once.
//!
//! Also here: what every carrier of this crate gives the proxy thread
//! ([`HostCarrier`], [`Outcome`]) and the checks of a record that do not
//! depend on the carrier ([`check_record`]).

use crate::mapped::Signals;
use ferrocx_ibgda::fault::{Fault, FaultInjector};
use ferrocx_ibgda::health::{Completion, Memory, Nanos, Path, PeerId, Receiver, Request, Seq};
use ferrocx_ibgda::proxy::{Carrier, CarrierRequest, Refused};
use ferrocx_ibgda::queue::{SignalOp, WorkRecord};
use ferrocx_sdk::copy::Mark;
use ferrocx_sdk::device::Queue;
use parking_lot::RwLock;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The window number that names the signal words (fetch-adds act there).
pub const SIGNAL_WINDOW: u32 = u32::MAX;

/// Status of a refused post: the peer's process is gone.
pub const REFUSED_PEER_GONE: u32 = 0x1;
/// Status of a refused post: the copy engine refused the copy.
pub const REFUSED_COPY: u32 = 0x2;

/// What a carrier saw of one attempt of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A completion (for [`Proxy::on_completion`](ferrocx_ibgda::proxy::Proxy::on_completion)).
    Done(Completion),
    /// An error completion with the carrier's status (for
    /// [`Proxy::on_error_completion`](ferrocx_ibgda::proxy::Proxy::on_error_completion)).
    Failed {
        /// The peer the request went to.
        peer: PeerId,
        /// The path it went on.
        path: Path,
        /// The request.
        seq: Seq,
        /// The carrier's status code.
        status: u32,
    },
}

/// A carrier as the proxy thread drives it: posts (through [`Carrier`]) and,
/// every round, [`progress`](Self::progress).
pub trait HostCarrier: Carrier + Send {
    /// Moves the transfers on and appends what completed (or failed) by `now`
    /// to `out`; returns how much happened (completions, copies finished,
    /// messages handled), so the thread keeps spinning while there is work.
    fn progress(&mut self, now: Nanos, out: &mut Vec<Outcome>) -> usize;
    /// Transfers the thread should keep spinning for.
    fn in_flight(&self) -> usize;
    /// The earliest time something is due without other activity (a delayed
    /// completion).
    fn next_due(&self) -> Option<Nanos>;
    /// A line for the log (a connection broke...), oldest first.
    fn take_note(&mut self) -> Option<String> {
        None
    }
}

/// Checks of `work` that hold for every carrier: the window is registered
/// and the transfer inside it (every rank's window has the same size), a
/// fetch-add names the signal words, signal and fetch-add words are aligned
/// words of the `signal_bytes` every rank has.
pub fn check_record(windows: &Windows, signal_bytes: u64, work: &WorkRecord) -> Result<(), String> {
    let signal_ok =
        |at: u64| at.is_multiple_of(8) && at.checked_add(8).is_some_and(|e| e <= signal_bytes);
    if let Some(t) = work.transfer() {
        let wins = windows.read();
        let w = wins
            .get(t.window as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| format!("window {} is not registered", t.window))?;
        let fits = |off: u64| {
            off.checked_add(u64::from(t.bytes))
                .is_some_and(|e| e <= w.bytes)
        };
        if !fits(t.dst) || !fits(t.src) {
            return Err(format!(
                "{} bytes from offset {} to offset {} run past window {}'s {} bytes",
                t.bytes, t.src, t.dst, t.window, w.bytes
            ));
        }
    }
    match *work {
        WorkRecord::FetchAdd { window, .. } if window != SIGNAL_WINDOW => Err(format!(
            "a fetch-add acts on the signal words (window FXG_SIGNALS), not window {window}"
        )),
        WorkRecord::PutSignal { signal, .. } if !signal_ok(signal) => Err(format!(
            "signal word at {signal} is not an aligned word of the {signal_bytes} signal bytes"
        )),
        WorkRecord::FetchAdd { dst, .. } if !signal_ok(dst) => Err(format!(
            "fetch-add word at {dst} is not an aligned word of the {signal_bytes} signal bytes"
        )),
        _ => Ok(()),
    }
}

/// A registered window as the carrier uses it.
#[derive(Debug, Clone)]
pub struct Win {
    /// This rank's window.
    pub base: u64,
    /// Bytes (every rank's).
    pub bytes: u64,
    /// Rank r's window mapped here (0 where not mapped).
    pub peer_bases: Vec<u64>,
}

/// Windows by number; a deregistered one leaves `None` (numbers stay).
pub type Windows = Arc<RwLock<Vec<Option<Win>>>>;

struct Flight {
    peer: PeerId,
    path: Path,
    req: Request,
    work: WorkRecord,
    fault: Option<Fault>,
}

/// Applies signals and fetch-adds to one peer's signal words.
struct Apply<'a> {
    words: &'a Signals,
    work: WorkRecord,
}

impl Memory for Apply<'_> {
    fn write(&mut self, _from: PeerId, _seq: Seq, _dst: u64, _len: u32) {
        // The bytes were copied already; what must happen once is the signal.
        if let WorkRecord::PutSignal {
            signal, value, op, ..
        } = self.work
        {
            let w = self.words.word(signal);
            match op {
                SignalOp::Set => w.store(value, std::sync::atomic::Ordering::Release),
                SignalOp::Add => {
                    w.fetch_add(value, std::sync::atomic::Ordering::AcqRel);
                }
            }
        }
    }

    fn fetch_add(&mut self, _from: PeerId, _seq: Seq, dst: u64, add: u64) -> u64 {
        self.words
            .word(dst)
            .fetch_add(add, std::sync::atomic::Ordering::AcqRel)
    }
}

/// The same-host carrier of one rank.
pub struct SameHost {
    /// Copy streams: [primary, backup].
    paths: [Box<dyn Queue>; 2],
    /// Copies queued since the last mark, per path.
    unmarked: [Vec<Flight>; 2],
    /// Marked batches in stream order, per path.
    batches: [VecDeque<(Mark, Vec<Flight>)>; 2],
    /// Completions decided but held back by a delay fault.
    delayed: Vec<(Nanos, Completion)>,
    /// Completions ready for the proxy.
    ready: Vec<Completion>,
    windows: Windows,
    /// Per rank: its signal words (this rank's own too), where this process
    /// opened them (the peers this carrier serves).
    signals: Vec<Option<Arc<Signals>>>,
    /// Per destination: its receiving side for this rank's requests.
    receivers: Vec<Receiver>,
    pids: Vec<i32>,
    /// Per peer: when its process was last seen alive.
    seen_alive: Vec<Instant>,
    faults: FaultInjector,
}

impl SameHost {
    /// A carrier over `paths` ([primary, backup] copy queues of this rank's device).
    pub fn new(
        paths: [Box<dyn Queue>; 2],
        windows: Windows,
        signals: Vec<Option<Arc<Signals>>>,
        pids: Vec<i32>,
        faults: FaultInjector,
    ) -> SameHost {
        let n = pids.len();
        SameHost {
            paths,
            unmarked: [Vec::new(), Vec::new()],
            batches: [VecDeque::new(), VecDeque::new()],
            delayed: Vec::new(),
            ready: Vec::new(),
            windows,
            signals,
            receivers: (0..n as u32).map(|r| Receiver::new(PeerId(r))).collect(),
            pids,
            seen_alive: vec![Instant::now(); n],
            faults,
        }
    }

    /// Requests posted and not yet completed (or dropped).
    fn flights(&self) -> usize {
        self.unmarked.iter().map(Vec::len).sum::<usize>()
            + self
                .batches
                .iter()
                .flatten()
                .map(|b| b.1.len())
                .sum::<usize>()
            + self.delayed.len()
    }

    /// Marks what was queued, and collects the completions due at `now`
    /// (copies done, signals applied once, faults obeyed) for the proxy.
    fn completions(&mut self, now: Nanos) -> Vec<Completion> {
        for p in 0..2 {
            if self.unmarked[p].is_empty() {
                continue;
            }
            let flights = std::mem::take(&mut self.unmarked[p]);
            // Without a mark the copies cannot be known done: their completions
            // never come and the health machine's timeout fails them over.
            if let Ok(m) = self.paths[p].mark() {
                self.batches[p].push_back((m, flights));
            }
        }
        for p in 0..2 {
            while let Some((m, _)) = self.batches[p].front() {
                if !matches!(self.paths[p].poll(*m), Ok(true)) {
                    break;
                }
                let (m, flights) = self.batches[p].pop_front().expect("front exists");
                self.paths[p].release(m);
                for f in flights {
                    self.land(f, now);
                }
            }
        }
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                let (_, c) = self.delayed.swap_remove(i);
                self.ready.push(c);
            } else {
                i += 1;
            }
        }
        std::mem::take(&mut self.ready)
    }

    /// A request's data is in place: apply what must happen once and complete it.
    fn land(&mut self, f: Flight, now: Nanos) {
        let peer = f.peer.0 as usize;
        // `check` refused peers whose words are not open here.
        let Some(words) = self.signals[peer].as_deref() else {
            return;
        };
        let mut apply = Apply {
            words,
            work: f.work,
        };
        let Some(c) = self.receivers[peer].on_request(f.path, &f.req, &mut apply) else {
            return;
        };
        match f.fault {
            Some(Fault::Drop) => {}
            Some(Fault::Delay(d)) => self.delayed.push((now.after(d), c)),
            None => self.ready.push(c),
        }
    }

    fn peer_alive(&mut self, peer: usize) -> bool {
        // kill(pid, 0) at most every 10 ms per peer: posts stay cheap.
        if self.seen_alive[peer].elapsed() < Duration::from_millis(10) {
            return true;
        }
        if ferrocx_sdk::proc::pid_alive(self.pids[peer]) {
            self.seen_alive[peer] = Instant::now();
            return true;
        }
        false
    }
}

fn path_index(p: Path) -> usize {
    match p {
        Path::Primary => 0,
        Path::Backup => 1,
    }
}

impl HostCarrier for SameHost {
    fn progress(&mut self, now: Nanos, out: &mut Vec<Outcome>) -> usize {
        let done = self.completions(now);
        let n = done.len();
        out.extend(done.into_iter().map(Outcome::Done));
        n
    }

    fn in_flight(&self) -> usize {
        self.flights()
    }

    fn next_due(&self) -> Option<Nanos> {
        self.delayed.iter().map(|d| d.0).min()
    }
}

impl Carrier for SameHost {
    fn check(&self, peer: PeerId, work: &WorkRecord) -> Result<(), String> {
        let p = peer.0 as usize;
        if p >= self.pids.len() {
            return Err(format!("peer {p} is not a rank of this communicator"));
        }
        let words = self.signals[p]
            .as_ref()
            .ok_or_else(|| format!("rank {p} is not served by the same-host carrier"))?;
        check_record(&self.windows, words.len() as u64, work)?;
        if let Some(t) = work.transfer() {
            let wins = self.windows.read();
            let w = wins.get(t.window as usize).and_then(Option::as_ref);
            if w.is_none_or(|w| w.peer_bases.get(p).is_none_or(|&b| b == 0)) {
                return Err(format!(
                    "rank {p}'s window {} is not mapped in this process",
                    t.window
                ));
            }
        }
        Ok(())
    }

    fn post(&mut self, peer: PeerId, path: Path, req: &CarrierRequest) -> Result<(), Refused> {
        let p = peer.0 as usize;
        if self.signals.get(p).is_none_or(Option::is_none) || !self.peer_alive(p) {
            return Err(Refused {
                status: REFUSED_PEER_GONE,
            });
        }
        let fault = self.faults.on_post(peer, path);
        let flight = Flight {
            peer,
            path,
            req: req.req,
            work: req.work,
            fault,
        };
        match req.work.transfer() {
            Some(t) => {
                let (to, from) = {
                    let wins = self.windows.read();
                    match wins.get(t.window as usize).and_then(Option::as_ref) {
                        Some(w) => (w.peer_bases[p] + t.dst, w.base + t.src),
                        None => {
                            return Err(Refused {
                                status: REFUSED_COPY,
                            })
                        }
                    }
                };
                let q = path_index(path);
                // SAFETY: `check` bounded both ranges inside the windows, which
                // stay registered while requests naming them are in flight
                // (the ABI's rule for window_deregister).
                let copied = unsafe { self.paths[q].copy(to, from, t.bytes as usize) };
                copied.map_err(|_| Refused {
                    status: REFUSED_COPY,
                })?;
                self.unmarked[q].push(flight);
            }
            // Nothing to copy: applied now, completed as its fault says.
            None => {
                // `now` only matters for delays; the next progress round
                // releases them, so a fresh clock read is close enough.
                let now = Nanos(crate::clock::now());
                self.land(flight, now);
            }
        }
        Ok(())
    }
}
