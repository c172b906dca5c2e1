use super::fake::{Dest, FakeCarrier, World};
use super::*;
use crate::fault::{Fault, FaultInjector, FaultPlan};
use crate::health::Nanos;
use crate::queue::SignalOp;
use crate::rng::Rng;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

mod shared_memory;

const T: Duration = Duration::from_millis(1);
const W: Duration = Duration::from_millis(3);
const P1: PeerId = PeerId(1);
const P2: PeerId = PeerId(2);
const P3: PeerId = PeerId(3);
/// Destination window: data, then the signal words.
const DATA: u64 = 2 << 20;
/// Signal word that every add-signal adds to.
const SIG_ADD: u64 = DATA;
/// Word every fetch-add targets.
const FADD_WORD: u64 = DATA + 8;
/// First of the words each set-signal owns alone.
const SIG_SET0: u64 = DATA + 16;
const SET_WORDS: u64 = 8192;
const WIN: usize = (DATA + 16 + 8 * SET_WORDS) as usize;
const SRC: usize = 64 << 10;

fn q(peer: PeerId) -> QueueId {
    QueueId {
        peer,
        path: Path::Primary,
    }
}

fn world(queues: &[(QueueId, bool)], sq: u32, cq: u32, plans: Vec<FaultPlan>, seed: u64) -> World {
    world_owing(queues, sq, cq, 16 * cq, plans, seed)
}

fn world_owing(
    queues: &[(QueueId, bool)],
    sq: u32,
    cq: u32,
    max_owed: u32,
    plans: Vec<FaultPlan>,
    seed: u64,
) -> World {
    let cfg = ProxyConfig {
        health: HealthConfig {
            timeout: T,
            recovery: W,
            max_recovery: W,
        },
        sq_slots: sq,
        cq_slots: cq,
        max_owed,
        take_per_poll: 4,
    };
    let mut proxy = Proxy::new(PeerId(0), cfg).expect("valid config");
    let mut dests = BTreeMap::new();
    for &(id, backup) in queues {
        proxy.add_queue(id, backup).expect("new queue");
        dests
            .entry(id.peer)
            .or_insert_with(|| Dest::new(id.peer, WIN));
    }
    let mut rng = Rng::new(seed ^ 0xabcd);
    let src = (0..SRC).map(|_| rng.next_u64() as u8).collect();
    World::new(
        proxy,
        FakeCarrier::new(FaultInjector::new(plans), 20, seed),
        dests,
        src,
    )
}

/// Where the next put to each peer lands and which set word is next: puts never
/// overlap, so "every byte exactly once" can be checked byte by byte.
#[derive(Default)]
struct Cursor {
    data: BTreeMap<PeerId, u64>,
    set: BTreeMap<PeerId, u64>,
}

/// `n` random records for `peer`, the i-th due at `start + i * every`: puts,
/// puts with set or add signals, fetch-adds and (with `quiets`) now and then a
/// quiet.
fn traffic(
    rng: &mut Rng,
    cur: &mut Cursor,
    peer: PeerId,
    n: u64,
    start: Nanos,
    every: Duration,
    quiets: bool,
) -> VecDeque<(Nanos, WorkRecord)> {
    let kinds = if quiets { 20 } else { 19 };
    (0..n)
        .map(|i| {
            let at = start.after(every * i as u32);
            let bytes = 1 + rng.below(256) as u32;
            let src = rng.below((SRC - 256) as u64);
            let dst = *cur.data.entry(peer).or_default();
            let put = |c: &mut Cursor| {
                *c.data.get_mut(&peer).expect("entry made") += u64::from(bytes);
                assert!(dst + u64::from(bytes) <= DATA, "test window too small");
            };
            let rec = match rng.below(kinds) {
                0..=8 => {
                    put(cur);
                    WorkRecord::Put {
                        window: 7,
                        dst,
                        src,
                        bytes,
                    }
                }
                9..=11 => {
                    put(cur);
                    let s = cur.set.entry(peer).or_default();
                    *s += 1;
                    assert!(*s < SET_WORDS, "test has too few set words");
                    WorkRecord::PutSignal {
                        window: 7,
                        dst,
                        src,
                        bytes,
                        signal: SIG_SET0 + 8 * *s,
                        value: rng.next_u64() | 1,
                        op: SignalOp::Set,
                    }
                }
                12..=15 => {
                    put(cur);
                    WorkRecord::PutSignal {
                        window: 7,
                        dst,
                        src,
                        bytes,
                        signal: SIG_ADD,
                        value: 1 + rng.below(1000),
                        op: SignalOp::Add,
                    }
                }
                16..=18 => WorkRecord::FetchAdd {
                    window: 7,
                    dst: FADD_WORD,
                    add: 1 + rng.below(100),
                },
                _ => WorkRecord::Quiet,
            };
            (at, rec)
        })
        .collect()
}

