use super::sim::{Dir, Fate, Hop, Policy, Sim, ME};
use super::*;
use crate::rng::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

const T: Duration = Duration::from_millis(1);
const W: Duration = Duration::from_millis(3);
const LAT: Duration = Duration::from_micros(5);
const P1: PeerId = PeerId(1);
const P2: PeerId = PeerId(2);

/// Fixed windows: a path is taken back `W` after its last failure, however
/// often it fails.
fn cfg() -> HealthConfig {
    HealthConfig {
        timeout: T,
        recovery: W,
        max_recovery: W,
    }
}

/// Windows that double while a path flaps, up to 8 `W`.
fn cfg_backoff() -> HealthConfig {
    HealthConfig {
        max_recovery: 8 * W,
        ..cfg()
    }
}

fn at(d: Duration) -> Nanos {
    Nanos(0).after(d)
}

fn write(i: u64) -> Op {
    Op::Write {
        dst: i * 64,
        len: 64,
    }
}

fn fadd(add: u64) -> Op {
    Op::FetchAdd { dst: 8, add }
}

/// Every hop delivered after `LAT`, except those `drop` says to drop.
fn dropping(drop: impl Fn(Hop) -> bool + 'static) -> Policy {
    Box::new(move |_, hop| {
        if drop(hop) {
            Fate::Drop
        } else {
            Fate::Deliver(LAT)
        }
    })
}

fn posts(sim: &Sim) -> Vec<(Nanos, PeerId, Path, Seq, u32)> {
    sim.log
        .actions
        .iter()
        .filter_map(|&(t, a)| match a {
            Action::Post {
                peer,
                path,
                req,
                attempt,
            } => Some((t, peer, path, req.seq, attempt)),
            _ => None,
        })
        .collect()
}

#[test]
fn healthy_paths_use_the_primary_only() {
    let mut sim = Sim::new(cfg(), &[(P1, true)], 1, dropping(|_| false));
    for i in 0..100 {
        let op = if i % 3 == 0 { fadd(i + 1) } else { write(i) };
        sim.post(P1, op).unwrap();
        sim.run_until(sim.now.after(Duration::from_micros(3)));
    }
    assert!(sim.run_until_idle(at(Duration::from_secs(1))));
    sim.check_exactly_once();
    let p = posts(&sim);
    assert_eq!(p.len(), 100);
    assert!(p.iter().all(|x| x.2 == Path::Primary && x.4 == 0));
    assert!(sim.log.reports.is_empty());
    assert_eq!(sim.sender.stats().completed, 100);
}

#[test]
fn a_missing_completion_fails_over_to_the_backup_for_writes_and_atomics() {
    for (op, atomic) in [(write(0), false), (fadd(7), true)] {
        let mut sim = Sim::new(
            cfg(),
            &[(P1, true)],
            1,
            dropping(|h| h.path == Path::Primary && h.dir == Dir::Out),
        );
        let seq = sim.post(P1, op).unwrap();
        assert!(sim.run_until_idle(at(Duration::from_secs(1))));
        sim.check_exactly_once();
        assert_eq!(
            posts(&sim),
            vec![
                (Nanos(0), P1, Path::Primary, seq, 0),
                (at(T), P1, Path::Backup, seq, 1)
            ]
        );
        assert_eq!(
            sim.log.reports,
            vec![(
                at(T),
                P1,
                Path::Primary,
                PathFault::Timeout {
                    seq,
                    atomic,
                    waited: T
                }
            )]
        );
        let done_at = sim
            .log
            .actions
            .iter()
            .find(|(_, a)| matches!(a, Action::Complete { .. }))
            .map(|(t, _)| *t);
        assert_eq!(done_at, Some(at(T + 2 * LAT)));
        assert_eq!(sim.sender.route(P1), Some(Path::Backup));
        let expect = if atomic { Some(0) } else { None };
        assert_eq!(sim.log.completes[&(P1, seq)], vec![expect]);
    }
}

