//! send/recv between 2, 3 and 4 real rank processes over the shm transport,
//! ring and single-copy paths, bytes verified by every rank.

use ferrocx_tests::{assert_all_ok, run_ranks, shm_leftovers};
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
const SIZES: &str = "0,1,7,4096,1048579,67108864";
const LIMIT: Duration = Duration::from_secs(120);

/// How the shm transport should move large messages in a test.
#[derive(Clone, Copy)]
enum Path {
    /// `FERROCX_SHM_SINGLE_COPY=0`: everything through the ring (two copies).
    Ring,
    /// Registered receive buffers, default settings: single copy.
    Registered,
    /// Unregistered buffers, default settings: single copy as well.
    Unregistered,
    /// `FERROCX_SHM_SINGLE_COPY=registered` with registered buffers.
    RegisteredOnlyMode,
}

fn exchange(n: usize, path: Path) {
    let mut args = vec!["pairs", SIZES, "--expect-transport", "shm"];
    let mut env = vec![("FERROCX_TIMEOUT", "60")];
    match path {
        Path::Ring => env.push(("FERROCX_SHM_SINGLE_COPY", "0")),
        Path::Registered => args.push("--register"),
        Path::Unregistered => {}
        Path::RegisteredOnlyMode => {
            args.push("--register");
            env.push(("FERROCX_SHM_SINGLE_COPY", "registered"));
        }
    }
    let outs = run_ranks(WORKER, n, &args, &env, LIMIT);
    assert_all_ok(&outs);
    for o in &outs {
        assert!(
            o.stdout.contains("verified with every peer"),
            "rank {}: {}",
            o.rank,
            o.stdout
        );
    }
    let pids: Vec<u32> = outs.iter().map(|o| o.pid).collect();
    assert_eq!(
        shm_leftovers(&pids),
        Vec::<String>::new(),
        "shared memory left behind"
    );
}

#[test]
fn ring_path_2_ranks() {
    exchange(2, Path::Ring);
}

#[test]
fn ring_path_3_ranks() {
    exchange(3, Path::Ring);
}

#[test]
fn ring_path_4_ranks() {
    exchange(4, Path::Ring);
}

#[test]
fn single_copy_2_ranks() {
    exchange(2, Path::Registered);
}

#[test]
fn single_copy_3_ranks() {
    exchange(3, Path::Registered);
}

#[test]
fn single_copy_4_ranks() {
    exchange(4, Path::Registered);
}

#[test]
fn single_copy_into_unregistered_buffers_3_ranks() {
    exchange(3, Path::Unregistered);
}

#[test]
fn registered_only_mode_3_ranks() {
    exchange(3, Path::RegisteredOnlyMode);
}

#[test]
fn single_copy_disabled_falls_back_to_ring() {
    let outs = run_ranks(
        WORKER,
        2,
        &["pairs", "65536,1048579", "--register"],
        &[("FERROCX_SHM_SINGLE_COPY", "0"), ("FERROCX_TIMEOUT", "60")],
        LIMIT,
    );
    assert_all_ok(&outs);
}

#[test]
fn groups_in_different_orders_do_not_deadlock() {
    for n in [2, 3, 4] {
        let outs = run_ranks(
            WORKER,
            n,
            &["groups", "200"],
            &[("FERROCX_TIMEOUT", "60")],
            LIMIT,
        );
        assert_all_ok(&outs);
    }
}

/// Host messages of at most 64 KiB run on shm-coll's point-to-point rings,
/// larger ones on the core's shm transport, in one group, asynchronous groups
/// and blocking calls mixed across ranks; every byte checked (with the call
/// check on, and off on 3 ranks).
#[test]
fn small_host_messages_run_on_shm_coll_beside_the_core() {
    for (n, check) in [(2, "1"), (3, "1"), (4, "1"), (3, "0")] {
        let outs = ferrocx_tests::run_passing(
            WORKER,
            n,
            &["host-p2p", "30", "shm-coll"],
            &[("FERROCX_TIMEOUT", "30"), ("FERROCX_CHECK_CALLS", check)],
            LIMIT,
        );
        for o in &outs {
            assert!(
                o.stdout.contains("(shm-coll)"),
                "rank {}: {}",
                o.rank,
                o.stdout
            );
        }
    }
}

/// `Communicator::sendrecv` around the ring at every shift (with the rank
/// itself too), small messages on shm-coll and large ones on the core, every
/// byte checked; a short receive fails alone with the size error and the
/// next call pairs; a peer out of range is refused naming it.
#[test]
fn sendrecv_moves_every_byte_and_fails_bad_calls_alone() {
    for n in [2, 3] {
        let outs = ferrocx_tests::run_passing(
            WORKER,
            n,
            &["host-sendrecv", "6"],
            &[("FERROCX_TIMEOUT", "30")],
            LIMIT,
        );
        for o in &outs {
            // Every call but rank 1's short receive checked: 6 rounds of n shifts.
            let calls = 6 * n - usize::from(o.rank == 1);
            assert!(
                o.stdout
                    .contains(&format!("SENDRECV {calls} calls checked (shm-coll)")),
                "rank {}: {}",
                o.rank,
                o.stdout
            );
        }
    }
}