/// What a run delivered, per peer.
#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    errors: usize,
}

/// Checks what every run must give: one completion per pushed record; for every
/// completed put, its bytes landed exactly once and equal the source; no byte
/// outside a put was written and none twice; set signals hold their value, the
/// add signal the sum of the completed adds, fetch-adds tile their word; a quiet
/// completes after every earlier request of its queue. With `all_ok`, every
/// completion must be `Ok`.
fn check(w: &World, all_ok: bool) -> BTreeMap<PeerId, Tally> {
    let mut tally: BTreeMap<PeerId, Tally> = BTreeMap::new();
    let mut cqe: BTreeMap<(QueueId, u64), (usize, CqEntry)> = BTreeMap::new();
    for (&id, list) in &w.cqes {
        for (pos, &(_, e)) in list.iter().enumerate() {
            assert!(
                cqe.insert((id, e.req_id), (pos, e)).is_none(),
                "{id}: request {} completed twice",
                e.req_id
            );
        }
    }
    assert_eq!(cqe.len(), w.pushed.len(), "a completion per record");
    let mut covered: BTreeMap<PeerId, Vec<bool>> = BTreeMap::new();
    let mut adds: BTreeMap<PeerId, u64> = BTreeMap::new();
    let mut fadds: BTreeMap<PeerId, Vec<(u64, u64)>> = BTreeMap::new();
    for (&(id, req_id), rec) in &w.pushed {
        let (pos, e) = cqe
            .get(&(id, req_id))
            .copied()
            .unwrap_or_else(|| panic!("{id}: request {req_id} never completed"));
        assert_eq!(e.peer, id.peer);
        let ok = e.status == CqStatus::Ok;
        let t = tally.entry(id.peer).or_default();
        if ok {
            t.ok += 1;
        } else {
            t.errors += 1;
            assert!(!all_ok, "{id}: request {req_id} failed: {e:?}");
        }
        let dest = &w.dests[&id.peer];
        let cov = covered.entry(id.peer).or_insert_with(|| vec![false; WIN]);
        match *rec {
            WorkRecord::Put {
                dst, src, bytes, ..
            }
            | WorkRecord::PutSignal {
                dst, src, bytes, ..
            } => {
                let (d, s, n) = (dst as usize, src as usize, bytes as usize);
                cov[d..d + n].iter_mut().for_each(|c| *c = true);
                if ok {
                    assert!(
                        dest.writes[d..d + n].iter().all(|&c| c == 1),
                        "{id}: request {req_id}'s bytes not written exactly once"
                    );
                    assert_eq!(
                        &dest.window[d..d + n],
                        &w.src[s..s + n],
                        "{id}: request {req_id}'s data"
                    );
                }
                if let WorkRecord::PutSignal {
                    signal, value, op, ..
                } = *rec
                {
                    match op {
                        SignalOp::Set if ok => {
                            assert_eq!(dest.word(signal), value, "{id}: set signal")
                        }
                        SignalOp::Add if ok => *adds.entry(id.peer).or_default() += value,
                        _ => {}
                    }
                }
            }
            WorkRecord::FetchAdd { add, .. } if ok => {
                fadds.entry(id.peer).or_default().push((e.value, add));
            }
            WorkRecord::FetchAdd { .. } => {}
            WorkRecord::Quiet => {
                let earlier = w.pushed.range((id, 0)..(id, req_id)).count();
                let before = w.cqes[&id][..pos]
                    .iter()
                    .filter(|(_, x)| x.req_id < req_id)
                    .count();
                assert_eq!(
                    before, earlier,
                    "{id}: quiet {req_id} completed before earlier requests"
                );
            }
        }
    }
    for (peer, cov) in &covered {
        let dest = &w.dests[peer];
        for (i, (&c, &n)) in cov.iter().zip(&dest.writes).enumerate() {
            assert!(n <= 1, "{peer}: byte {i} written {n} times");
            assert!(c || n == 0, "{peer}: byte {i} written by no request");
        }
        if all_ok {
            assert_eq!(
                dest.word(SIG_ADD),
                adds.get(peer).copied().unwrap_or(0),
                "{peer}: add signal"
            );
            let mut spans = fadds.remove(peer).unwrap_or_default();
            spans.sort_unstable();
            let mut at = 0;
            for (old, add) in spans {
                assert_eq!(old, at, "{peer}: fetch-adds overlap or leave a gap");
                at += add;
            }
            assert_eq!(at, dest.word(FADD_WORD), "{peer}: fetch-add word");
        }
    }
    tally
}