/// The primary's completion is late (its data landed): whichever completion comes
/// first completes the request, the other is ignored, and the receiver applied it
/// once and answered the duplicate with the same fetched value.
#[test]
fn a_late_completion_completes_once_whichever_copy_comes_first() {
    // (primary return delay, backup one-way delay, late completion expected to win)
    let cases = [(T + T / 5, T / 2, true), (T + T / 2, LAT, false)];
    for (slow_back, backup_delay, late_wins) in cases {
        let policy: Policy = Box::new(move |_, h: Hop| match (h.path, h.dir) {
            (Path::Primary, Dir::Back) => Fate::Deliver(slow_back),
            (Path::Primary, Dir::Out) => Fate::Deliver(LAT),
            (Path::Backup, _) => Fate::Deliver(backup_delay),
        });
        let mut sim = Sim::new(cfg(), &[(P1, true)], 1, policy);
        let seq = sim.post(P1, fadd(5)).unwrap();
        assert!(sim.run_until_idle(at(Duration::from_secs(1))));
        sim.check_exactly_once();
        let s = sim.sender.stats();
        assert_eq!(s.reposted, 1);
        assert_eq!(s.completed, 1);
        assert_eq!(s.late_completions, u64::from(late_wins));
        assert_eq!(s.duplicate_completions, 1, "the other copy's completion");
        assert_eq!(sim.log.completes[&(P1, seq)], vec![Some(0)]);
        assert_eq!(sim.mems[&P1].words[&8], 5, "applied once");
        assert_eq!(sim.log.arrivals, 2, "both copies reached the receiver");
    }
}

#[test]
fn the_primary_is_taken_back_after_a_quiet_recovery_window() {
    let outage = Duration::from_millis(2);
    let mut sim = Sim::new(
        cfg(),
        &[(P1, true)],
        1,
        dropping(move |h| h.path == Path::Primary && h.now < at(outage)),
    );
    for i in 0..20 {
        sim.run_until(at(Duration::from_micros(500) * i));
        sim.post(P1, write(u64::from(i))).unwrap();
    }
    assert!(sim.run_until_idle(at(Duration::from_secs(1))));
    sim.check_exactly_once();
    assert_eq!(sim.log.reports.len(), 1);
    // Requests posted at 0 and 0.5 ms timed out at T and T + 0.5 ms: the window
    // counts from the last failure.
    let last_failure = at(T + Duration::from_micros(500));
    assert_eq!(
        sim.log.restored,
        vec![(last_failure.after(W), P1, Path::Primary)]
    );
    let restored = sim.log.actions.iter().find_map(|(_, a)| match a {
        Action::Restored { down_for, .. } => Some(*down_for),
        _ => None,
    });
    assert_eq!(restored, Some(W + Duration::from_micros(500)));
    for (t, _, path, _, attempt) in posts(&sim) {
        if attempt > 0 {
            continue;
        }
        let expect = if t < at(T) || t >= last_failure.after(W) {
            Path::Primary
        } else {
            Path::Backup
        };
        assert_eq!(path, expect, "first post at {t}");
    }
}

#[test]
fn a_backup_failure_after_the_switch_back_moves_its_requests_to_the_primary() {
    // Primary dead until 0.5 ms; the backup dies from 3.5 ms on.
    let mut sim = Sim::new(
        cfg(),
        &[(P1, true)],
        1,
        dropping(|h| match h.path {
            Path::Primary => h.now < at(Duration::from_micros(500)),
            Path::Backup => h.now >= at(Duration::from_micros(3500)),
        }),
    );
    let a = sim.post(P1, write(0)).unwrap();
    // The primary fails at T and is restored at T + W = 4 ms.
    sim.run_until(at(Duration::from_micros(3800)));
    let b = sim.post(P1, fadd(3)).unwrap();
    assert_eq!(posts(&sim).last().map(|p| p.2), Some(Path::Backup));
    assert!(sim.run_until_idle(at(Duration::from_secs(1))));
    sim.check_exactly_once();
    assert_eq!(sim.sender.peer_error(P1), None);
    let reports: Vec<_> = sim.log.reports.iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(
        reports,
        vec![
            (at(T), Path::Primary),
            (at(Duration::from_micros(4800)), Path::Backup)
        ]
    );
    let b_posts: Vec<_> = posts(&sim)
        .into_iter()
        .filter(|p| p.3 == b)
        .map(|p| p.2)
        .collect();
    assert_eq!(b_posts, vec![Path::Backup, Path::Primary]);
    assert_eq!(sim.log.completes[&(P1, a)].len(), 1);
}

