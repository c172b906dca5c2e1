//! Integration tests of the `fxperf` binary: every benchmark on 2 and 3 real
//! ranks, the nccl-tests table, and `#wrong` = 0 on every row and placement.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const FXPERF: &str = env!("CARGO_BIN_EXE_fxperf");

/// Small sizes: 8, 64, 512, 4K, 32K, 64K.
const SWEEP: [&str; 12] = [
    "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-c", "1",
];
const SIZES: usize = 6;

const COLLECTIVES: [&str; 9] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "alltoallv",
    "gather",
    "scatter",
];

fn fxperf(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(FXPERF)
        .args(args)
        .env("FXRUN_KILL_GRACE", "1")
        .env_remove("FERROCX_COMM_ID")
        .env_remove("FERROCX_RANK")
        .stdin(Stdio::null())
        .output()
        .expect("run fxperf");
    (out, start.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The data rows of an nccl-tests table, split into their 13 columns.
fn rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<String> = l.split_whitespace().map(str::to_string).collect();
            assert_eq!(f.len(), 13, "row without 13 columns: {l:?}\n{stdout}");
            f
        })
        .collect()
}

/// Run one benchmark, check the table and every `#wrong`; returns the rows.
fn check_run(np: usize, op: &str, extra: &[&str], expect_rows: usize) -> Vec<Vec<String>> {
    let np_s = np.to_string();
    let mut args = vec!["--np", np_s.as_str()];
    args.extend_from_slice(&SWEEP);
    args.extend_from_slice(extra);
    args.push(op);
    let (out, took) = fxperf(&args);
    let stdout = text(&out.stdout);
    let ctx = format!(
        "fxperf {}\nstdout:\n{stdout}\nstderr:\n{}",
        args.join(" "),
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    assert!(
        stdout.starts_with(&format!("# fxperf {op}: nranks {np},")),
        "{ctx}"
    );
    let header = stdout
        .lines()
        .find(|l| l.contains("size") && l.contains("redop"))
        .unwrap_or_else(|| panic!("no header line\n{ctx}"));
    let names: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        names,
        [
            "#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
            "time", "algbw", "busbw", "#wrong"
        ],
        "{ctx}"
    );
    assert!(
        stdout.contains("out-of-place") && stdout.contains("in-place"),
        "{ctx}"
    );
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{ctx}");
    assert!(stdout.contains("# Avg bus bandwidth"), "{ctx}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), expect_rows, "{ctx}");
    for r in &rows {
        assert_eq!(r[8], "0", "out-of-place #wrong in {r:?}\n{ctx}");
        if op == "sendrecv" || op == "alltoall_sends" {
            assert_eq!(r[12], "N/A", "{ctx}");
        } else {
            assert_eq!(r[12], "0", "in-place #wrong in {r:?}\n{ctx}");
        }
        let size: usize = r[0].parse().unwrap();
        let count: usize = r[1].parse().unwrap();
        assert!(size <= 64 << 10 && count <= size, "{r:?}");
        for c in [5, 6, 7] {
            let v: f64 = r[c].parse().unwrap_or_else(|_| panic!("{r:?}"));
            assert!(v.is_finite() && v >= 0.0, "{r:?}");
        }
    }
    eprintln!(
        "fxperf --np {np} {op} {}: {} rows in {:.1} s",
        extra.join(" "),
        rows.len(),
        took.as_secs_f64()
    );
    rows
}

#[test]
fn every_benchmark_on_2_and_3_ranks() {
    let start = Instant::now();
    for np in [2, 3] {
        for op in COLLECTIVES {
            let rows = check_run(np, op, &[], SIZES);
            let (reduces, rooted) = (
                matches!(op, "all_reduce" | "reduce_scatter" | "reduce"),
                matches!(op, "broadcast" | "reduce" | "gather" | "scatter"),
            );
            for r in &rows {
                assert_eq!(r[2], "float", "{r:?}");
                assert_eq!(r[3], if reduces { "sum" } else { "none" }, "{r:?}");
                assert_eq!(r[4], if rooted { "0" } else { "-1" }, "{r:?}");
            }
            // The last row is -e (64 KiB) for count = size/4; per-rank blocks round down.
            let last = &rows[SIZES - 1];
            if matches!(op, "all_reduce" | "broadcast" | "reduce") {
                assert_eq!((last[0].as_str(), last[1].as_str()), ("65536", "16384"));
            } else {
                let blk = (16384 / np) & !3;
                assert_eq!(last[1], blk.to_string(), "{last:?}");
                assert_eq!(last[0], (blk * np * 4).to_string(), "{last:?}");
            }
        }
        check_run(np, "sendrecv", &[], SIZES);
        // A block of size / np (down to 16 bytes) with every rank, itself included.
        let rows = check_run(np, "alltoall_sends", &[], SIZES);
        let last = &rows[SIZES - 1];
        let blk = 65536 / np / 16 * 16;
        assert_eq!(last[0], (blk * np).to_string(), "{last:?}");
    }
    // Every type and operator, every root.
    let rows = check_run(2, "all_reduce", &["-d", "all", "-o", "all"], 12 * 5 * SIZES);
    assert!(rows.iter().any(|r| r[2] == "bfloat16" && r[3] == "avg"));
    assert!(rows.iter().any(|r| r[2] == "f8e4m3" && r[3] == "prod"));
    let rows = check_run(
        3,
        "reduce",
        &["-d", "all", "-o", "all", "-r", "all"],
        12 * 5 * 3 * SIZES,
    );
    assert!(rows
        .iter()
        .any(|r| r[2] == "half" && r[3] == "prod" && r[4] == "2"));
    check_run(
        3,
        "reduce_scatter",
        &["-d", "all", "-o", "all"],
        12 * 5 * SIZES,
    );
    check_run(3, "alltoallv", &["-d", "all"], 12 * SIZES);
    check_run(3, "scatter", &["-r", "all", "-d", "int8"], 3 * SIZES);
    check_run(3, "gather", &["-r", "2", "-d", "double"], SIZES);
    eprintln!("all fxperf runs: {:.1} s", start.elapsed().as_secs_f64());
}

#[test]
fn json_rows() {
    let path: PathBuf =
        std::env::temp_dir().join(format!("fxperf-test-{}.json", std::process::id()));
    let p = path.to_string_lossy().into_owned();
    check_run(2, "all_gather", &["--json", &p], SIZES);
    let j = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        j.starts_with("{\"op\":\"all_gather\",\"nranks\":2,\"results\":["),
        "{j}"
    );
    assert_eq!(j.matches("\"out_of_place\":{").count(), SIZES, "{j}");
    assert_eq!(j.matches("\"in_place\":{").count(), SIZES, "{j}");
    assert_eq!(j.matches("\"wrong\":0").count(), 3 * SIZES, "{j}");
}

#[test]
fn bad_usage_exits_2() {
    let (out, _) = fxperf(&["--np", "2", "allreduce"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown benchmark 'allreduce'"), "{err}");
    assert!(
        err.contains("all_reduce") && err.contains("alltoallv"),
        "{err}"
    );

    let (out, _) = fxperf(&["-d", "float128", "all_reduce"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("float128"));

    let (out, _) = fxperf(&["--np", "2", "-r", "7", "-b", "8", "-e", "8", "broadcast"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("-r 7: root out of range"), "{err}");

    let (out, _) = fxperf(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stderr);
    for op in COLLECTIVES {
        assert!(help.contains(op), "{op} missing from --help");
    }
}