fn count(w: &World, f: impl Fn(&ProxyEvent) -> bool) -> usize {
    w.events.iter().filter(|(_, e)| f(e)).count()
}

#[test]
fn a_ring_of_puts_and_signals_is_delivered_exactly_once_across_many_laps() {
    for seed in 0..4 {
        let queues = [
            (q(P1), true),
            (
                QueueId {
                    peer: P1,
                    path: Path::Backup,
                },
                true,
            ),
            (q(P2), true),
        ];
        // 8 request slots and 4 completion slots: hundreds of records wrap both
        // rings dozens of times and keep the GPU side hitting a full queue.
        let mut w = world(&queues, 8, 4, Vec::new(), seed);
        let mut rng = Rng::new(seed);
        let mut cur = Cursor::default();
        for &(id, _) in &queues {
            let t = traffic(
                &mut rng,
                &mut cur,
                id.peer,
                300,
                Nanos(0),
                Duration::ZERO,
                true,
            );
            w.todo.insert(id, t);
        }
        assert!(
            w.run(None, Nanos(0).after(Duration::from_secs(1))),
            "seed {seed}: hang"
        );
        let tally = check(&w, true);
        assert_eq!(tally[&P1].ok, 600);
        assert_eq!(tally[&P2].ok, 300);
        assert!(w.full > 0, "the producer never saw a full queue");
        for &(id, _) in &queues {
            let (sr, cr) = (
                w.proxy.request_queue().ring(),
                w.proxy.completion_queue().ring(),
            );
            let (sq, cq) = w.proxy.memory_mut(id).expect("queue");
            let laps = sr.indices(sq).expect("consistent").0 / 8;
            assert!(laps >= 30, "{id}: only {laps} laps");
            assert_eq!(cr.indices(cq).expect("consistent").0, 300);
        }
        // Healthy paths: everything on the primary, once.
        assert!(w
            .carrier
            .posts
            .iter()
            .all(|p| p.2 == Path::Primary && p.4 == 0));
        assert!(w.events.is_empty(), "seed {seed}: {:?}", w.events);
    }
}