#[test]
fn without_a_backup_a_primary_failure_is_an_error_naming_the_peer() {
    let mut sim = Sim::new(
        cfg(),
        &[(P1, false)],
        1,
        dropping(|h| h.path == Path::Primary),
    );
    let seq = sim.post(P1, write(0)).unwrap();
    assert!(sim.run_until_idle(at(Duration::from_secs(1))));
    sim.check_exactly_once();
    let (t, e) = sim.log.fails[&(P1, seq)][0];
    assert_eq!(t, at(T));
    assert_eq!(e.backup, None);
    let text = e.to_string();
    assert!(
        text.contains("peer 1") && text.contains("no backup path"),
        "{text}"
    );
    match sim.post(P1, write(1)) {
        Err(PostError::PeerUnreachable(again)) => assert_eq!(again, e),
        other => panic!("post to a dead peer gave {other:?}"),
    }
}

#[test]
fn atomic_completions_are_checked_for_their_value() {
    let mut s = Sender::new(ME, cfg()).unwrap();
    s.add_peer(P1, true);
    let a = s.post(P1, fadd(1), Nanos(0)).unwrap();
    let w = s.post(P1, write(0), Nanos(0)).unwrap();
    while s.poll_action().is_some() {}
    let c = |seq, path, fetched| Completion {
        peer: P1,
        path,
        seq,
        fetched,
    };
    s.on_completion(c(a, Path::Primary, None), Nanos(10))
        .unwrap();
    assert_eq!(
        s.poll_action(),
        Some(Action::Report {
            peer: P1,
            path: Path::Primary,
            why: PathFault::AtomicWithoutValue { seq: a }
        })
    );
    assert!(matches!(
        s.poll_action(),
        Some(Action::Post { path: Path::Backup, req, attempt: 1, .. }) if req.seq == a
    ));
    s.on_completion(c(a, Path::Backup, Some(41)), Nanos(20))
        .unwrap();
    assert_eq!(
        s.poll_action(),
        Some(Action::Complete {
            peer: P1,
            seq: a,
            fetched: Some(41)
        })
    );
    // The write is still on the (now bad) primary; a value on its completion is a
    // fault too, and it moves to the backup.
    s.on_completion(c(w, Path::Primary, Some(9)), Nanos(30))
        .unwrap();
    assert!(matches!(
        s.poll_action(),
        Some(Action::Post { path: Path::Backup, req, attempt: 1, .. }) if req.seq == w
    ));
    assert_eq!(s.stats().reports, 1, "the primary was already down");
    assert_eq!(s.in_flight(P1), 1);
}

#[test]
fn an_error_completion_fails_over_without_waiting_for_the_timeout() {
    let mut s = Sender::new(ME, cfg()).unwrap();
    s.add_peer(P1, true);
    let seq = s.post(P1, write(0), Nanos(0)).unwrap();
    while s.poll_action().is_some() {}
    s.on_error_completion(P1, Path::Primary, seq, 0x15, Nanos(100))
        .unwrap();
    assert_eq!(
        s.poll_action(),
        Some(Action::Report {
            peer: P1,
            path: Path::Primary,
            why: PathFault::ErrorCompletion { seq, status: 0x15 }
        })
    );
    match s.poll_action() {
        Some(Action::Post {
            path: Path::Backup,
            req,
            attempt: 1,
            ..
        }) => assert_eq!(req.seq, seq),
        other => panic!("expected a re-post on the backup, got {other:?}"),
    }
    assert_eq!(s.next_deadline(), Some(Nanos(100).after(T)));
}