/// `FERROCX_SHM_COLL_P2P_BYTES=0` leaves every message to the core.
#[test]
fn without_the_rings_every_message_takes_the_core() {
    ferrocx_tests::run_passing(
        WORKER,
        3,
        &["host-p2p", "9", "core"],
        &[
            ("FERROCX_TIMEOUT", "30"),
            ("FERROCX_SHM_COLL_P2P_BYTES", "0"),
        ],
        LIMIT,
    );
}

/// A small receive of another size than its send fails alone, as on the
/// core's path, and the next message still pairs with the next receive.
#[test]
fn a_small_receive_of_another_size_fails_alone() {
    let outs = ferrocx_tests::run_passing(
        WORKER,
        2,
        &["host-p2p-size"],
        &[("FERROCX_TIMEOUT", "30")],
        LIMIT,
    );
    assert!(
        outs[1].stdout.contains(
            "SIZE mismatched sizes: rank 0 sent 100 bytes but rank 1 posted a receive of 50 bytes"
        ),
        "{}",
        outs[1].stdout
    );
}

/// A group's op on a connection already made goes while the group's other
/// connection waits for a peer that first needs that op (docs/ARCHITECTURE.md,
/// Connections): a valid program of three messages that once hung until the
/// timeout.
#[test]
fn a_group_making_a_connection_does_not_hold_back_its_other_ops() {
    let outs = ferrocx_tests::run_passing(
        WORKER,
        4,
        &["host-p2p-lazy"],
        &[("FERROCX_TIMEOUT", "10")],
        LIMIT,
    );
    for o in outs.iter().take(3) {
        assert!(
            o.stdout.contains("LAZY every message arrived"),
            "{}",
            o.stdout
        );
    }
}

/// A started receive returns before its connection exists, and the service
/// thread makes several calls' connections at once: a valid program across
/// two communicators, which hung until the timeout when a started call
/// waited for its connections (docs/ARCHITECTURE.md, Connections).
#[test]
fn a_started_call_does_not_wait_for_its_connections() {
    let outs = ferrocx_tests::run_passing(
        WORKER,
        3,
        &["host-p2p-two-comms"],
        &[("FERROCX_TIMEOUT", "10")],
        LIMIT,
    );
    for o in &outs {
        assert!(
            o.stdout.contains("TWO-COMMS every message arrived"),
            "{}",
            o.stdout
        );
    }
}

/// A group waiting for a connection request learns of a peer's death at
/// once, though it waits on another peer: its own send to the dead rank was
/// already done (the wait looks at every peer, not only the awaited ones).
#[test]
fn a_death_during_connection_setup_ends_the_wait_at_once() {
    let outs = ferrocx_tests::run_ranks(
        WORKER,
        3,
        &["host-p2p-setup-death"],
        &[("FERROCX_TIMEOUT", "10")],
        LIMIT,
    );
    let o = &outs[2];
    let line = o
        .stdout
        .lines()
        .find_map(|l| l.split_once("SETUP-DEATH after "))
        .map(|(_, rest)| rest.to_string())
        .unwrap_or_else(|| panic!("{o:?}"));
    let secs: f64 = line
        .split(':')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(secs < 5.0, "rank 2 waited {secs} s for a dead rank: {line}");
    assert!(line.contains("rank 0"), "{line}");
}

/// A connection request that never comes times out after the whole
/// `FERROCX_TIMEOUT`, naming the rank that did not post its side.
#[test]
fn a_connection_request_that_never_comes_names_its_rank_and_the_timeout() {
    let outs = ferrocx_tests::run_ranks(
        WORKER,
        3,
        &["host-p2p-setup-timeout"],
        &[("FERROCX_TIMEOUT", "3")],
        LIMIT,
    );
    let o = &outs[0];
    assert!(
        o.stdout.contains("SETUP-TIMEOUT") && o.stdout.contains("after 3.0s waiting for rank 2"),
        "{o:?}"
    );
}

/// Ranks started under one CPU mask (`taskset -c 0`, as a cpuset or a
/// launcher's binding may do) share its CPU: shm-coll finds that from their
/// affinity, not from the host's CPU count, and says so; its waiting ranks
/// then yield at once (before, each spun thousands of polls per wait: 88 µs
/// per 8-byte call instead of 0.9 on the dev VM). Unbound ranks on a host of
/// as many CPUs do not share. Every byte checked both ways.
#[test]
fn ranks_sharing_a_cpu_are_found_from_their_affinity() {
    let line =
        |r: usize| format!("shm-coll: rank {r} shares its CPUs with 1 more rank(s) on 1 CPU(s)");
    let env = [("FERROCX_TIMEOUT", "30"), ("FERROCX_DEBUG", "info")];
    let outs = ferrocx_tests::run_passing(
        "taskset",
        2,
        &["-c", "0", WORKER, "host-sendrecv", "2"],
        &env,
        LIMIT,
    );
    for o in &outs {
        assert!(
            o.stderr.contains(&line(o.rank)),
            "rank {}: {}",
            o.rank,
            o.stderr
        );
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus >= 2 {
        let outs = ferrocx_tests::run_passing(WORKER, 2, &["host-sendrecv", "2"], &env, LIMIT);
        for o in &outs {
            assert!(
                !o.stderr.contains("shares its CPUs"),
                "rank {}: {}",
                o.rank,
                o.stderr
            );
        }
    }
}