#[test]
fn a_hundred_primary_failures_fail_over_and_switch_back_with_every_request_once() {
    for seed in 0..3 {
        // Ten episodes of ten requests each on the primary to P1, dropped
        // (data landed, completion lost) or delayed past the timeout, 300
        // primary requests apart so the primary recovers in between.
        let plans = (0..10)
            .map(|k| FaultPlan {
                peer: Some(P1),
                path: Path::Primary,
                after: 100 + 300 * k,
                count: Some(10),
                fault: if k % 2 == 0 {
                    Fault::Drop
                } else {
                    Fault::Delay(2 * T)
                },
            })
            .collect();
        let mut w = world(&[(q(P1), true), (q(P2), true)], 64, 128, plans, seed);
        let mut rng = Rng::new(seed);
        let mut cur = Cursor::default();
        let every = Duration::from_micros(20);
        // No quiets here: a quiet stalls its queue behind a lost completion, which
        // would spread one episode's ten requests over two down periods (quiets
        // are covered by the other tests).
        w.todo.insert(
            q(P1),
            traffic(&mut rng, &mut cur, P1, 5000, Nanos(0), every, false),
        );
        w.todo.insert(
            q(P2),
            traffic(&mut rng, &mut cur, P2, 500, Nanos(0), every * 10, false),
        );
        assert!(
            w.run(None, Nanos(0).after(Duration::from_secs(1))),
            "seed {seed}: hang"
        );
        check(&w, true);

        let down = count(&w, |e| {
            matches!(
                e,
                ProxyEvent::PathDown {
                    peer: P1,
                    path: Path::Primary,
                    ..
                }
            )
        });
        let back = count(&w, |e| {
            matches!(
                e,
                ProxyEvent::PathRestored {
                    peer: P1,
                    path: Path::Primary,
                    ..
                }
            )
        });
        let failovers = count(&w, |e| {
            matches!(
                e,
                ProxyEvent::Failover {
                    peer: P1,
                    to: Path::Backup,
                    ..
                }
            )
        });
        assert_eq!((down, back, failovers), (10, 10, 100), "seed {seed}");
        let s = w.proxy.sender().stats();
        assert_eq!(s.reposted, 100);
        let hits = w.carrier.faults.carried(P1, Path::Primary);
        assert!(
            hits >= 2810,
            "only {hits} primary requests: the last episode never began"
        );
        assert_eq!(
            s.duplicate_completions, 50,
            "the delayed completions came after the backup's"
        );
        assert!(
            count(&w, |e| !matches!(
                e,
                ProxyEvent::PathDown { .. }
                    | ProxyEvent::PathRestored { .. }
                    | ProxyEvent::Failover { .. }
            )) == 0
        );
        // P2 never left its primary.
        assert!(w
            .carrier
            .posts
            .iter()
            .filter(|p| p.1 == P2)
            .all(|p| p.2 == Path::Primary));
        // After each switch back, new requests to P1 take the primary again.
        for &(t, ref e) in &w.events {
            if let ProxyEvent::PathRestored { .. } = e {
                let next = w
                    .carrier
                    .posts
                    .iter()
                    .find(|p| p.0 >= t && p.1 == P1 && p.4 == 0);
                assert_eq!(
                    next.map(|p| p.2),
                    Some(Path::Primary),
                    "seed {seed}: post after the switch back at {t}"
                );
            }
        }
        // Completions name the path that carried them: some the backup.
        let on_backup = w.cqes[&q(P1)]
            .iter()
            .filter(|(_, e)| e.paths == PathSet::of(Path::Backup))
            .count();
        assert!(on_backup >= 100, "{on_backup}");
    }
}

#[test]
fn a_dead_peer_gets_error_completions_in_bounded_time_and_the_others_carry_on() {
    for seed in 0..6 {
        let peers = [(q(P1), true), (q(P2), true), (q(P3), true)];
        let mut w = world(&peers, 32, 32, Vec::new(), seed);
        let mut rng = Rng::new(seed);
        let mut cur = Cursor::default();
        let every = Duration::from_micros(10);
        for &(id, _) in &peers {
            w.todo.insert(
                id,
                traffic(&mut rng, &mut cur, id.peer, 600, Nanos(0), every, true),
            );
        }
        let kill = Nanos(0).after(Duration::from_micros(2000 + rng.below(1000)));
        let limit = Nanos(0).after(Duration::from_secs(1));
        assert!(w.run(Some(kill), limit));
        w.carrier.dead.insert(P2);
        assert!(w.run(None, limit), "seed {seed}: hang after the kill");
        let tally = check(&w, false);
        assert_eq!((tally[&P1].errors, tally[&P3].errors), (0, 0));
        assert!(
            tally[&P2].errors > 0 && tally[&P2].ok > 0,
            "{:?}",
            tally[&P2]
        );

        // Every error names P2 and both paths, and it comes within two
        // timeouts of the death (plus the last post's latency).
        let errs: Vec<_> = w.cqes[&q(P2)]
            .iter()
            .filter(|(_, e)| e.status != CqStatus::Ok)
            .collect();
        assert!(errs
            .iter()
            .all(|(_, e)| e.status == CqStatus::PeerUnreachable
                && e.peer == P2
                && e.paths == PathSet::BOTH));
        let first = errs.iter().map(|x| x.0).min().expect("errors");
        assert!(
            first <= kill.after(2 * T + Duration::from_micros(100)),
            "seed {seed}: first error at {first}"
        );
        let last_ok = w.cqes[&q(P2)]
            .iter()
            .filter(|(_, e)| e.status == CqStatus::Ok)
            .map(|x| x.0)
            .max();
        assert!(
            last_ok.is_some_and(|t| t <= first),
            "an Ok after the peer was declared dead"
        );
        // The whole run ended shortly after the last record was due.
        assert!(
            w.now <= Nanos(0).after(every * 600 + 2 * T + Duration::from_micros(100)),
            "ended at {}",
            w.now
        );

        let unreachable: Vec<_> = w
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                ProxyEvent::PeerUnreachable(err) => Some(*err),
                _ => None,
            })
            .collect();
        assert_eq!(unreachable.len(), 1);
        assert_eq!(unreachable[0].peer, P2);
        // The host hears of the death before the GPU reads a failed
        // completion: a kernel that saw one finds `status` saying why.
        assert!(
            w.first_unreachable_event < w.first_failed_cqe,
            "seed {seed}: event {:?}, first failed completion {:?}",
            w.first_unreachable_event,
            w.first_failed_cqe
        );
        assert!(unreachable[0].backup.is_some());
        let msg = unreachable[0].to_string();
        assert!(
            msg.contains("peer 2") && msg.contains("primary path") && msg.contains("backup path"),
            "{msg}"
        );
        // The others never left their primary.
        assert!(w
            .carrier
            .posts
            .iter()
            .filter(|p| p.1 != P2)
            .all(|p| p.2 == Path::Primary && p.4 == 0));
        assert!(w.events.iter().all(|(_, e)| match e {
            ProxyEvent::PathDown { peer, .. } | ProxyEvent::Failover { peer, .. } => *peer == P2,
            _ => true,
        }));
    }
}

