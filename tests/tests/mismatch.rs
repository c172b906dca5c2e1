//! Mismatched calls across real rank processes (issue 16): each case makes every
//! rank fail with `Error::Mismatch` naming both calls, never `Ok`
//! (`fxtest-worker mismatch CASE`, `tests/src/coll/mismatch.rs`).

use ferrocx_tests::{assert_all_ok, run_ranks, shm_leftovers, RankOutput};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");

fn run(case: &str, env: &[(&str, &str)]) -> Vec<RankOutput> {
    let t = Instant::now();
    let mut all = vec![("FERROCX_TIMEOUT", "20")];
    all.extend_from_slice(env);
    let outs = run_ranks(
        WORKER,
        3,
        &["mismatch", case],
        &all,
        Duration::from_secs(60),
    );
    let took = t.elapsed();
    for o in &outs {
        for line in o.stdout.lines() {
            eprintln!("  [{}] {line}", o.rank);
        }
    }
    assert_all_ok(&outs);
    for o in &outs {
        assert!(o.stdout.contains("PASS"), "rank {}: {}", o.rank, o.stdout);
    }
    // Found by the check, not by the 20 s timeout.
    assert!(took < Duration::from_secs(15), "{case} took {took:?}");
    let pids: Vec<u32> = outs.iter().map(|o| o.pid).collect();
    assert_eq!(shm_leftovers(&pids), Vec::<String>::new());
    outs
}

/// Every rank reports the mismatch, and the message names both ranks' calls.
fn expect(case: &str, needles: &[&str]) {
    for o in run(case, &[]) {
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains("MISMATCH"))
            .unwrap_or_else(|| panic!("rank {}: {}", o.rank, o.stdout));
        for n in needles {
            assert!(line.contains(n), "rank {}: {line} lacks {n:?}", o.rank);
        }
    }
}

#[test]
fn different_types_fail_on_every_rank() {
    expect(
        "type",
        &[
            "mismatched calls: rank 0 called all_reduce(float, sum, 1000) as op #0",
            "called all_reduce(int32, sum, 1000) as op #0",
        ],
    );
}

#[test]
fn different_roots_fail_on_every_rank() {
    for case in ["root", "root-large"] {
        expect(
            case,
            &["mismatched calls: rank ", "broadcast(float, ", ", root "],
        );
    }
}

#[test]
fn a_skipped_call_of_equal_size_fails_on_every_rank() {
    expect(
        "skip",
        &[
            "as op #1",
            "broadcast(int32, 1000, root 0) as op #1",
            "all_reduce(int32, sum, 1000) as op #1",
        ],
    );
}

#[test]
fn checks_can_be_turned_off() {
    run("off-type", &[("FERROCX_CHECK_CALLS", "0")]);
}