/// A primary that fails again soon after it was taken back flaps: each time
/// it waits twice as long (up to `max_recovery`) before traffic returns to
/// it; once it stayed up a whole window, a failure starts again from
/// `recovery`. The backup keeps its own window.
#[test]
fn a_flapping_path_waits_longer_each_time_and_a_steady_one_starts_over() {
    let c = cfg_backoff();
    let mut h = PathHealth::new(P1, true, &c);
    let fault = |s: u64| PathFault::Timeout {
        seq: Seq(s),
        atomic: false,
        waited: T,
    };
    let mut now = at(Duration::from_millis(1));
    let mut windows = Vec::new();
    for k in 0..6u64 {
        assert!(h.mark_bad(Path::Primary, fault(k), now));
        let w = h.window(Path::Primary).unwrap();
        windows.push(w);
        assert_eq!(h.route(), Ok(Path::Backup));
        assert_eq!(h.next_restore(), Some(now.after(w)));
        // Not a moment early.
        assert!(h
            .restore_due(now.after(w - Duration::from_nanos(1)))
            .is_empty());
        now = now.after(w);
        assert_eq!(h.restore_due(now), vec![(Path::Primary, w)]);
        assert_eq!(h.route(), Ok(Path::Primary));
        // It fails again within its window of coming back: a flap.
        now = now.after(T);
    }
    assert_eq!(windows, [W, 2 * W, 4 * W, 8 * W, 8 * W, 8 * W]);
    assert_eq!(h.window(Path::Backup), Some(W), "the backup's own");
    // Up for a whole window (8 W) and more: the next failure starts over.
    now = now.after(8 * W);
    assert!(h.mark_bad(Path::Primary, fault(9), now));
    assert_eq!(h.window(Path::Primary), Some(W));
    // Fixed windows (max_recovery = recovery) never grow.
    let mut fixed = PathHealth::new(P1, true, &cfg());
    let mut t = at(Duration::from_millis(1));
    for k in 0..3 {
        fixed.mark_bad(Path::Primary, fault(k), t);
        assert_eq!(fixed.window(Path::Primary), Some(W));
        t = t.after(W);
        assert_eq!(fixed.restore_due(t).len(), 1);
        t = t.after(T);
    }
}

#[test]
fn health_is_kept_per_peer() {
    let mut sim = Sim::new(
        cfg(),
        &[(P1, true), (P2, true)],
        1,
        dropping(|h| h.peer == P1 && h.path == Path::Primary),
    );
    for i in 0..10 {
        sim.post(P1, write(i)).unwrap();
        sim.post(P2, write(i)).unwrap();
        sim.run_until(sim.now.after(Duration::from_micros(300)));
    }
    assert!(sim.run_until_idle(at(Duration::from_secs(1))));
    sim.check_exactly_once();
    assert!(sim.log.reports.iter().all(|r| r.1 == P1));
    assert!(!sim.log.reports.is_empty());
    assert_eq!(sim.sender.route(P1), Some(Path::Backup));
    assert_eq!(sim.sender.route(P2), Some(Path::Primary));
    assert!(posts(&sim)
        .iter()
        .filter(|p| p.1 == P2)
        .all(|p| p.2 == Path::Primary));
}

#[test]
fn config_that_cannot_work_is_refused_with_the_reason() {
    let zero = HealthConfig {
        timeout: Duration::ZERO,
        ..cfg()
    };
    assert_eq!(zero.validate(), Err(ConfigError::ZeroTimeout));
    let short = HealthConfig {
        recovery: T,
        ..cfg()
    };
    let e = Sender::new(ME, short).unwrap_err();
    assert_eq!(
        e,
        ConfigError::RecoveryNotLongerThanTimeout {
            timeout: T,
            recovery: T
        }
    );
    assert!(e.to_string().contains("1ms"), "{e}");
    let capped = HealthConfig {
        max_recovery: T,
        ..cfg()
    };
    assert_eq!(
        capped.validate(),
        Err(ConfigError::MaxRecoveryBelowRecovery {
            recovery: W,
            max_recovery: T
        })
    );
    assert_eq!(cfg_backoff().validate(), Ok(()));
    assert_eq!(cfg().validate(), Ok(()));
    assert_eq!(HealthConfig::default().validate(), Ok(()));
}