#[test]
fn a_quiet_holds_back_later_requests_until_the_earlier_ones_complete() {
    let mut w = world(&[(q(P1), true)], 8, 8, Vec::new(), 1);
    let put = |dst| WorkRecord::Put {
        window: 7,
        dst,
        src: 0,
        bytes: 8,
    };
    let recs = [put(0), put(8), WorkRecord::Quiet, put(16)];
    w.todo
        .insert(q(P1), recs.iter().map(|&r| (Nanos(0), r)).collect());
    assert!(w.run(None, Nanos(0).after(Duration::from_secs(1))));
    check(&w, true);
    let cq = &w.cqes[&q(P1)];
    let at = |id| {
        cq.iter()
            .find(|(_, e)| e.req_id == id)
            .expect("completed")
            .0
    };
    // Request 3 was carried only after the quiet completed, which was after 0 and 1.
    let post3 = w
        .carrier
        .posts
        .iter()
        .find(|p| p.3 == Seq(2))
        .expect("posted")
        .0;
    assert!(at(2) >= at(0).max(at(1)));
    assert!(
        post3 >= at(2) && post3 > Nanos(0),
        "request 3 posted at {post3}"
    );
    assert_eq!(w.carrier.posts.len(), 3);
}

#[test]
fn a_gpu_that_reads_no_completions_still_gets_its_posts_carried_up_to_max_owed() {
    let put = |i: u64| WorkRecord::Put {
        window: 7,
        dst: 8 * i,
        src: 0,
        bytes: 8,
    };
    // Post, post, …, then read: more than either ring holds. Unread
    // completions must not stop the proxy taking (the GPU would wait for
    // request slots while the proxy waited for completion slots).
    let mut w = world(&[(q(P1), true)], 4, 4, Vec::new(), 2);
    w.todo
        .insert(q(P1), (0..12).map(|i| (Nanos(0), put(i))).collect());
    w.gpu_reads_cq = false;
    assert!(!w.run(None, Nanos(0).after(Duration::from_secs(1))));
    assert_eq!(w.carrier.posts.len(), 12, "every post carried");
    assert_eq!(
        w.proxy.backlog(q(P1)),
        8,
        "4 in the completion ring, 8 waiting for room"
    );
    w.gpu_reads_cq = true;
    assert!(w.run(None, Nanos(0).after(Duration::from_secs(1))));
    check(&w, true);

    // max_owed bounds what a kernel that never reads can make the proxy hold.
    let mut w = world_owing(&[(q(P1), true)], 16, 4, 6, Vec::new(), 2);
    w.todo
        .insert(q(P1), (0..12).map(|i| (Nanos(0), put(i))).collect());
    w.gpu_reads_cq = false;
    assert!(!w.run(None, Nanos(0).after(Duration::from_secs(1))));
    // 4 written into the completion ring, 6 more owed (waiting for room).
    assert_eq!(w.carrier.posts.len(), 10);
    assert_eq!(w.proxy.outstanding(q(P1)), 0);
    assert_eq!(w.proxy.backlog(q(P1)), 6);
    let (sr, cr) = (
        w.proxy.request_queue().ring(),
        w.proxy.completion_queue().ring(),
    );
    let (sq, cq) = w.proxy.memory_mut(q(P1)).expect("queue");
    assert_eq!(sr.used(sq), Ok(2));
    assert_eq!(cr.used(cq), Ok(4));
    w.gpu_reads_cq = true;
    assert!(w.run(None, Nanos(0).after(Duration::from_secs(1))));
    check(&w, true);
    assert_eq!(w.carrier.posts.len(), 12);
}

