//! Mismatched calls across real rank processes (issue 16): each case makes every
//! rank fail with `Error::Mismatch` naming both calls, never `Ok`
//! (`fxtest-worker mismatch CASE`, `tests/src/coll/mismatch.rs`).

use ferrocx_tests::{compile_c_plugin, repo_root, run_passing, RankOutput};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");

fn run(case: &str, env: &[(&str, &str)]) -> Vec<RankOutput> {
    let t = Instant::now();
    let mut all = vec![("FERROCX_TIMEOUT", "20")];
    all.extend_from_slice(env);
    let outs = run_passing(
        WORKER,
        3,
        &["mismatch", case],
        &all,
        Duration::from_secs(60),
    );
    // Found by the check, not by the 20 s timeout.
    let took = t.elapsed();
    assert!(took < Duration::from_secs(15), "{case} took {took:?}");
    outs
}

/// Every rank reports the mismatch, and the message names both ranks' calls.
fn expect(case: &str, needles: &[&str]) {
    expect_with(case, &[], needles)
}

fn expect_with(case: &str, env: &[(&str, &str)], needles: &[&str]) {
    for o in run(case, env) {
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

/// The core's path for the small collectives (shm-coll runs them by default).
const CORE: &[(&str, &str)] = &[("FERROCX_COLLECTIVES", "^shm-coll")];

/// On the core's path the send's fingerprint meets the collective's; on
/// shm-coll's nothing meets, and the crossed check (a rank blocked in a send with
/// a rank blocked in a collective, seen twice) finds it, long before the timeout.
/// shm-coll's path with its roots running ahead (`FERROCX_CHECK_CALLS=deferred`).
const DEFERRED: &[(&str, &str)] = &[("FERROCX_CHECK_CALLS", "deferred")];

#[test]
fn a_send_that_meets_a_collective_fails_on_every_rank() {
    for path in [CORE, &[], DEFERRED] {
        expect_with(
            "send",
            path,
            &[
                "mismatched calls: rank 0 called send of 4000 bytes to rank 1 (its send #0 to that rank)",
                "rank 1 called all_reduce(float, sum, 1000) as op #1",
            ],
        );
    }
}

#[test]
fn a_receive_that_meets_a_collective_fails_on_every_rank() {
    for path in [CORE, &[], DEFERRED] {
        expect_with(
            "recv",
            path,
            &[
                "mismatched calls: rank 0 called all_reduce(float, sum, 1000) as op #1",
                "rank 1 called receive of 4000 bytes from rank 0 (its receive #0 from that rank)",
            ],
        );
    }
}

/// A collective grouped on one rank runs on the core there and on shm-coll on the
/// others: the crossed check names the two paths of the one call.
#[test]
fn one_call_on_two_paths_fails_on_every_rank() {
    expect(
        "group",
        &[
            "mismatched calls: rank 0 called all_reduce(int32, sum, 8) as op #0",
            "all_reduce(int32, sum, 8) as op #0 on plugin 'shm-coll'",
        ],
    );
}

#[test]
fn a_collective_a_plugin_runs_is_checked_too() {
    let Some(so) = compile_c_plugin(
        &repo_root().join("sdk/examples/c-cma/fx_example_cma.c"),
        "ferrocx_plugin_cma",
    ) else {
        return; // no C compiler: the plugin tests say so
    };
    expect_with(
        "plugin",
        // cma bids as shm-coll does: leave shm-coll out so cma runs the call.
        &[
            ("FERROCX_PLUGINS", &so.to_string_lossy()),
            ("FERROCX_SHM_COLL_PRIORITY", "0"),
        ],
        &[
            "mismatched calls: rank 0 called all_gather(uint8, 100) as op #0",
            "called all_gather(uint8, 200) as op #0",
        ],
    );
}

/// With the check off or deferred, shm-coll's roots run ahead: a rank that
/// finished a broadcast and waits in a send with the root, still in that
/// broadcast, is not a mismatch (deferred, the crossed-call search runs and must
/// see that the root is only behind).
#[test]
fn ranks_running_ahead_without_the_sync_check_are_not_a_mismatch() {
    for check in ["0", "deferred"] {
        ran_ahead(check);
    }
}

fn ran_ahead(check: &str) {
    let outs = run_passing(
        WORKER,
        3,
        &["run-ahead"],
        &[
            ("FERROCX_TIMEOUT", "20"),
            ("FERROCX_CHECK_CALLS", check),
            // 3 ranks, 64 KiB slots: rings 4 deep (the worker counts on it).
            ("FERROCX_SHM_COLL_MEMORY", "2359296"),
        ],
        Duration::from_secs(60),
    );
    for o in outs {
        assert!(
            o.stdout.contains("ran ahead, no mismatch"),
            "rank {}: {}",
            o.rank,
            o.stdout
        );
    }
}

/// Checked later (`FERROCX_CHECK_CALLS=deferred`: shm-coll's roots run ahead): a
/// rank whose differing call took nothing from its peers may return from it, and
/// fails at its next call; every rank names the mismatch.
#[test]
fn checked_later_every_rank_fails_by_its_next_call() {
    for case in ["later-type", "later-root", "later-skip"] {
        expect_with(
            case,
            &[("FERROCX_CHECK_CALLS", "deferred")],
            &["mismatched calls: rank "],
        );
    }
}

/// Checked later, the differing call the last before `destroy`: a rank that
/// returned `Ok` from it fails its destroy (shm-coll compares the ranks' last
/// calls there); every rank names the mismatch.
#[test]
fn checked_later_a_difference_in_the_last_call_fails_destroy() {
    for case in ["last-root", "last-fewer"] {
        expect_with(
            case,
            &[("FERROCX_CHECK_CALLS", "deferred")],
            &["mismatched calls: rank "],
        );
    }
}

#[test]
fn checks_can_be_turned_off() {
    run("off-type", &[("FERROCX_CHECK_CALLS", "0")]);
}