#[test]
fn completions_that_match_nothing_are_errors_not_path_faults() {
    let mut s = Sender::new(ME, cfg()).unwrap();
    s.add_peer(P1, true);
    let c = Completion {
        peer: P2,
        path: Path::Primary,
        seq: Seq(0),
        fetched: None,
    };
    assert_eq!(
        s.on_completion(c, Nanos(0)),
        Err(UnknownCompletion::UnknownPeer {
            peer: P2,
            path: Path::Primary
        })
    );
    let e = s
        .on_completion(Completion { peer: P1, ..c }, Nanos(0))
        .unwrap_err();
    assert_eq!(
        e,
        UnknownCompletion::NeverPosted {
            peer: P1,
            path: Path::Primary,
            seq: Seq(0),
            next: Seq(0)
        }
    );
    assert!(e.to_string().contains("never posted"), "{e}");
    assert_eq!(s.stats().reports, 0);
    assert_eq!(s.poll_action(), None);
    assert_eq!(
        s.post(P2, write(0), Nanos(0)),
        Err(PostError::UnknownPeer(P2))
    );
}

#[test]
fn next_deadline_is_the_earliest_completion_deadline_or_restore() {
    let mut s = Sender::new(ME, cfg()).unwrap();
    s.add_peer(P1, true);
    assert_eq!(s.next_deadline(), None);
    let a = s.post(P1, write(0), Nanos(0)).unwrap();
    s.post(P1, write(1), Nanos(500)).unwrap();
    assert_eq!(s.next_deadline(), Some(at(T)));
    s.on_completion(
        Completion {
            peer: P1,
            path: Path::Primary,
            seq: a,
            fetched: None,
        },
        Nanos(600),
    )
    .unwrap();
    assert_eq!(s.next_deadline(), Some(Nanos(500).after(T)));
    s.handle_timeout(Nanos(500).after(T));
    // The re-post's deadline comes before the primary's restore.
    assert_eq!(s.next_deadline(), Some(Nanos(500).after(T + T)));
    let mut rx = Receiver::new(P1);
    let mut mem = super::sim::LogMemory::default();
    while let Some(act) = s.poll_action() {
        if let Action::Post {
            path: Path::Backup,
            req,
            ..
        } = act
        {
            let c = rx.on_request(Path::Backup, &req, &mut mem).unwrap();
            s.on_completion(c, Nanos(500).after(T + LAT)).unwrap();
        }
    }
    assert_eq!(s.total_in_flight(), 0);
    assert_eq!(s.next_deadline(), Some(Nanos(500).after(T + W)));
}

#[test]
fn the_receiver_applies_once_and_repeats_its_first_answer() {
    let mut rx = Receiver::new(P1);
    let mut mem = super::sim::LogMemory::default();
    let req = |seq, op, below| Request {
        from: ME,
        seq: Seq(seq),
        op,
        completed_below: Seq(below),
    };
    let r0 = req(0, fadd(10), 0);
    let r1 = req(1, write(1), 0);
    let first = rx.on_request(Path::Primary, &r0, &mut mem).unwrap();
    assert_eq!(first.fetched, Some(0));
    assert_eq!(first.peer, P1);
    // Out of order: 1 before a second copy of 0, and 2 before 1's copy.
    rx.on_request(Path::Primary, &r1, &mut mem).unwrap();
    let again = rx.on_request(Path::Backup, &r0, &mut mem).unwrap();
    assert_eq!(again.fetched, Some(0));
    assert_eq!(again.path, Path::Backup);
    assert_eq!(mem.words[&8], 10);
    assert_eq!(mem.writes[&(ME, Seq(1))], 1);
    assert_eq!(rx.applied_below(ME), Seq(2));
    assert_eq!(rx.kept_answers(ME), 1);
    // The sender says everything below 1 completed: 0's answer is dropped, and a
    // stray copy of 0 is answered with nothing (nobody waits for it).
    let r2 = req(2, fadd(1), 1);
    assert_eq!(
        rx.on_request(Path::Primary, &r2, &mut mem).unwrap().fetched,
        Some(10)
    );
    assert_eq!(rx.kept_answers(ME), 1);
    assert_eq!(rx.on_request(Path::Backup, &r0, &mut mem), None);
    assert_eq!(mem.words[&8], 11);
    assert_eq!(mem.adds[&(ME, Seq(0))].len(), 1);
}

