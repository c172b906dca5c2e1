//! Hang attribution across real rank processes (issue 16): when a wait times out,
//! every rank's error says which rank never reached which operation; the same
//! report is available for a live job (API and SIGUSR1) without stopping it
//! (`fxtest-worker hang CASE`, `tests/src/coll/hang.rs`).

use ferrocx_tests::run_passing;
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
const BEHIND: &str =
    "rank 2 is past all_reduce(float, sum, 1000) as op #4 and made no further call";

#[test]
fn a_rank_that_stops_calling_is_named_on_every_rank() {
    let outs = run_passing(
        WORKER,
        3,
        &["hang", "stop"],
        &[("FERROCX_TIMEOUT", "3")],
        Duration::from_secs(60),
    );
    for o in outs {
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains("HANG"))
            .unwrap_or_else(|| panic!("rank {}: {}", o.rank, o.stdout));
        for needle in [
            "hang: ",
            BEHIND,
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
    let outs = run_passing(
        WORKER,
        3,
        &["hang", "report"],
        &[("FERROCX_TIMEOUT", "30"), ("FERROCX_STATUS_SIGNAL", "1")],
        Duration::from_secs(60),
    );
    let report = outs[2]
        .stdout
        .lines()
        .find(|l| l.contains("REPORT"))
        .unwrap_or_else(|| panic!("rank 2: {}", outs[2].stdout));
    assert!(report.contains(BEHIND), "{report}");
    assert!(
        report.contains("ranks 0,1 wait in all_reduce(float, sum, 1000) as op #5"),
        "{report}"
    );
    let printed = outs[0]
        .stderr
        .lines()
        .find(|l| l.contains("ferrocx status (rank 0 of 3"))
        .unwrap_or_else(|| panic!("rank 0 printed no status on SIGUSR1:\n{}", outs[0].stderr));
    assert!(printed.contains(BEHIND), "{printed}");
    assert!(
        printed.contains("wait in all_reduce(float, sum, 1000) as op #5"),
        "{printed}"
    );
}
