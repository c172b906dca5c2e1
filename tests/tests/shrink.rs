//! Surviving a lost rank (issue 16): kill one of 4 rank processes, the survivors
//! shrink to a communicator of 3 and every collective is checked on it
//! (`fxtest-worker shrink`, `tests/src/coll/shrink.rs`).

use ferrocx_tests::{assert_all_ok, run_ranks};
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");

#[test]
fn survivors_of_a_killed_rank_shrink_and_every_collective_works() {
    let outs = run_ranks(
        WORKER,
        4,
        &["shrink"],
        &[("FERROCX_TIMEOUT", "30")],
        Duration::from_secs(120),
    );
    for o in &outs {
        for line in o.stdout.lines() {
            eprintln!("  [{}] {line}", o.rank);
        }
    }
    assert_eq!(
        outs[3].code, None,
        "rank 3 should die by SIGKILL: {:?}",
        outs[3]
    );
    assert_all_ok(&outs[..3]);
    for o in &outs[..3] {
        assert!(
            o.stdout.contains("PASS")
                && o.stdout.contains("collectives checked on the 3 survivors"),
            "rank {}: {}",
            o.rank,
            o.stdout
        );
    }
}
