//! Ranks as threads of this process over real mailbox regions in /dev/shm:
//! `ShmComm::init` through an in-memory out-of-band exchange, then long runs of
//! random calls (every collective, root, operator, size, in place or not) that
//! reuse every slot many times, each result compared; and ranks that disagree.

use super::*;
use crate::testkit::{expected, Bufs};
use ferrocx_sdk::abi::FX_TYPE_U32;
use ferrocx_sdk::collective::Coll;
use ferrocx_sdk::testing::{host_with_timeout, peer, Rng, ThreadOob};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A communicator id no other test of this process uses (region names carry it).
fn comm_hash() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 20) | NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `f(rank, comm)` on `n` threads sharing one communicator of small slots, waits
/// bounded by `timeout`.
fn on_threads<R: Send + 'static>(
    n: usize,
    bytes: &str,
    timeout: Duration,
    f: impl Fn(usize, &mut ShmComm) -> R + Send + Sync + Copy + 'static,
) -> Vec<R> {
    on_threads_with(n, bytes, Check::Sync, timeout, f)
}

/// [`on_threads`] checking calls as `check` says (`FERROCX_CHECK_CALLS`).
fn on_threads_with<R: Send + 'static>(
    n: usize,
    bytes: &str,
    check: Check,
    timeout: Duration,
    f: impl Fn(usize, &mut ShmComm) -> R + Send + Sync + Copy + 'static,
) -> Vec<R> {
    let check = match check {
        Check::Off => "0",
        Check::Deferred => "deferred",
        Check::Sync => "1",
    };
    on_threads_vars(
        n,
        &[
            ("FERROCX_SHM_COLL_BYTES", bytes),
            ("FERROCX_CHECK_CALLS", check),
        ],
        timeout,
        f,
    )
}