/// A receiver that lands bytes itself asks first: fresh requests need their
/// data, copies of applied ones do not, and a late copy of a request the
/// sender completed must not land (newer data may be there).
#[test]
fn the_receiver_says_which_puts_still_need_their_data() {
    let mut rx = Receiver::new(P1);
    let mut mem = super::sim::LogMemory::default();
    let req = |seq, below| Request {
        from: ME,
        seq: Seq(seq),
        op: write(seq),
        completed_below: Seq(below),
    };
    assert!(rx.needs_data(ME, Seq(0), Seq(0)));
    rx.on_request(Path::Primary, &req(0, 0), &mut mem).unwrap();
    // Its copy on the backup: applied, no data, still acknowledged.
    assert!(!rx.needs_data(ME, Seq(0), Seq(0)));
    assert!(rx.on_request(Path::Backup, &req(0, 0), &mut mem).is_some());
    // 1 is sent, then the sender completes it and 2 says so; a copy of 1
    // arriving after that needs nothing, and nobody waits for its answer.
    assert!(rx.needs_data(ME, Seq(1), Seq(1)));
    rx.on_request(Path::Primary, &req(1, 1), &mut mem).unwrap();
    assert!(rx.needs_data(ME, Seq(2), Seq(2)));
    assert!(!rx.needs_data(ME, Seq(1), Seq(1)));
    assert_eq!(rx.on_request(Path::Backup, &req(1, 1), &mut mem), None);
    // Another sender is apart.
    assert!(rx.needs_data(P1, Seq(0), Seq(0)));
    assert_eq!(mem.writes[&(ME, Seq(1))], 1);
}

/// Faults of one primary path: each episode drops everything, drops some hops,
/// delays completions past the timeout, or loses only the completions (the data
/// landed). Episodes are spaced so the primary is taken back between them, and the
/// backup stays healthy: no request may fail.
#[derive(Debug, Clone, Copy)]
enum Episode {
    Dead,
    Lossy,
    Slow,
    LostCompletions,
}

fn episodes(rng: &mut Rng, horizon: Nanos) -> Vec<(Nanos, Nanos, Episode)> {
    let mut out = Vec::new();
    let mut t = at(Duration::from_micros(500 + rng.below(2000)));
    let mut first = true;
    while t < horizon {
        let len = Duration::from_micros(300 + rng.below(4000));
        let kind = if first {
            Episode::Dead
        } else {
            [
                Episode::Dead,
                Episode::Lossy,
                Episode::Slow,
                Episode::LostCompletions,
            ][rng.below(4) as usize]
        };
        first = false;
        out.push((t, t.after(len), kind));
        t = t
            .after(len)
            .after(2 * T + W)
            .after(Duration::from_micros(rng.below(6000)));
    }
    out
}

