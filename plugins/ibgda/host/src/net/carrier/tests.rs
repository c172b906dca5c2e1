//! The TCP carrier between ranks that are threads of this process: real
//! sockets on loopback, set up by `setup::connect` through an in-process
//! all-gather; windows and signal words in host memory; copies on the SDK's
//! stand-in GPU queues (`device::fake::FakeQueue`, which performs a copy only
//! when a mark after it is polled complete, so bytes read early are wrong).
//! Each rank runs the proxy (`Proxy`, with queues in its own memory) and the
//! thread's loop body (`thread::step`); a "GPU" model pushes records and
//! reads completions. Nothing needs CUDA.

use super::*;
use crate::carrier::{Win, SIGNAL_WINDOW};
use crate::net::setup::{self, Gather};
use crate::net::wire;
use crate::thread::step;
use ferrocx_ibgda::fault::{parse_plans, FaultPlan};
use ferrocx_ibgda::health::HealthConfig;
use ferrocx_ibgda::proxy::{Proxy, ProxyConfig, ProxyEvent, QueueId};
use ferrocx_ibgda::queue::{CqEntry, CqStatus, QueueError};
use ferrocx_sdk::device::fake::FakeQueue;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

/// An all-gather's state: the round, what each rank gave this round, the
/// last round's result.
type Gathering = (u64, Vec<Option<Vec<u8>>>, Vec<Vec<u8>>);

/// An all-gather between threads.
struct Room {
    n: usize,
    state: Mutex<Gathering>,
    cv: Condvar,
}

impl Room {
    fn new(n: usize) -> Arc<Room> {
        Arc::new(Room {
            n,
            state: Mutex::new((0, vec![None; n], Vec::new())),
            cv: Condvar::new(),
        })
    }
}

struct Member {
    room: Arc<Room>,
    rank: usize,
}

impl Gather for Member {
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let r = &self.room;
        let mut s = r.state.lock();
        let round = s.0;
        s.1[self.rank] = Some(mine.to_vec());
        if s.1.iter().all(Option::is_some) {
            s.2 = s.1.iter_mut().map(|v| v.take().unwrap()).collect();
            s.0 += 1;
            r.cv.notify_all();
        } else {
            let until = Instant::now() + Duration::from_secs(30);
            while s.0 == round {
                if r.cv.wait_until(&mut s, until).timed_out() {
                    return Err(format!("rank {}: all-gather timed out", self.rank));
                }
            }
        }
        debug_assert_eq!(s.2.len(), r.n);
        Ok(s.2.clone())
    }
}

/// Signal words in host memory.
struct HostWords(Vec<AtomicU64>);

impl SignalWords for HostWords {
    fn len(&self) -> usize {
        8 * self.0.len()
    }
    fn word(&self, at: u64) -> &AtomicU64 {
        &self.0[at as usize / 8]
    }
}

const WORDS: usize = 64;

/// One rank: its window, words, proxy and carrier.
struct Rank {
    me: usize,
    window: Box<[u8]>,
    words: Arc<HostWords>,
    proxy: Proxy,
    carrier: NetCarrier,
    /// Completions the GPU model read, per peer.
    cqes: BTreeMap<usize, Vec<CqEntry>>,
    events: Vec<ProxyEvent>,
}

fn health(timeout_ms: u64, recovery_ms: u64) -> HealthConfig {
    HealthConfig {
        timeout: Duration::from_millis(timeout_ms),
        recovery: Duration::from_millis(recovery_ms),
        max_recovery: Duration::from_millis(recovery_ms),
    }
}

/// Ranks `0..n`, connected, each with a window of `bytes` (its second half
/// filled with its pattern) and 16-slot rings.
fn ranks(n: usize, bytes: usize, hc: HealthConfig, plans: Vec<FaultPlan>) -> Vec<Rank> {
    ranks_with(n, bytes, hc, plans, 2)
}