#[test]
fn bad_records_get_error_completions_and_refused_posts_fail_over() {
    let mut w = world(&[(q(P1), true)], 8, 8, Vec::new(), 3);
    w.carrier.refuse.insert((P1, Path::Primary));
    let good = WorkRecord::Put {
        window: 7,
        dst: 0,
        src: 0,
        bytes: 8,
    };
    let misaligned = WorkRecord::FetchAdd {
        window: 7,
        dst: 3,
        add: 1,
    };
    w.todo.insert(
        q(P1),
        [good, misaligned, good]
            .iter()
            .map(|&r| (Nanos(0), r))
            .collect(),
    );
    // The misaligned fetch-add encodes fine but does not decode: a bad record.
    assert!(w.run(None, Nanos(0).after(Duration::from_secs(1))));
    let cq = &w.cqes[&q(P1)];
    let statuses: Vec<_> = {
        let mut v: Vec<_> = cq
            .iter()
            .map(|(_, e)| (e.req_id, e.status, e.paths))
            .collect();
        v.sort_unstable_by_key(|x| x.0);
        v
    };
    let backup = PathSet::of(Path::Backup);
    assert_eq!(
        statuses,
        [
            (0, CqStatus::Ok, backup),
            (1, CqStatus::BadRecord, PathSet::NONE),
            (2, CqStatus::Ok, backup)
        ]
    );
    assert!(w.events.iter().any(|(_, e)| matches!(
        e,
        ProxyEvent::BadRecord {
            req_id: 1,
            error: crate::queue::DecodeError::Misaligned { offset: 3, .. },
            ..
        }
    )));
    assert!(w.events.iter().any(|(_, e)| matches!(
        e,
        ProxyEvent::PathDown {
            path: Path::Primary,
            why: crate::health::PathFault::ErrorCompletion { status: 0x5a, .. },
            ..
        }
    )));
    // What the host side logs names the queue, the request and the reason.
    let shown: Vec<String> = w.events.iter().map(|(_, e)| e.to_string()).collect();
    assert!(
        shown.contains(
            &"queue to peer 1 on the primary path: request 1 is not a valid record: \
              fetch-add target offset 3 is not 8-byte aligned"
                .to_string()
        ),
        "{shown:?}"
    );
    assert!(
        shown
            .iter()
            .any(|e| e.starts_with("primary path to peer 1 is down: ")
                && e.ends_with("completed with error status 0x5a")),
        "{shown:?}"
    );
}

#[test]
fn setup_mistakes_are_refused_with_the_reason() {
    let mut cfg = ProxyConfig {
        sq_slots: 6,
        ..ProxyConfig::default()
    };
    assert_eq!(
        Proxy::new(PeerId(0), cfg).err(),
        Some(ProxyError::Queue(crate::queue::QueueError::BadSlots(6)))
    );
    cfg = ProxyConfig {
        take_per_poll: 0,
        ..ProxyConfig::default()
    };
    assert_eq!(
        Proxy::new(PeerId(0), cfg).err(),
        Some(ProxyError::ZeroTakePerPoll)
    );
    cfg = ProxyConfig {
        max_owed: 0,
        ..ProxyConfig::default()
    };
    assert_eq!(
        Proxy::new(PeerId(0), cfg).err(),
        Some(ProxyError::ZeroMaxOwed)
    );
    cfg = ProxyConfig::default();
    cfg.health.recovery = cfg.health.timeout;
    assert!(matches!(
        Proxy::new(PeerId(0), cfg),
        Err(ProxyError::Config(_))
    ));
    let mut p = Proxy::new(PeerId(0), ProxyConfig::default()).expect("valid");
    p.add_queue(q(P1), true).expect("first");
    assert_eq!(
        p.add_queue(q(P1), true),
        Err(ProxyError::DuplicateQueue(q(P1)))
    );
    // Memory given for a queue must be its ring's size; a refusal adds nothing.
    let (sb, cb) = (
        p.request_queue().ring().bytes(),
        p.completion_queue().ring().bytes(),
    );
    let q2 = q(P2);
    for (s, c, expected, got) in [(sb + 8, cb, sb, sb + 8), (sb, cb - 8, cb, cb - 8)] {
        assert_eq!(
            p.add_queue_in(q2, false, Box::new(vec![0u8; s]), Box::new(vec![0u8; c])),
            Err(ProxyError::Queue(crate::queue::QueueError::WrongLength {
                expected,
                got
            }))
        );
    }
    assert!(p.memory_mut(q2).is_none());
    assert_eq!(
        p.add_queue_in(
            q(P1),
            true,
            Box::new(vec![0u8; sb]),
            Box::new(vec![0u8; cb])
        ),
        Err(ProxyError::DuplicateQueue(q(P1)))
    );
    // Given memory is set up empty, whatever it held.
    p.add_queue_in(
        q2,
        false,
        Box::new(vec![0xeeu8; sb]),
        Box::new(vec![0xeeu8; cb]),
    )
    .expect("right sizes");
    let (sr, cr) = (p.request_queue().ring(), p.completion_queue().ring());
    let (sq, cq) = p.memory_mut(q2).expect("added");
    assert_eq!((sr.indices(sq), cr.indices(cq)), (Ok((0, 0)), Ok((0, 0))));
    assert_eq!(sq.load(sr.offset_of(0)), 0, "stamps zeroed");
}

