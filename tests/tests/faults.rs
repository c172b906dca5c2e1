//! Faults and bad input with real processes: a rank killed mid-transfer,
//! misuse of the API, a peer that never shows up.

use ferrocx_tests::{
    assert_all_ok, killed_rank_is_named, killed_rank_is_named_at, run_ranks, shm_leftovers,
};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");

#[test]
fn killed_rank_is_named_by_survivors_within_the_timeout() {
    let outs = killed_rank_is_named(WORKER, &[], 20);
    let pids: Vec<u32> = outs.iter().map(|o| o.pid).collect();
    assert_eq!(
        shm_leftovers(&pids),
        Vec::<String>::new(),
        "shared memory left behind after a crash"
    );
}

/// The same with 64-byte messages, which shm-coll's rings carry: the
/// survivors' waits in the plugin see the dead rank's region lock go.
#[test]
fn killed_rank_is_named_on_shm_coll_s_rings() {
    let outs = killed_rank_is_named_at(WORKER, "64", &[], 20);
    for o in outs.iter().filter(|o| o.rank != 1) {
        assert!(o.stdout.contains("rank 1"), "{}", o.stdout);
    }
}

#[test]
fn bad_input_is_rejected_without_breaking_the_communicator() {
    let outs = run_ranks(
        WORKER,
        2,
        &["badinput"],
        &[("FERROCX_TIMEOUT", "30")],
        Duration::from_secs(60),
    );
    assert_all_ok(&outs);
    let all: String = outs.iter().map(|o| o.stdout.clone()).collect();
    for needle in [
        "peer out of range",
        "send to self",
        "null buffer",
        "wrapping buffer",
        "send on a destroyed communicator",
    ] {
        assert!(
            all.contains(&format!("ok: {needle}")),
            "missing check '{needle}':\n{all}"
        );
    }
    assert!(
        all.contains("ok: receive smaller than the message"),
        "{all}"
    );
    assert!(all.contains("ok: receive larger than the message"), "{all}");
}

#[test]
fn missing_peer_times_out_naming_the_root() {
    // Rank 1 of 2 with nobody at the rendezvous address.
    let outs = run_ranks(
        WORKER,
        1,
        &["pairs", "8"],
        &[
            ("FERROCX_TIMEOUT", "2"),
            ("FERROCX_NRANKS", "2"),
            ("FERROCX_RANK", "1"),
        ],
        Duration::from_secs(30),
    );
    let o = &outs[0];
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stdout.contains("127.0.0.1"),
        "error should name the address: {}",
        o.stdout
    );
}

/// The core's transports carry the 64-byte message (shm-coll's rings would
/// take it: `silent_peer_times_out_on_shm_coll_s_rings`).
const CORE_P2P: (&str, &str) = ("FERROCX_SHM_COLL_P2P_BYTES", "0");

fn silent_peer(phase: &str, env: &[(&str, &str)], needles: &[&str]) {
    let start = Instant::now();
    let mut env = env.to_vec();
    env.push(("FERROCX_TIMEOUT", "2"));
    let outs = run_ranks(WORKER, 2, &["stall", phase], &env, Duration::from_secs(30));
    assert!(outs[0].ok(), "{:?}", outs[0]);
    let text = &outs[0].stdout;
    for n in needles {
        assert!(text.contains(n), "{n:?} in {text}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
}

/// What a core transport's timeout says.
const CORE_WAIT: [&str; 2] = [
    "timed out after 2.0s waiting for rank 1",
    "rank 0 waits in receive of 64 bytes from rank 1",
];

#[test]
fn silent_peer_times_out_during_connection_setup() {
    silent_peer(
        "setup",
        &[CORE_P2P],
        &[CORE_WAIT[0], CORE_WAIT[1], "connection setup"],
    );
}

#[test]
fn silent_peer_times_out_on_an_established_connection() {
    // The wait that expires is the call check's 32 bytes before the data; the
    // report names the call.
    silent_peer(
        "data",
        &[CORE_P2P],
        &[CORE_WAIT[0], CORE_WAIT[1], "from rank 1 via shm"],
    );
}

/// The same message on shm-coll's rings: the plugin's wait names the receive.
#[test]
fn silent_peer_times_out_on_shm_coll_s_rings() {
    silent_peer(
        "data",
        &[],
        &[
            "timed out after 2.0s: plugin 'shm-coll' p2p_launch failed with TIMEOUT",
            "rank 1 never sent its part of receive of 64 bytes from rank 1 (its receive #1 from that rank)",
            "rank 0 failed in receive of 64 bytes from rank 1 (its receive #1 from that rank) on plugin 'shm-coll'",
        ],
    );
}

#[test]
fn abort_reaches_the_peer_with_its_rank() {
    let outs = run_ranks(
        WORKER,
        2,
        &["abort"],
        &[("FERROCX_TIMEOUT", "30")],
        Duration::from_secs(30),
    );
    assert_all_ok(&outs);
    assert!(outs[0].stdout.contains("rank 1"), "{}", outs[0].stdout);
}

#[test]
fn idle_communicators_do_not_spin() {
    let outs = run_ranks(
        WORKER,
        2,
        &["idle"],
        &[("FERROCX_TIMEOUT", "30")],
        Duration::from_secs(60),
    );
    assert_all_ok(&outs);
}