/// As [`ranks`], the reads out of the windows (puts being sent) finishing
/// after `read_polls` polls.
fn ranks_with(
    n: usize,
    bytes: usize,
    hc: HealthConfig,
    plans: Vec<FaultPlan>,
    read_polls: u32,
) -> Vec<Rank> {
    let room = Room::new(n);
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let handles: Vec<_> = (0..n)
        .map(|me| {
            let room = room.clone();
            std::thread::spawn(move || {
                let g = Member { room, rank: me };
                let net = (0..n).map(|r| r != me).collect::<Vec<_>>();
                setup::connect(&g, me, &net, 0xfeed, Ok([lo, lo]), Duration::from_secs(20))
                    .unwrap_or_else(|e| panic!("rank {me}: {e}"))
            })
        })
        .collect();
    let links: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    links
        .into_iter()
        .enumerate()
        .map(|(me, l)| {
            let mut window = vec![0u8; bytes].into_boxed_slice();
            let half = bytes / 2;
            for (i, b) in window[half..].iter_mut().enumerate() {
                *b = pattern(me, i);
            }
            let windows: Windows = Arc::new(RwLock::new(vec![Some(Win {
                base: window.as_mut_ptr() as u64,
                bytes: bytes as u64,
                peer_bases: vec![0; n],
            })]));
            let words = Arc::new(HostWords((0..WORDS).map(|_| AtomicU64::new(0)).collect()));
            let q = |polls| -> Box<dyn Queue> { Box::new(FakeQueue::new(polls)) };
            let carrier = NetCarrier::new(
                me,
                l,
                [[q(read_polls), q(2)], [q(read_polls), q(2)]],
                windows,
                words.clone(),
                FaultInjector::new(plans.clone()),
                4 * hc.timeout,
            );
            let pcfg = ProxyConfig {
                health: hc,
                sq_slots: 16,
                cq_slots: 16,
                max_owed: 64,
                ..ProxyConfig::default()
            };
            let mut proxy = Proxy::new(PeerId(me as u32), pcfg).unwrap();
            for r in (0..n).filter(|&r| r != me) {
                let id = QueueId {
                    peer: PeerId(r as u32),
                    path: Path::Primary,
                };
                proxy.add_queue(id, true).unwrap();
            }
            Rank {
                me,
                window,
                words,
                proxy,
                carrier,
                cqes: BTreeMap::new(),
                events: Vec::new(),
            }
        })
        .collect()
}

/// Byte `i` of the second half of rank `from`'s window.
fn pattern(from: usize, i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (from * 29 + 7)) as u8
}

impl Rank {
    fn queue(peer: usize) -> QueueId {
        QueueId {
            peer: PeerId(peer as u32),
            path: Path::Primary,
        }
    }

    /// The GPU model: reads completions, then pushes from `todo` while there
    /// is room. Returns whether anything happened.
    fn gpu(&mut self, peer: usize, todo: &mut VecDeque<WorkRecord>) -> bool {
        let (sq, cq) = (self.proxy.request_queue(), self.proxy.completion_queue());
        let (sqm, cqm) = self.proxy.memory_mut(Self::queue(peer)).unwrap();
        let mut any = false;
        while let Some((_, e)) = cq.pop(cqm).unwrap() {
            self.cqes.entry(peer).or_default().push(e.unwrap());
            any = true;
        }
        while let Some(rec) = todo.front() {
            match sq.push(sqm, rec) {
                Ok(_) => {
                    todo.pop_front();
                    any = true;
                }
                Err(QueueError::Full { .. }) => break,
                Err(e) => panic!("rank {}: push: {e}", self.me),
            }
        }
        any
    }

    /// One round of the proxy thread's loop; events kept.
    fn turn(&mut self, out: &mut Vec<Outcome>) -> usize {
        let now = Nanos(crate::clock::now());
        let n = step(&mut self.proxy, &mut self.carrier, now, out);
        while let Some(e) = self.proxy.poll_event() {
            self.events.push(e);
        }
        n
    }

    fn count(&self, f: impl Fn(&ProxyEvent) -> bool) -> usize {
        self.events.iter().filter(|e| f(e)).count()
    }

    fn completed(&self, peer: usize) -> usize {
        self.cqes.get(&peer).map_or(0, Vec::len)
    }
}

