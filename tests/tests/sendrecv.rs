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
