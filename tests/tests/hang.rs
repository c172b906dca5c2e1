//! Hang attribution across real rank processes (issue 16): when a wait times out,
//! every rank's error says which rank never reached which operation; the same
//! report is available for a live job (API and SIGUSR1) without stopping it
//! (`fxtest-worker hang CASE`, `tests/src/coll/hang.rs`).

use ferrocx_tests::run_passing;
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
/// Rank 2's call; the report adds "on plugin 'shm-coll'" where that plugin ran it.
const BEHIND: &str = "rank 2 is past all_reduce(float, sum, 1000) as op #4";
const NO_FURTHER: &str = "and made no further call";
/// The small all-reduces run on shm-coll by default; the core runs them without it.
const PATHS: [&[(&str, &str)]; 2] = [&[], &[("FERROCX_COLLECTIVES", "^shm-coll")]];

#[test]
fn a_rank_that_stops_calling_is_named_on_every_rank() {
    for path in PATHS {
        stops_calling(path);
    }
}

fn stops_calling(path: &[(&str, &str)]) {
    let mut env = vec![("FERROCX_TIMEOUT", "3")];
    env.extend_from_slice(path);
    let outs = run_passing(WORKER, 3, &["hang", "stop"], &env, Duration::from_secs(60));
    for o in outs {
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains("HANG"))
            .unwrap_or_else(|| panic!("rank {}: {}", o.rank, o.stdout));
        for needle in [
            "hang: ",
            BEHIND,
            NO_FURTHER,
            // The others wait in op #5 (or, when both time out at once, one of
            // them may already have failed in it).
            "in all_reduce(float, sum, 1000) as op #5",
            "timed out after 3.0s",
        ] {
            assert!(
                line.contains(needle),
                "rank {}: {line} lacks {needle:?}",
                o.rank
            );
        }
    }
}

#[test]
fn a_live_job_reports_where_every_rank_is_and_goes_on() {
    for path in PATHS {
        live_report(path);
    }
}

fn live_report(path: &[(&str, &str)]) {
    let mut env = vec![("FERROCX_TIMEOUT", "30"), ("FERROCX_STATUS_SIGNAL", "1")];
    env.extend_from_slice(path);
    let outs = run_passing(
        WORKER,
        3,
        &["hang", "report"],
        &env,
        Duration::from_secs(60),
    );
    let report = outs[2]
        .stdout
        .lines()
        .find(|l| l.contains("REPORT"))
        .unwrap_or_else(|| panic!("rank 2: {}", outs[2].stdout));
    assert!(
        report.contains(BEHIND) && report.contains(NO_FURTHER),
        "{report}"
    );
    assert!(
        report.contains("ranks 0,1 wait in all_reduce(float, sum, 1000) as op #5"),
        "{report}"
    );
    let printed = outs[0]
        .stderr
        .lines()
        .find(|l| l.contains("ferrocx status (rank 0 of 3"))
        .unwrap_or_else(|| panic!("rank 0 printed no status on SIGUSR1:\n{}", outs[0].stderr));
    assert!(
        printed.contains(BEHIND) && printed.contains(NO_FURTHER),
        "{printed}"
    );
    assert!(
        printed.contains("wait in all_reduce(float, sum, 1000) as op #5"),
        "{printed}"
    );
}