#[test]
fn records_the_carrier_cannot_carry_complete_as_bad_without_touching_path_health() {
    let mut w = world(&[(q(P1), true)], 8, 8, Vec::new(), 5);
    w.carrier.max_bytes = Some(64);
    let put = |dst, bytes| WorkRecord::Put {
        window: 7,
        dst,
        src: 0,
        bytes,
    };
    let recs = [
        put(0, 8),
        put(64, 100),
        WorkRecord::FetchAdd {
            window: 7,
            dst: FADD_WORD,
            add: 5,
        },
        WorkRecord::PutSignal {
            window: 7,
            dst: 256,
            src: 0,
            bytes: 65,
            signal: SIG_ADD,
            value: 1,
            op: SignalOp::Add,
        },
        WorkRecord::Quiet,
        put(512, 64),
        WorkRecord::Quiet,
    ];
    w.todo
        .insert(q(P1), recs.iter().map(|&r| (Nanos(0), r)).collect());
    assert!(w.run(None, Nanos(0).after(Duration::from_secs(1))));
    check(&w, false);
    let mut got: Vec<_> = w.cqes[&q(P1)]
        .iter()
        .map(|(_, e)| (e.req_id, e.status, e.paths))
        .collect();
    got.sort_unstable_by_key(|x| x.0);
    let (ok, bad) = (
        (CqStatus::Ok, PathSet::of(Path::Primary)),
        (CqStatus::BadRecord, PathSet::NONE),
    );
    assert_eq!(
        got,
        [
            (0, ok.0, ok.1),
            (1, bad.0, bad.1),
            (2, ok.0, ok.1),
            (3, bad.0, bad.1),
            // The quiet reports the first error since the last one.
            (4, bad.0, bad.1),
            (5, ok.0, ok.1),
            (6, CqStatus::Ok, PathSet::NONE),
        ]
    );
    // Never posted, nothing written; the others each posted once on the primary.
    let dest = &w.dests[&P1];
    assert!(dest.writes[64..164].iter().all(|&n| n == 0));
    assert!(dest.writes[256..321].iter().all(|&n| n == 0));
    assert_eq!(dest.word(SIG_ADD), 0);
    assert_eq!(dest.word(FADD_WORD), 5);
    assert_eq!(w.carrier.posts.len(), 3);
    assert!(w
        .carrier
        .posts
        .iter()
        .all(|p| p.2 == Path::Primary && p.4 == 0));
    // Two rejections and no other event: no path went down.
    let events: Vec<_> = w.events.iter().map(|(_, e)| e.clone()).collect();
    assert_eq!(
        events,
        [
            ProxyEvent::Rejected {
                queue: q(P1),
                req_id: 1,
                why: "a put of 100 bytes exceeds 64".into()
            },
            ProxyEvent::Rejected {
                queue: q(P1),
                req_id: 3,
                why: "a put of 65 bytes exceeds 64".into()
            },
        ]
    );
    assert_eq!(
        events[0].to_string(),
        "queue to peer 1 on the primary path: request 1 cannot be carried: a put of 100 bytes exceeds 64"
    );
    assert_eq!(w.proxy.sender().stats().reposted, 0);
}