#[test]
fn random_primary_faults_deliver_every_request_exactly_once() {
    let peers = [(P1, true), (P2, true), (PeerId(3), true)];
    let horizon = at(Duration::from_millis(40));
    let (mut late, mut dup_arrivals, mut reports, mut restores, mut requests) = (0, 0, 0, 0, 0);
    for seed in 0..24u64 {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let plan: BTreeMap<PeerId, Vec<(Nanos, Nanos, Episode)>> = peers
            .iter()
            .map(|&(p, _)| (p, episodes(&mut rng, horizon)))
            .collect();
        let policy: Policy = Box::new(move |rng, h: Hop| {
            let base = Duration::from_micros(1 + rng.below(20));
            if h.path == Path::Backup {
                return Fate::Deliver(base);
            }
            let now_in = plan[&h.peer]
                .iter()
                .find(|e| e.0 <= h.now && h.now < e.1)
                .map(|e| e.2);
            match (now_in, h.dir) {
                (None, _) => Fate::Deliver(base),
                (Some(Episode::Dead), _) => Fate::Drop,
                (Some(Episode::Lossy), _) if rng.chance(1, 2) => Fate::Drop,
                (Some(Episode::Lossy), _) => Fate::Deliver(base),
                (Some(Episode::Slow), _) => {
                    Fate::Deliver(T / 2 + Duration::from_micros(rng.below(2500)))
                }
                (Some(Episode::LostCompletions), Dir::Back) => Fate::Drop,
                (Some(Episode::LostCompletions), Dir::Out) => Fate::Deliver(base),
            }
        });
        let mut sim = Sim::new(cfg(), &peers, seed, policy);
        while sim.now < horizon {
            let peer = peers[sim.rng.below(3) as usize].0;
            let op = if sim.rng.chance(1, 4) {
                Op::FetchAdd {
                    dst: 8 * sim.rng.below(3),
                    add: 1 + sim.rng.below(100),
                }
            } else {
                write(sim.rng.below(1000))
            };
            sim.post(peer, op).unwrap();
            let gap = Duration::from_nanos(sim.rng.below(16_000));
            sim.run_until(sim.now.after(gap));
        }
        assert!(
            sim.run_until_idle(horizon.after(Duration::from_secs(1))),
            "seed {seed}: still in flight"
        );
        sim.check_exactly_once();
        assert!(sim.log.fails.is_empty(), "seed {seed}: {:?}", sim.log.fails);
        // New and re-posted requests follow the primary's state as reported.
        let mut primary_up: BTreeMap<PeerId, bool> = BTreeMap::new();
        for (t, a) in &sim.log.actions {
            match *a {
                Action::Report { peer, path, .. } => {
                    assert_eq!(path, Path::Primary, "seed {seed}: the backup never fails");
                    primary_up.insert(peer, false);
                }
                Action::Restored { peer, path, .. } => {
                    assert_eq!(path, Path::Primary);
                    primary_up.insert(peer, true);
                }
                Action::Post { peer, path, .. } => {
                    let up = primary_up.get(&peer).copied().unwrap_or(true);
                    let expect = if up { Path::Primary } else { Path::Backup };
                    assert_eq!(path, expect, "seed {seed}: post to {peer} at {t}");
                }
                _ => {}
            }
        }
        let s = sim.sender.stats();
        assert!(
            s.reports >= 3,
            "seed {seed}: each peer fails over at least once"
        );
        assert!(s.restored >= 3, "seed {seed}: and switches back");
        requests += sim.ops.len();
        late += s.late_completions;
        reports += s.reports;
        restores += s.restored;
        dup_arrivals += sim.log.arrivals - sim.ops.len() as u64;
    }
    assert!(requests > 50_000, "{requests} requests");
    assert!(late > 0, "no late completion was ever accepted");
    assert!(dup_arrivals > 0, "no duplicate ever reached a receiver");
    assert!(reports > 0 && restores > 0);
}

/// Each request's resolution time minus its first post time.
fn resolution_delays(sim: &Sim) -> Vec<(PeerId, Seq, Duration)> {
    let mut posted = BTreeMap::new();
    let mut out = Vec::new();
    for (t, a) in &sim.log.actions {
        match *a {
            Action::Post {
                peer,
                req,
                attempt: 0,
                ..
            } => {
                posted.insert((peer, req.seq), *t);
            }
            Action::Complete { peer, seq, .. } | Action::Fail { peer, seq, .. } => {
                out.push((peer, seq, t.since(posted[&(peer, seq)])));
            }
            _ => {}
        }
    }
    out
}