/// `f(rank, comm)` on `n` threads sharing one communicator configured by
/// `vars`, waits bounded by `timeout`.
fn on_threads_vars<R: Send + 'static>(
    n: usize,
    vars: &[(&str, &str)],
    timeout: Duration,
    f: impl Fn(usize, &mut ShmComm) -> R + Send + Sync + Copy + 'static,
) -> Vec<R> {
    let oob = ThreadOob::new(n);
    let hash = comm_hash();
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let (oob, vars) = (oob.clone(), vars.clone());
            std::thread::spawn(move || {
                let (host, _) = host_with_timeout(timeout);
                let lookup =
                    move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
                let cfg = Config::from_lookup(lookup).unwrap();
                let peers = (0..n)
                    .map(|q| {
                        let mut p = peer(q as i32, std::process::id() as i32);
                        p.nranks = n as i32;
                        p
                    })
                    .collect();
                let info = CommInfo {
                    rank: r,
                    nranks: n,
                    local_rank: r,
                    cuda_device: None,
                    comm_hash: hash,
                    peers,
                };
                let member = oob.member(r);
                let table = member.table();
                // SAFETY: `member` outlives the comm (dropped after it below).
                let oob = unsafe { Oob::from_raw(&table, n) };
                let mut comm = ShmComm::init(host, cfg, &info, oob).unwrap();
                let out = f(r, &mut comm);
                drop(comm);
                drop(member);
                out
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn desc(
    coll: Coll,
    op: RedOp,
    c: usize,
    root: usize,
    b: &mut Bufs,
    seq: u64,
) -> CollDesc<'static, ()> {
    let (send, recv) = b.api();
    CollDesc {
        coll,
        dtype: FX_TYPE_U32,
        elem: 4,
        op: op as i32,
        root,
        count: c,
        mem: MemKind::Host,
        in_place: b.in_place(),
        capturing: false,
        send,
        recv,
        send_win: None,
        recv_win: None,
        seq,
    }
}

const OPS: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max, RedOp::Avg];

#[test]
fn random_calls_reuse_every_slot_and_give_checked_results() {
    // Slots of 256 bytes hold every block whole; slots of 64 cut the larger ones
    // into up to 4 chunks.
    // Unchecked or checked later, messages go only where data does and roots
    // run ahead.
    use Check::{Deferred, Off, Sync};
    for (n, slot, check) in [
        (2, "256", Sync),
        (3, "256", Sync),
        (4, "256", Sync),
        (2, "64", Sync),
        (3, "64", Sync),
        (2, "256", Off),
        (4, "256", Off),
        (3, "64", Off),
        (2, "256", Deferred),
        (3, "256", Deferred),
        (4, "256", Deferred),
        (3, "64", Deferred),
    ] {
        let results = on_threads_with(n, slot, check, Duration::from_secs(10), move |r, comm| {
            // The same sequence of calls on every rank.
            let mut rng = Rng::new(42 + n as u64);
            for seq in 0..400u64 {
                let coll = Coll::ALL[rng.below(8) as usize];
                let root = rng.below(n as u64) as usize;
                let op = OPS[rng.below(5) as usize];
                let c = rng.below(65) as usize; // ≤ 256 bytes a block
                let in_place = rng.below(2) == 1;
                let mut b = Bufs::new(coll, c, n, r, root, in_place);
                let d = desc(coll, op, c, root, &mut b, seq);
                assert!(comm.can_run(&d) > 0, "{} of {c}", coll.name());
                // SAFETY: the buffers are sized for the call (Bufs).
                unsafe { comm.launch(&d) }
                    .unwrap_or_else(|e| panic!("call #{seq} {} on rank {r}: {e:?}", coll.name()));
                if let Some(want) = expected(coll, op, c, n, r, root) {
                    assert_eq!(
                        b.output(),
                        want,
                        "call #{seq}: {} {op} count {c} root {root} in place {in_place}, rank {r} of {n}",
                        coll.name()
                    );
                }
            }
            (comm.exchanges.clone(), comm.posted.clone())
        });
        // Every pair exchanges in each call (once per chunk): the same count with
        // every peer, 400 with whole blocks. Checked, a message goes each way in
        // every exchange; unchecked, none where no data flows.
        for (ex, posted) in results {
            if check == Sync {
                assert_eq!(posted, ex);
            } else {
                assert!(posted.iter().zip(&ex).all(|(p, e)| p <= e));
                assert!(posted.iter().sum::<u64>() < ex.iter().sum::<u64>());
            }
            let peers: Vec<u64> = ex.iter().copied().filter(|&m| m > 0).collect();
            assert_eq!(peers.len(), n - 1);
            assert!(peers.windows(2).all(|w| w[0] == w[1]));
            assert!(if slot == "256" {
                peers[0] == 400
            } else {
                peers[0] > 400
            });
        }
    }
}

#[test]
fn without_the_sync_check_a_root_runs_ahead_by_the_ring_depth() {
    // Rank 1 naps before its broadcasts. Checked synchronously, rank 0's first
    // call waits for rank 1's fingerprint; unchecked or checked later, its
    // first calls return at once — 64 (the heads) of a block of 16 bytes, 8
    // (the slots 8 KiB hold) of 256 bytes — and the next waits for room
    // (rank 1 taking the first).
    const NAP: Duration = Duration::from_millis(400);
    for check in [Check::Sync, Check::Off, Check::Deferred] {
        let check_var = match check {
            Check::Off => "0",
            Check::Deferred => "deferred",
            Check::Sync => "1",
        };
        for count in [4, 64] {
            let vars = [
                ("FERROCX_SHM_COLL_BYTES", "256"),
                ("FERROCX_SHM_COLL_MEMORY", "8K"),
                ("FERROCX_CHECK_CALLS", check_var),
            ];
            let outs = on_threads_vars(2, &vars, Duration::from_secs(10), move |r, comm| {
                let ring = comm.ring(count * 4) as usize;
                let mut times = Vec::new();
                if r == 1 {
                    std::thread::sleep(NAP);
                }
                let t0 = Instant::now();
                for seq in 0..ring as u64 + 2 {
                    let mut b = Bufs::new(Coll::Broadcast, count, 2, r, 0, false);
                    let d = desc(Coll::Broadcast, RedOp::Sum, count, 0, &mut b, seq);
                    // SAFETY: as above.
                    unsafe { comm.launch(&d) }.unwrap();
                    times.push(t0.elapsed());
                    let want = expected(Coll::Broadcast, RedOp::Sum, count, 2, r, 0).unwrap();
                    assert_eq!(b.output(), want, "call #{seq} on rank {r}");
                }
                (ring, times)
            });
            let (ring, times) = &outs[0];
            if check == Check::Sync {
                assert_eq!(*ring, 2);
                assert!(times[0] >= NAP / 2, "checked: {times:?}");
            } else {
                assert_eq!(*ring, if count == 4 { 64 } else { 8 }, "{check:?}");
                assert!(times[ring - 1] < NAP / 2, "{check:?}: {times:?}");
                assert!(times[*ring] >= NAP / 2, "{check:?}: {times:?}");
            }
        }
    }
}

/// Checked later or not at all, a root far ahead of a receiver that naps now
/// and then, its blocks cut into chunks: the receiver credits every quarter
/// ring, so the root keeps finding its ring full and waiting for a batch of
/// credits. Every call ends with the right bytes (a slot overwritten before it
/// was read would carry a later call's number: a mismatch), and so does an
/// all_reduce after the broadcasts, which the root waits for.
#[test]
fn a_root_far_ahead_of_a_napping_receiver_waits_for_batched_credits() {
    const COUNT: usize = 200; // 800 bytes: 4 chunks of 256
    for check in [Check::Deferred, Check::Off] {
        let outs = on_threads_with(2, "256", check, Duration::from_secs(20), move |r, comm| {
            let calls = 4 * comm.depth as u64 + 3;
            assert!(comm.credit_every > 1, "a ring too shallow to batch credits");
            for seq in 0..calls {
                if r == 1 && seq % 7 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let mut b = Bufs::new(Coll::Broadcast, COUNT, 2, r, 0, false);
                let d = desc(Coll::Broadcast, RedOp::Sum, COUNT, 0, &mut b, seq);
                // SAFETY: the buffers hold what the descriptor says.
                unsafe { comm.launch(&d) }.unwrap();
                let want = expected(Coll::Broadcast, RedOp::Sum, COUNT, 2, r, 0).unwrap();
                assert_eq!(b.output(), want, "{check:?}: call #{seq} on rank {r}");
            }
            let mut b = Bufs::new(Coll::AllReduce, COUNT, 2, r, 0, false);
            let d = desc(Coll::AllReduce, RedOp::Sum, COUNT, 0, &mut b, calls);
            // SAFETY: as above.
            unsafe { comm.launch(&d) }.unwrap();
            let want = expected(Coll::AllReduce, RedOp::Sum, COUNT, 2, r, 0).unwrap();
            assert_eq!(b.output(), want, "{check:?}: the all_reduce on rank {r}");
            comm.coll_taken.iter().sum::<u64>()
        });
        // Rank 1 took every chunk of every broadcast and of the all_reduce.
        assert!(outs[1] > 4 * 4 * 2, "{check:?}: {outs:?}");
    }
}

#[test]
fn ranks_that_disagree_about_the_root_all_fail_naming_the_calls() {
    // Ranks 0 and 1 broadcast from rank 0, rank 2 from rank 1: rank 1 gets all
    // its data from rank 0, yet hears rank 2's differing call and fails too.
    let outs = on_threads(3, "256", Duration::from_secs(10), |r, comm| {
        let root = if r == 2 { 1 } else { 0 };
        let mut b = Bufs::new(Coll::Broadcast, 4, 3, r, root, true);
        let d = desc(Coll::Broadcast, RedOp::Sum, 4, root, &mut b, 0);
        // SAFETY: as above.
        let first = unsafe { comm.launch(&d) };
        // SAFETY: as above.
        let later = unsafe { comm.launch(&d) };
        (first, later)
    });
    for (r, (first, later)) in outs.into_iter().enumerate() {
        let e = first.expect_err("a mismatched call returned Ok");
        assert!(
            e.message().starts_with("mismatched calls: rank ")
                && e.message().contains("broadcast(uint32, 4, root "),
            "rank {r}: {e:?}"
        );
        assert!(later.is_err(), "rank {r}: the comm still works after {e:?}");
    }
}

/// With the deferred check, `calls(rank)` on every rank: each rank's calls
/// until the first that fails (each a broadcast, all_reduce or reduce of 4
/// elements: (collective, root)).
fn deferred_until_failure(
    n: usize,
    calls: fn(usize) -> Vec<(Coll, usize)>,
) -> Vec<(usize, PluginError)> {
    on_threads_with(
        n,
        "256",
        Check::Deferred,
        Duration::from_secs(10),
        move |r, comm| {
            for (seq, (coll, root)) in calls(r).into_iter().enumerate() {
                let mut b = Bufs::new(coll, 4, n, r, root, false);
                let d = desc(coll, RedOp::Sum, 4, root, &mut b, seq as u64);
                // SAFETY: as above.
                if let Err(e) = unsafe { comm.launch(&d) } {
                    return (seq, e);
                }
            }
            panic!("rank {r}: every call returned Ok");
        },
    )
}

#[test]
fn checked_later_ranks_that_disagree_fail_by_their_next_call_naming_the_calls() {
    use Coll::{AllReduce, Broadcast, Reduce};
    // Each rank its own root: both only send; each finds the other's message
    // at the latest when the next call takes from it.
    let outs = deferred_until_failure(2, |r| vec![(Broadcast, r), (AllReduce, 0)]);
    for (r, (seq, e)) in outs.iter().enumerate() {
        let m = e.message();
        assert!(
            m.starts_with("mismatched calls: rank ")
                && m.contains("broadcast(uint32, 4, root 0) as op #0")
                && m.contains("broadcast(uint32, 4, root 1) as op #0"),
            "rank {r}, call {seq}: {e:?}"
        );
    }
    // A skipped call of the same size: rank 1 never makes rank 0's broadcast.
    let outs = deferred_until_failure(2, |r| {
        let mut calls = vec![(Broadcast, 0), (AllReduce, 0), (AllReduce, 0)];
        calls.remove(r);
        calls
    });
    for (r, (seq, e)) in outs.iter().enumerate() {
        assert!(
            e.message().starts_with("mismatched calls: rank ") && *seq <= 1,
            "rank {r}, call {seq}: {e:?}"
        );
    }
    // Three ranks: 0 and 1 broadcast from 0, 2 from 1, then all reduce; rank 2
    // waits for a part rank 1 never sends while rank 0's waits unexpected.
    let outs = deferred_until_failure(3, |r| {
        vec![(Broadcast, if r == 2 { 1 } else { 0 }), (AllReduce, 0)]
    });
    for (r, (seq, e)) in outs.iter().enumerate() {
        assert!(
            e.message().starts_with("mismatched calls: rank ") && *seq <= 1,
            "rank {r}, call {seq}: {e:?}"
        );
    }
    // Ranks that wait for each other as the root: nobody posts; each sees
    // the other's published call (2 ranks, and a cycle of 3), long before the
    // timeout.
    let t = Instant::now();
    for n in [2, 3] {
        let outs = match n {
            2 => deferred_until_failure(2, |r| vec![(Broadcast, 1 - r)]),
            _ => deferred_until_failure(3, |r| vec![(Broadcast, (r + 1) % 3)]),
        };
        for (r, (seq, e)) in outs.iter().enumerate() {
            assert!(
                e.message().starts_with("mismatched calls: rank "),
                "{n} ranks, rank {r}, call {seq}: {e:?}"
            );
        }
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // Leaves of a reduce against a root broadcasting: neither side takes
    // anything in that call; both only send until their rings fill, and each
    // then finds the other's message.
    let outs = deferred_until_failure(2, |r| {
        let one = if r == 0 { (Broadcast, 0) } else { (Reduce, 0) };
        vec![one; 200]
    });
    for (r, (seq, e)) in outs.iter().enumerate() {
        assert!(
            e.message().starts_with("mismatched calls: rank "),
            "rank {r}, call {seq}: {e:?}"
        );
    }
}

#[test]
fn checked_later_a_difference_in_the_last_calls_fails_by_comm_destroy_on_every_rank() {
    use Coll::Broadcast;
    type Calls = fn(usize) -> Vec<(Coll, usize)>;
    let cases: [(&str, Calls, bool); 4] = [
        ("the same calls", |_| vec![(Broadcast, 0); 3], false),
        // Each rank its own root in the last call: both only send.
        ("roots", |r| vec![(Broadcast, 0), (Broadcast, r)], true),
        // Rank 1 makes one broadcast fewer: rank 0's last is never taken.
        ("a skipped call", |r| vec![(Broadcast, 0); 2 - r], true),
        // The leaf's last count differs: it fails that call; the root's
        // call returned Ok, and its destroy hears of the leaf's mismatch.
        (
            "a count",
            |r| vec![(Broadcast, 0), (Broadcast, 0), (Broadcast, 8 + r)],
            true,
        ),
    ];
    for (what, calls, differ) in cases {
        let outs = on_threads_with(
            2,
            "256",
            Check::Deferred,
            Duration::from_secs(10),
            move |r, comm| {
                let mut failed = None;
                for (seq, (coll, root)) in calls(r).into_iter().enumerate() {
                    // Roots of 8 and 9 mean rank 0 with another count.
                    let (count, root) = if root >= 8 {
                        (4 + root - 8, 0)
                    } else {
                        (4, root)
                    };
                    let mut b = Bufs::new(coll, count, 2, r, root, false);
                    let d = desc(coll, RedOp::Sum, count, root, &mut b, seq as u64);
                    // SAFETY: as above.
                    if let Err(e) = unsafe { comm.launch(&d) } {
                        failed = Some(e);
                        break;
                    }
                }
                (failed, comm.close())
            },
        );
        for (r, (failed, closed)) in outs.into_iter().enumerate() {
            match (differ, failed, closed) {
                (false, None, Ok(())) => {}
                (true, Some(e), _) | (true, None, Err(e)) => assert!(
                    e.message().starts_with("mismatched calls: rank "),
                    "{what}, rank {r}: {e:?}"
                ),
                (_, failed, closed) => {
                    panic!("{what}, rank {r}: a call failed with {failed:?}, the destroy said {closed:?}")
                }
            }
        }
    }
}

#[test]
fn a_call_that_never_comes_times_out_naming_the_rank() {
    // Rank 1 makes no call (but lives on: a rank whose region is gone is dead):
    // rank 0 gives up at the timeout, naming rank 1 and the call.
    let outs = on_threads(2, "256", Duration::from_secs(2), |r, comm| {
        if r == 1 {
            std::thread::sleep(Duration::from_secs(3));
            return None;
        }
        let mut b = Bufs::new(Coll::AllReduce, 2, 2, r, 0, false);
        let d = desc(Coll::AllReduce, RedOp::Sum, 2, 0, &mut b, 7);
        let t = std::time::Instant::now();
        // SAFETY: as above.
        Some((unsafe { comm.launch(&d) }, t.elapsed()))
    });
    let (r, took) = outs[0].clone().expect("rank 0 called");
    let e = r.expect_err("no peer, yet Ok");
    assert_eq!(e.code(), ferrocx_sdk::abi::FX_TIMEOUT, "{e:?}");
    assert!(
        e.message()
            .contains("rank 1 never sent its part of all_reduce(uint32, sum, 2) as op #7"),
        "{e:?}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[test]
fn a_rank_whose_region_is_gone_is_named_dead_at_once() {
    // Rank 1 leaves without its call (its comm, and so its region's liveness lock,
    // goes away): rank 0 names it dead within the peer check's period, long
    // before the timeout. The same lock answers across pid namespaces.
    let outs = on_threads(2, "256", Duration::from_secs(10), |r, comm| {
        if r == 1 {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut b = Bufs::new(Coll::AllReduce, 2, 2, r, 0, false);
        let d = desc(Coll::AllReduce, RedOp::Sum, 2, 0, &mut b, 3);
        let t = std::time::Instant::now();
        // SAFETY: as above.
        Some((unsafe { comm.launch(&d) }, t.elapsed()))
    });
    let (r, took) = outs[0].clone().expect("rank 0 called");
    let e = r.expect_err("a dead peer, yet Ok");
    assert!(
        e.message().contains("rank 1 (pid ") && e.message().contains("died during all_reduce"),
        "{e:?}"
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
}

/// Checked later, correct programs where any rank may run far ahead: random
/// collectives (half of them rooted, chunked through 64-byte slots, in place or
/// not, numbers with gaps) mixed with sends and receives on the point-to-point
/// rings, each rank napping at random and one stalling now and then; deep rings
/// and 2-deep ones. Every result is compared, and nothing may be called a
/// mismatch. (Written by a review of the deferred check.)
#[test]
fn checked_later_random_mixes_with_sends_and_naps_never_call_a_mismatch() {
    const DEEP: &[(&str, &str)] = &[
        ("FERROCX_SHM_COLL_BYTES", "64"),
        ("FERROCX_CHECK_CALLS", "deferred"),
    ];
    const SHALLOW: &[(&str, &str)] = &[
        ("FERROCX_SHM_COLL_BYTES", "64"),
        ("FERROCX_CHECK_CALLS", "deferred"),
        ("FERROCX_SHM_COLL_MEMORY", "4096"),
    ];
    for n in 2..=5 {
        for seed in 0..2 {
            mix_with_sends(n, DEEP, seed * 31 + n as u64, 800);
            mix_with_sends(n, SHALLOW, seed * 17 + n as u64, 400);
        }
    }
}

/// The synchronous check's rings carry no credits (`ShmComm::lockstep`): the
/// same random mixes with sends and naps, whole blocks and blocks cut into
/// chunks (several exchanges per call), every result compared. A rank that
/// overwrote a slot its peer had not read would show as a wrong result or a
/// mismatch (a post out of lockstep would fail, "lockstep broken").
#[test]
fn checked_random_mixes_with_sends_and_naps_keep_the_rings_in_lockstep() {
    const WHOLE: &[(&str, &str)] = &[("FERROCX_CHECK_CALLS", "1")];
    const CHUNKED: &[(&str, &str)] = &[
        ("FERROCX_SHM_COLL_BYTES", "64"),
        ("FERROCX_CHECK_CALLS", "1"),
    ];
    for n in 2..=5 {
        mix_with_sends(n, WHOLE, 5 * n as u64, 400);
        mix_with_sends(n, CHUNKED, 11 * n as u64, 400);
    }
}

fn mix_with_sends(n: usize, vars: &[(&str, &str)], seed: u64, steps: u64) {
    use ferrocx_sdk::collective::{P2pDesc, P2pDir, P2pOp};
    on_threads_vars(n, vars, Duration::from_secs(20), move |r, comm| {
        assert!(comm.p2p_bytes > 0);
        // The same steps on every rank; naps of each rank's own.
        let mut rng = Rng::new(seed);
        let mut nap = Rng::new(seed ^ ((r as u64 + 1) * 7919));
        let mut seq = 0u64;
        for i in 0..steps {
            if nap.chance(3) {
                std::thread::sleep(Duration::from_micros(nap.below(2000)));
            }
            if nap.chance(1) && r == seed as usize % n {
                std::thread::sleep(Duration::from_millis(20));
            }
            seq += rng.below(3); // numbers other calls took
            if rng.chance(25) {
                let s = rng.below(n as u64) as usize;
                let d = (s + 1 + rng.below(n as u64 - 1) as usize) % n;
                let len = rng.below(64) as usize * 4 % (comm.p2p_bytes + 1);
                let mut buf = vec![0u8; len.max(1)];
                if r == s {
                    for (j, x) in buf.iter_mut().enumerate() {
                        *x = (i as usize + j) as u8;
                    }
                }
                if r == s || r == d {
                    let op = P2pOp {
                        dir: if r == s { P2pDir::Send } else { P2pDir::Recv },
                        peer: if r == s { d } else { s },
                        bytes: len,
                        buf: buf.as_mut_ptr() as u64,
                    };
                    let pd = P2pDesc {
                        ops: smallvec::smallvec![op],
                        mem: MemKind::Host,
                        capturing: false,
                    };
                    // SAFETY: `buf` holds `len` bytes and lives through the call.
                    unsafe { comm.p2p_launch(&pd) }
                        .unwrap_or_else(|e| panic!("step {i} send {s}->{d} on rank {r}: {e:?}"));
                    if r == d {
                        for (j, x) in buf[..len].iter().enumerate() {
                            assert_eq!(*x, (i as usize + j) as u8, "step {i} byte {j}");
                        }
                    }
                }
                continue;
            }
            let coll = if rng.chance(50) {
                [Coll::Broadcast, Coll::Reduce, Coll::Gather, Coll::Scatter][rng.below(4) as usize]
            } else {
                Coll::ALL[rng.below(8) as usize]
            };
            let root = rng.below(n as u64) as usize;
            let op = OPS[rng.below(5) as usize];
            let c = rng.below(65) as usize;
            let in_place = rng.below(2) == 1;
            let mut b = Bufs::new(coll, c, n, r, root, in_place);
            let d = desc(coll, op, c, root, &mut b, seq);
            seq += 1;
            // SAFETY: the buffers are sized for the call (Bufs).
            unsafe { comm.launch(&d) }.unwrap_or_else(|e| {
                panic!(
                    "step {i} #{} {} root {root} on rank {r}: {e:?}",
                    d.seq,
                    coll.name()
                )
            });
            if let Some(want) = expected(coll, op, c, n, r, root) {
                assert_eq!(b.output(), want, "step {i} {} rank {r}", coll.name());
            }
        }
        // The same calls everywhere: the destroy's comparison (deferred) finds
        // nothing either.
        comm.close()
            .unwrap_or_else(|e| panic!("rank {r}: comm_destroy after the same calls: {e:?}"));
    });
}