/// Runs every rank on a thread of its own: `work(rank, round)` until it says
/// it is done, then the loop goes on (serving the others) until all are.
fn run_all<F>(ranks: Vec<Rank>, limit: Duration, work: F) -> Vec<Rank>
where
    F: Fn(&mut Rank, &mut Vec<Outcome>) -> bool + Send + Sync + 'static,
{
    let n = ranks.len();
    let done = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let start = Instant::now();
    let handles: Vec<_> = ranks
        .into_iter()
        .map(|mut r| {
            let (done, work) = (done.clone(), work.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut mine = false;
                let mut idle = 0u32;
                loop {
                    let busy = r.turn(&mut out);
                    if !mine && work(&mut r, &mut out) {
                        mine = true;
                        done.fetch_add(1, Ordering::AcqRel);
                    }
                    if mine && done.load(Ordering::Acquire) == n && r.carrier.in_flight() == 0 {
                        // A last few rounds for acknowledgements on the way.
                        for _ in 0..50 {
                            r.turn(&mut out);
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        return r;
                    }
                    assert!(
                        start.elapsed() < limit,
                        "rank {}: not done within {limit:?}; completions {:?}, events {:?}",
                        r.me,
                        r.cqes.iter().map(|(p, v)| (p, v.len())).collect::<Vec<_>>(),
                        r.events
                    );
                    // Two cores on CI: yield, then sleep, when nothing moves.
                    if busy > 0 {
                        idle = 0;
                    } else {
                        idle += 1;
                        if idle > 50 {
                            std::thread::sleep(Duration::from_micros(100));
                        } else {
                            std::thread::yield_now();
                        }
                    }
                }
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn put_signal(i: usize, chunk: usize, half: usize) -> WorkRecord {
    WorkRecord::PutSignal {
        window: 0,
        dst: (i * chunk) as u64,
        src: (half + i * chunk) as u64,
        bytes: chunk as u32,
        signal: 0,
        value: 1,
        op: SignalOp::Add,
    }
}

/// Checks what rank `r` received from `prev`: `count` chunks, the signal
/// exactly `count`.
fn check_received(r: &Rank, prev: usize, count: usize, chunk: usize) {
    assert_eq!(
        r.words.0[0].load(Ordering::Acquire),
        count as u64,
        "rank {}: the signal from rank {prev} (each put adds 1 once)",
        r.me
    );
    let got = &r.window[..count * chunk];
    if let Some(i) = (0..got.len()).find(|&i| got[i] != pattern(prev, i)) {
        panic!(
            "rank {}: byte {i} from rank {prev} is {:#x}, expected {:#x}",
            r.me,
            got[i],
            pattern(prev, i)
        );
    }
}

/// Puts with signals around a ring of 3 ranks (rings of 16 slots wrap many
/// times), then fetch-adds of ranks 1 and 2 on rank 0's word 1: every byte,
/// the exact signal count and each fetched value once.
#[test]
fn a_ring_of_puts_signals_and_fetch_adds_over_tcp_arrives_exactly_once() {
    let (n, count, chunk, fetches) = (3, 300, 1000, 16);
    let half = count * chunk;
    let rs = ranks(n, 2 * half, health(5000, 15000), Vec::new());
    let todo = Arc::new(Mutex::new(
        (0..n)
            .map(|me| {
                let next = (me + 1) % n;
                let mut t: VecDeque<WorkRecord> =
                    (0..count).map(|i| put_signal(i, chunk, half)).collect();
                t.push_back(WorkRecord::Quiet);
                (next, t, VecDeque::new(), false)
            })
            .collect::<Vec<_>>(),
    ));
    let t2 = todo.clone();
    let rs = run_all(rs, Duration::from_secs(120), move |r, _| {
        let mut all = t2.lock();
        let (next, ref mut puts, ref mut adds, ref mut started) = all[r.me];
        r.gpu(next, puts);
        if r.completed(next) < count + 1 {
            return false;
        }
        // The ring is done here; then the fetch-adds to rank 0 (whose queue
        // to rank 0 is the ring's for the last rank).
        if r.me == 0 {
            return true;
        }
        if !*started {
            *started = true;
            adds.extend((0..fetches).map(|_| WorkRecord::FetchAdd {
                window: SIGNAL_WINDOW,
                dst: 8,
                add: 1,
            }));
        }
        r.gpu(0, adds);
        let want = if next == 0 {
            count + 1 + fetches
        } else {
            fetches
        };
        r.completed(0) == want
    });
    let mut fetched = Vec::new();
    for r in &rs {
        let prev = (r.me + n - 1) % n;
        check_received(r, prev, count, chunk);
        for (peer, cq) in &r.cqes {
            for e in cq {
                assert_eq!(e.status, CqStatus::Ok, "rank {} to {peer}: {e:?}", r.me);
            }
        }
        if r.me != 0 {
            let to0 = &r.cqes[&0];
            fetched.extend(to0[to0.len() - fetches..].iter().map(|e| e.value));
        }
        assert_eq!(
            r.count(|e| matches!(e, ProxyEvent::PathDown { .. })),
            0,
            "rank {}: {:?}",
            r.me,
            r.events
        );
        let s = r.proxy.sender().stats();
        assert_eq!(s.failed, 0, "rank {}", r.me);
    }
    fetched.sort_unstable();
    let want: Vec<u64> = (0..(fetches * (n - 1)) as u64).collect();
    assert_eq!(fetched, want, "each fetched value once");
    assert_eq!(
        rs[0].words.0[1].load(Ordering::Acquire),
        (fetches * (n - 1)) as u64
    );
}

/// One dropped primary acknowledgement per round (the data landed): each
/// fails over to the backup connection and switches back after the window;
/// exactly one path-down, one failover and one switch-back per round, every
/// byte and signal once.
#[test]
fn a_dropped_primary_acknowledgement_each_round_fails_over_and_switches_back() {
    let (rounds, count, chunk) = (5, 10, 512);
    let half = rounds * count * chunk;
    let plans: Vec<String> = (0..rounds)
        .map(|j| format!("path=primary,after={},count=1,drop", j * count))
        .collect();
    let plans = parse_plans(&plans.join(";")).unwrap();
    // Timeouts far above a loopback round trip, so a busy CI machine does
    // not fail paths of its own.
    let rs = ranks(2, 2 * half, health(400, 800), plans);
    let state = Arc::new(Mutex::new(vec![(0usize, VecDeque::new()); 2]));
    let s2 = state.clone();
    let rs = run_all(rs, Duration::from_secs(120), move |r, _| {
        let mut all = s2.lock();
        let (ref mut round, ref mut todo) = all[r.me];
        let next = 1 - r.me;
        let restored = r.count(|e| {
            matches!(
                e,
                ProxyEvent::PathRestored {
                    path: Path::Primary,
                    ..
                }
            )
        });
        // A round starts once the previous one's puts all completed and the
        // primary is back.
        if todo.is_empty() && r.completed(next) == *round * count && restored == *round {
            if *round == rounds {
                return true;
            }
            todo.extend((0..count).map(|i| put_signal(*round * count + i, chunk, half)));
            *round += 1;
        }
        r.gpu(next, todo);
        false
    });
    for r in &rs {
        check_received(r, 1 - r.me, rounds * count, chunk);
        let cq = &r.cqes[&(1 - r.me)];
        assert_eq!(cq.len(), rounds * count);
        assert!(cq.iter().all(|e| e.status == CqStatus::Ok), "{cq:?}");
        let down = r.count(|e| matches!(e, ProxyEvent::PathDown { .. }));
        let over = r.count(|e| matches!(e, ProxyEvent::Failover { .. }));
        let back = r.count(|e| matches!(e, ProxyEvent::PathRestored { .. }));
        assert_eq!(
            (down, over, back),
            (rounds, rounds, rounds),
            "rank {}: {:?}",
            r.me,
            r.events
        );
        // Every dropped acknowledgement was the primary's, and every
        // failover went to the backup.
        assert!(r.events.iter().all(|e| match e {
            ProxyEvent::PathDown { path, .. } => *path == Path::Primary,
            ProxyEvent::Failover { to, .. } => *to == Path::Backup,
            _ => true,
        }));
    }
}

/// Rank 1 stops serving (a hung process: its sockets stay open, nothing is
/// acknowledged): rank 0's puts end in `PeerUnreachable` naming peer 1 and
/// both paths, within two timeouts of the post. Then rank 1's carrier is
/// dropped (the process died: its kernel closes the sockets): a new put
/// fails at once.
#[test]
fn a_silent_or_dead_peer_is_unreachable_within_two_timeouts() {
    let timeout = Duration::from_millis(300);
    let mut rs = ranks(2, 4096, health(300, 900), Vec::new());
    let dead = rs.pop().unwrap();
    let mut r = rs.pop().unwrap();
    let mut out = Vec::new();
    let mut todo: VecDeque<_> = (0..3).map(|i| put_signal(i, 64, 2048)).collect();
    let t0 = Instant::now();
    while r.completed(1) < 3 {
        r.turn(&mut out);
        r.gpu(1, &mut todo);
        assert!(t0.elapsed() < 10 * timeout, "{:?}", r.events);
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = t0.elapsed();
    // Two timeouts, and some slack for a busy machine's scheduling.
    assert!(
        took <= 2 * timeout + Duration::from_millis(300),
        "took {took:?}"
    );
    for e in &r.cqes[&1] {
        assert_eq!(e.status, CqStatus::PeerUnreachable, "{e:?}");
    }
    let why: Vec<String> = r
        .events
        .iter()
        .filter_map(|e| match e {
            ProxyEvent::PeerUnreachable(p) => Some(p.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(why.len(), 1, "{:?}", r.events);
    assert!(
        why[0].contains("peer 1 is unreachable")
            && why[0].contains("primary path failed")
            && why[0].contains("backup path failed"),
        "{why:?}"
    );

    // A fresh pair, rank 1 gone with its sockets: the connections break,
    // the posts are refused on both paths at once.
    drop(dead);
    let mut rs = ranks(2, 4096, health(300, 900), Vec::new());
    let dead = rs.pop().unwrap();
    drop(dead);
    let mut r = rs.pop().unwrap();
    let mut todo: VecDeque<_> = (0..3).map(|i| put_signal(i, 64, 2048)).collect();
    let t0 = Instant::now();
    while r.completed(1) < 3 {
        r.turn(&mut out);
        r.gpu(1, &mut todo);
        assert!(t0.elapsed() < 10 * timeout, "{:?}", r.events);
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(t0.elapsed() < timeout, "took {:?}", t0.elapsed());
    assert!(r.cqes[&1]
        .iter()
        .all(|e| e.status == CqStatus::PeerUnreachable));
    let notes: Vec<String> = std::iter::from_fn(|| r.carrier.take_note()).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("primary path to rank 1 broke"))
            && notes
                .iter()
                .any(|n| n.contains("backup path to rank 1 broke")),
        "{notes:?}"
    );
}

/// What the sending side checks before posting, and what the receiving side
/// refuses when its registration disagrees (an error acknowledgement, so the
/// path fails over instead of the put landing out of bounds).
#[test]
fn records_out_of_bounds_are_refused_and_a_receiver_side_error_is_an_error_completion() {
    let mut rs = ranks(2, 4096, health(5000, 15000), Vec::new());
    let mut b = rs.pop().unwrap();
    let mut a = rs.pop().unwrap();
    let bad = [
        (
            WorkRecord::Put {
                window: 0,
                dst: 4000,
                src: 0,
                bytes: 200,
            },
            "run past window 0",
        ),
        (
            WorkRecord::Put {
                window: 3,
                dst: 0,
                src: 0,
                bytes: 8,
            },
            "window 3 is not registered",
        ),
        (
            WorkRecord::FetchAdd {
                window: 0,
                dst: 0,
                add: 1,
            },
            "acts on the signal words",
        ),
        (
            WorkRecord::FetchAdd {
                window: SIGNAL_WINDOW,
                dst: 4,
                add: 1,
            },
            "not an aligned word",
        ),
    ];
    for (w, needle) in bad {
        let e = a.carrier.check(PeerId(1), &w).unwrap_err();
        assert!(e.contains(needle), "{w:?}: {e}");
    }
    assert!(a
        .carrier
        .check(PeerId(0), &put_signal(0, 8, 0))
        .unwrap_err()
        .contains("not reached by the net carrier"));
    // Rank 1 registered a smaller window 0 than rank 0 thinks: the put is
    // refused there, on each path in turn.
    b.carrier.windows.write()[0].as_mut().unwrap().bytes = 16;
    let mut out = Vec::new();
    let mut todo: VecDeque<_> = [put_signal(0, 64, 2048)].into();
    let t0 = Instant::now();
    while a.completed(1) < 1 {
        a.turn(&mut out);
        b.turn(&mut out);
        a.gpu(1, &mut todo);
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", a.events);
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(a.cqes[&1][0].status, CqStatus::PeerUnreachable);
    let down: Vec<String> = a
        .events
        .iter()
        .filter(|e| matches!(e, ProxyEvent::PathDown { .. }))
        .map(|e| e.to_string())
        .collect();
    assert_eq!(down.len(), 2, "{:?}", a.events);
    let status = format!("{:#x}", STATUS_REMOTE + AckStatus::OutOfBounds as u32);
    assert!(down.iter().all(|d| d.contains(&status)), "{down:?}");
    assert_eq!(b.words.0[0].load(Ordering::Acquire), 0, "no signal applied");
}

/// Turns `a` and `b` (the GPU model of `a` pushing `todo` to rank 1) until
/// `done`, at most a minute from `t0`.
fn drive(
    a: &mut Rank,
    b: &mut Rank,
    todo: &mut VecDeque<WorkRecord>,
    t0: Instant,
    what: &str,
    mut done: impl FnMut(&Rank, &Rank) -> bool,
) {
    let mut out = Vec::new();
    while !done(a, b) {
        a.turn(&mut out);
        b.turn(&mut out);
        a.gpu(1, todo);
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what}: not within a minute; rank 0's events {:?}, notes {:?}; rank 1's notes {:?}",
            a.events,
            a.carrier.notes,
            b.carrier.notes
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn primary_events(r: &Rank) -> (usize, usize, usize) {
    let down = r.count(|e| {
        matches!(
            e,
            ProxyEvent::PathDown {
                path: Path::Primary,
                ..
            }
        )
    });
    let over = r.count(|e| {
        matches!(
            e,
            ProxyEvent::Failover {
                to: Path::Backup,
                ..
            }
        )
    });
    let back = r.count(|e| {
        matches!(
            e,
            ProxyEvent::PathRestored {
                path: Path::Primary,
                ..
            }
        )
    });
    (down, over, back)
}

fn has_note(r: &Rank, needle: &str) -> usize {
    r.carrier
        .notes
        .iter()
        .filter(|n| n.contains(needle))
        .count()
}

/// Rank 0 puts to rank 1; the primary connection's socket is shut down
/// under rank 1 while a put waits on it: the put fails over to the backup
/// (one path-down, one failover), rank 1 dials the primary again and rank 0
/// accepts it (one reconnect each), the health machine takes the primary
/// back after its window, and the next puts all travel on the new primary
/// connection. Every byte and signal arrives once.
#[test]
fn a_broken_primary_connection_fails_over_reconnects_and_switches_back() {
    let (count, chunk) = (20, 512);
    let total = 2 * count + 1;
    let half = total * chunk;
    let mut rs = ranks(2, 2 * half, health(1000, 1500), Vec::new());
    let mut b = rs.pop().unwrap();
    let mut a = rs.pop().unwrap();
    let t0 = Instant::now();
    let mut todo: VecDeque<WorkRecord> = (0..count).map(|i| put_signal(i, chunk, half)).collect();
    drive(&mut a, &mut b, &mut todo, t0, "the first puts", |a, _| {
        a.completed(1) == count
    });
    assert_eq!(primary_events(&a), (0, 0, 0), "{:?}", a.events);

    // One put posted on the primary, rank 1 not turned (nothing can
    // acknowledge it); then its socket goes.
    todo.push_back(put_signal(count, chunk, half));
    a.gpu(1, &mut todo);
    let mut out = Vec::new();
    while a.carrier.awaiting.is_empty() {
        a.turn(&mut out);
        assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", a.events);
    }
    assert!(a.carrier.awaiting.keys().all(|k| k.1 == 0));
    b.carrier.conns[0][0].as_ref().unwrap().sever();
    drive(
        &mut a,
        &mut b,
        &mut todo,
        t0,
        "the failover and the reconnect",
        |a, b| {
            a.completed(1) == count + 1 && a.carrier.reconnects == 1 && b.carrier.reconnects == 1
        },
    );
    let (down, over, back) = primary_events(&a);
    assert_eq!((down, over), (1, 1), "{:?}", a.events);
    let t_back = Instant::now();
    drive(&mut a, &mut b, &mut todo, t0, "the switch back", |a, _| {
        primary_events(a).2 == 1
    });
    assert_eq!(back, 0, "the primary was taken back before its window");
    // Loose: the window is 1.5 s from the failure, counted from before the
    // reconnect.
    assert!(t_back.elapsed() < Duration::from_secs(30));

    // Traffic on the primary again: every put on the new connection.
    todo.extend((count + 1..total).map(|i| put_signal(i, chunk, half)));
    drive(&mut a, &mut b, &mut todo, t0, "the last puts", |a, _| {
        a.completed(1) == total
    });
    let mut out = Vec::new();
    for _ in 0..20 {
        a.turn(&mut out);
        b.turn(&mut out);
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(primary_events(&a), (1, 1, 1), "{:?}", a.events);
    assert_eq!(
        a.count(|e| matches!(e, ProxyEvent::PathDown { .. })),
        1,
        "{:?}",
        a.events
    );
    let cq = &a.cqes[&1];
    assert_eq!(cq.len(), total);
    assert!(cq.iter().all(|e| e.status == CqStatus::Ok), "{cq:?}");
    check_received(&b, 0, total, chunk);
    assert_eq!((a.carrier.gens[1], b.carrier.gens[0]), ([1, 0], [1, 0]));
    let new_primary = a.carrier.conns[1][0].as_ref().unwrap();
    assert!(new_primary.broken().is_none());
    assert_eq!(new_primary.requests(), (total - count - 1) as u64);
    assert_eq!(a.carrier.conns[1][1].as_ref().unwrap().requests(), 1);
    assert!(b.events.is_empty(), "rank 1 sent nothing: {:?}", b.events);
    assert_eq!(has_note(&a, "primary path to rank 1 broke"), 1);
    assert_eq!(
        has_note(&a, "primary path to rank 1 is connected again (accepted"),
        1
    );
    assert_eq!(has_note(&b, "primary path to rank 0 broke"), 1);
    assert_eq!(
        has_note(&b, "primary path to rank 0 is connected again (dialed"),
        1
    );
}

/// Hellos on rank 0's listeners that it must refuse (another
/// communicator's token, the wrong path, a rank that does not dial it,
/// another wire version, a replacement for a live connection), a put
/// before any hello and a connection that says nothing: each is closed without an answer and
/// logged; the live connections carry on untouched.
#[test]
fn a_hello_with_a_wrong_token_or_for_a_live_connection_is_refused() {
    let mut rs = ranks(2, 4096, health(5000, 15000), Vec::new());
    let mut b = rs.pop().unwrap();
    let mut a = rs.pop().unwrap();
    let t0 = Instant::now();
    let at = [
        a.carrier.relink.local(0).unwrap(),
        a.carrier.relink.local(1).unwrap(),
    ];
    let hello = |rank, path, token| {
        let mut v = Vec::new();
        wire::encode(&Msg::Hello(wire::Hello { rank, path, token }), &mut v);
        v
    };
    let mut old_version = hello(1, 0, 0xfeed);
    old_version[12..16].copy_from_slice(&(wire::VERSION + 1).to_le_bytes());
    let mut put_first = Vec::new();
    wire::encode(
        &Msg::Request(WireRequest {
            from: 1,
            seq: 0,
            completed_below: 0,
            op: Op::Put {
                window: 0,
                dst: 0,
                signal: None,
            },
            payload: vec![7; 1000],
        }),
        &mut put_first,
    );
    let cases: Vec<(usize, Vec<u8>, &str)> = vec![
        (0, put_first, "a put of 1000 bytes (at most 0 accepted)"),
        (0, hello(1, 0, 0xbad), "carries token 0xbad"),
        (
            0,
            hello(1, 1, 0xfeed),
            "names path 1 on the primary path listener",
        ),
        (1, hello(0, 1, 0xfeed), "rank 0 does not dial rank 0"),
        (1, hello(7, 1, 0xfeed), "rank 7 does not dial rank 0"),
        (0, old_version, "wire version"),
        (
            1,
            hello(1, 1, 0xfeed),
            "the one it would replace is not broken",
        ),
        (0, Vec::new(), "no hello within"),
    ];
    let mut out = Vec::new();
    for (p, bytes, needle) in cases {
        let mut s = std::net::TcpStream::connect(at[p]).unwrap();
        std::io::Write::write_all(&mut s, &bytes).unwrap();
        s.set_nonblocking(true).unwrap();
        let t = Instant::now();
        let mut got = Vec::new();
        loop {
            a.turn(&mut out);
            b.turn(&mut out);
            let mut buf = [0u8; 128];
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{needle}: not closed; notes {:?}",
                a.carrier.notes
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(got.is_empty(), "{needle}: answered {got:?}");
        let notes: Vec<String> = std::iter::from_fn(|| a.carrier.take_note()).collect();
        assert!(
            notes.len() == 1 && notes[0].contains("refused") && notes[0].contains(needle),
            "{needle}: {notes:?}"
        );
    }
    // Nothing was replaced, and the connections work.
    assert_eq!((a.carrier.reconnects, b.carrier.reconnects), (0, 0));
    let mut todo: VecDeque<_> = (0..4).map(|i| put_signal(i, 64, 2048)).collect();
    drive(
        &mut a,
        &mut b,
        &mut todo,
        t0,
        "puts after the refusals",
        |a, _| a.completed(1) == 4,
    );
    assert!(a.cqes[&1].iter().all(|e| e.status == CqStatus::Ok));
    assert!(a.events.is_empty() || primary_events(&a) == (0, 0, 0));
    check_received(&b, 0, 4, 64);
    assert_eq!(b.carrier.notes.len(), 0, "{:?}", b.carrier.notes);
}

/// Rank 0 is gone (its listeners closed with it): rank 1, which dials it,
/// keeps trying both paths, but at most once per `REDIAL_FIRST` each (the
/// gap doubling), logs one failure per path, and its puts end unreachable.
#[test]
fn a_peer_that_is_gone_is_redialed_at_a_bounded_rate_and_logged_once() {
    use crate::net::relink::REDIAL_FIRST;
    let mut rs = ranks(2, 4096, health(300, 900), Vec::new());
    let mut b = rs.pop().unwrap();
    drop(rs);
    let mut out = Vec::new();
    let mut todo: VecDeque<_> = (0..3).map(|i| put_signal(i, 64, 2048)).collect();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) || b.completed(0) < 3 {
        b.turn(&mut out);
        b.gpu(0, &mut todo);
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", b.events);
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = t0.elapsed();
    assert!(b.cqes[&0]
        .iter()
        .all(|e| e.status == CqStatus::PeerUnreachable));
    let attempts = b.carrier.relink.attempts();
    let most = 2 * (took.as_millis() / REDIAL_FIRST.as_millis() + 1) as u64;
    // Both paths tried again (at 0, 100 and 300 ms at least), neither more
    // often than once per 100 ms.
    assert!(
        (6..=most).contains(&attempts),
        "{attempts} attempts in {took:?}"
    );
    assert_eq!(b.carrier.reconnects, 0);
    for path in ["primary", "backup"] {
        assert_eq!(
            has_note(
                &b,
                &format!("could not reconnect the net carrier's {path} path to rank 0")
            ),
            1,
            "{:?}",
            b.carrier.notes
        );
    }
}

/// A put whose bytes are still being read when its connection breaks and
/// is replaced: that attempt was failed at the break (and went over the
/// backup); once read, it is not sent on the new connection, so nothing
/// there can answer it.
#[test]
fn an_attempt_on_a_replaced_connection_is_not_sent_on_the_new_one() {
    let mut rs = ranks_with(2, 4096, health(5000, 15000), Vec::new(), 1000);
    let mut b = rs.pop().unwrap();
    let mut a = rs.pop().unwrap();
    let t0 = Instant::now();
    let mut todo: VecDeque<_> = [put_signal(0, 64, 2048)].into();
    a.gpu(1, &mut todo);
    let mut out = Vec::new();
    while a.carrier.awaiting.is_empty() {
        a.turn(&mut out);
        assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", a.events);
    }
    b.carrier.conns[0][0].as_ref().unwrap().sever();
    drive(&mut a, &mut b, &mut todo, t0, "the reconnect", |a, b| {
        a.carrier.reconnects == 1 && b.carrier.reconnects == 1
    });
    // The first read has not finished: the test means nothing otherwise.
    assert_eq!(a.carrier.reads[0].in_flight(), 1);
    drive(&mut a, &mut b, &mut todo, t0, "the put", |a, _| {
        a.completed(1) == 1 && a.carrier.reads[0].in_flight() == 0
    });
    for _ in 0..20 {
        a.turn(&mut out);
        b.turn(&mut out);
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(a.cqes[&1][0].status, CqStatus::Ok);
    assert_eq!(primary_events(&a), (1, 1, 0), "{:?}", a.events);
    assert_eq!(a.carrier.conns[1][0].as_ref().unwrap().requests(), 0);
    assert_eq!(a.carrier.conns[1][1].as_ref().unwrap().requests(), 1);
    check_received(&b, 0, 1, 64);
    let s = a.proxy.sender().stats();
    assert_eq!(
        (s.completed, s.duplicate_completions, s.late_completions),
        (1, 0, 0)
    );
}

/// Both ranks put to each other on threads of their own; each round rank 0
/// shuts its primary connection's socket down while its puts wait on it.
/// Each break fails rank 0's puts over (one path-down per round), the
/// connection comes back (one reconnect per round on both ranks) before
/// the window ends, and the primary is taken back (one switch-back per
/// round); rank 1's puts, caught or not by a break, all land once.
#[test]
fn a_primary_broken_each_round_between_threads_reconnects_and_every_put_lands_once() {
    let (rounds, count, chunk) = (3, 10, 512);
    let half = rounds * count * chunk;
    let rs = ranks(2, 2 * half, health(400, 800), Vec::new());
    // Per rank: the round, its puts not pushed yet, a break owed.
    let state = Arc::new(Mutex::new(vec![(0usize, VecDeque::new(), false); 2]));
    let s2 = state.clone();
    let rs = run_all(rs, Duration::from_secs(120), move |r, _| {
        let mut all = s2.lock();
        let (ref mut round, ref mut todo, ref mut sever) = all[r.me];
        let next = 1 - r.me;
        if *sever && r.carrier.awaiting.keys().any(|k| k.1 == 0) {
            r.carrier.conns[next][0].as_ref().unwrap().sever();
            *sever = false;
        }
        let (_, _, back) = primary_events(r);
        let ready = todo.is_empty()
            && !*sever
            && r.completed(next) == *round * count
            && (r.me == 1 || back == *round);
        if ready {
            if *round == rounds {
                return true;
            }
            todo.extend((0..count).map(|i| put_signal(*round * count + i, chunk, half)));
            *round += 1;
            *sever = r.me == 0;
        }
        r.gpu(next, todo);
        false
    });
    for r in &rs {
        let next = 1 - r.me;
        check_received(r, next, rounds * count, chunk);
        let cq = &r.cqes[&next];
        assert_eq!(cq.len(), rounds * count);
        assert!(cq.iter().all(|e| e.status == CqStatus::Ok), "{cq:?}");
        assert_eq!(r.carrier.reconnects, rounds as u64, "rank {}", r.me);
        assert_eq!(r.carrier.gens[next], [rounds as u64, 0]);
        let (down, over, back) = primary_events(r);
        assert_eq!(down, back, "rank {}: {:?}", r.me, r.events);
        if r.me == 0 {
            assert_eq!(down, rounds, "{:?}", r.events);
            assert!(over >= rounds, "{:?}", r.events);
        } else {
            assert!(down <= rounds, "{:?}", r.events);
        }
        assert_eq!(
            r.count(|e| matches!(e, ProxyEvent::PathDown { .. })),
            down,
            "rank {}: only the primary went down: {:?}",
            r.me,
            r.events
        );
        assert_eq!(r.proxy.sender().stats().failed, 0, "rank {}", r.me);
    }
}