#[test]
fn random_faults_on_both_paths_never_hang_and_never_apply_twice() {
    let mut failed_runs = 0;
    let mut clean_runs = 0;
    for seed in 0..150u64 {
        // Drop rates per mille: from rare (most runs survive) to heavy (peers die).
        let drop_pm = [1, 10, 50, 300][(seed % 4) as usize];
        let policy: Policy = Box::new(move |rng, _h: Hop| {
            if rng.chance(drop_pm, 1000) {
                Fate::Drop
            } else if rng.chance(1, 50) {
                Fate::Deliver(Duration::from_micros(rng.below(2500)))
            } else {
                Fate::Deliver(Duration::from_micros(1 + rng.below(20)))
            }
        });
        // Odd seeds with windows that grow while a path flaps.
        let c = if seed % 2 == 1 { cfg_backoff() } else { cfg() };
        let mut sim = Sim::new(c, &[(P1, true), (P2, true)], seed, policy);
        for _ in 0..300 {
            let peer = if sim.rng.chance(1, 2) { P1 } else { P2 };
            let op = if sim.rng.chance(1, 3) {
                fadd(1 + sim.rng.below(9))
            } else {
                write(sim.rng.below(100))
            };
            match sim.post(peer, op) {
                Ok(_) => {}
                Err(PostError::PeerUnreachable(e)) => {
                    assert_eq!(Some(e), sim.sender.peer_error(peer), "seed {seed}");
                }
                Err(e) => panic!("seed {seed}: {e}"),
            }
            let gap = Duration::from_nanos(sim.rng.below(30_000));
            sim.run_until(sim.now.after(gap));
        }
        // Requests resolve within 2T (checked below); stray slow hops land later.
        let limit = sim.now.after(2 * T + Duration::from_millis(3));
        assert!(sim.run_until_idle(limit), "seed {seed}: hang");
        sim.check_exactly_once();
        for (peer, seq, d) in resolution_delays(&sim) {
            assert!(d <= 2 * T, "seed {seed}: {peer} {seq} took {d:?}");
        }
        if sim.log.fails.is_empty() {
            clean_runs += 1;
        } else {
            failed_runs += 1;
        }
    }
    assert!(
        failed_runs > 0 && clean_runs > 0,
        "{failed_runs} / {clean_runs}"
    );
}

#[test]
fn a_dead_peer_is_reported_within_two_timeouts_and_the_others_carry_on() {
    for seed in 0..40u64 {
        let mut rng = Rng::new(seed);
        let death = at(Duration::from_micros(2000 + rng.below(5000)));
        let policy: Policy = Box::new(move |rng, h: Hop| {
            if h.peer == P1 && h.now >= death {
                Fate::Drop
            } else {
                Fate::Deliver(Duration::from_micros(1 + rng.below(20)))
            }
        });
        let mut sim = Sim::new(cfg(), &[(P1, true), (P2, true)], seed, policy);
        let mut first_after_death = None;
        let mut refused = 0;
        while sim.now < at(Duration::from_millis(15)) {
            let now = sim.now;
            match sim.post(P1, write(0)) {
                Ok(_) if now >= death && first_after_death.is_none() => {
                    first_after_death = Some(now);
                }
                Ok(_) => {}
                Err(PostError::PeerUnreachable(e)) => {
                    assert_eq!(e.peer, P1);
                    refused += 1;
                }
                Err(e) => panic!("seed {seed}: {e}"),
            }
            sim.post(P2, fadd(1)).unwrap();
            let gap = Duration::from_micros(1 + sim.rng.below(200));
            sim.run_until(sim.now.after(gap));
        }
        assert!(
            sim.run_until_idle(sim.now.after(2 * T)),
            "seed {seed}: hang"
        );
        sim.check_exactly_once();
        let err = sim
            .sender
            .peer_error(P1)
            .expect("peer 1 declared unreachable");
        let first_fail = sim
            .log
            .fails
            .values()
            .map(|v| v[0].0)
            .min()
            .expect("requests to peer 1 failed");
        let bound = first_after_death.expect("posted after death").after(2 * T);
        assert!(first_fail <= bound, "seed {seed}: {first_fail} > {bound}");
        assert!(refused > 0);
        let text = err.to_string();
        assert!(
            text.contains("peer 1")
                && text.contains("primary path")
                && text.contains("backup path"),
            "{text}"
        );
        assert!(matches!(err.backup, Some(PathFault::Timeout { .. })));
        assert!(sim.log.fails.keys().all(|k| k.0 == P1));
        assert!(sim.log.reports.iter().all(|r| r.1 == P1));
        assert_eq!(sim.sender.route(P2), Some(Path::Primary));
    }
}
