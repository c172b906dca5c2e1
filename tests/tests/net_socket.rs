//! The net-socket (TCP) transport between real processes over loopback: the
//! conformance kit on its `.so`, send/recv and collectives with
//! `FERROCX_TRANSPORTS=net-socket`, and a peer killed mid-transfer.

use ferrocx_tests::{
    assert_all_ok, killed_rank_is_named, net_socket_plugin_so, run_ranks, target_dir,
};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
const LIMIT: Duration = Duration::from_secs(120);
const NET: [(&str, &str); 2] = [
    ("FERROCX_TRANSPORTS", "net-socket"),
    ("FERROCX_SOCKET_IFNAME", "lo"),
];

/// A tools binary (`fxinfo`, `fxrun`), built into the separate `fx-plugins`
/// target directory (this crate does not depend on the tools crate).
fn tool(name: &str) -> PathBuf {
    // Build the .so first: it takes the same build lock.
    let _ = net_socket_plugin_so();
    let dir = target_dir().join("fx-plugins");
    let manifest = ferrocx_tests::repo_root().join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "ferrocx-tools",
            "--bin",
            name,
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&dir)
        .status()
        .expect("run cargo to build a tool");
    assert!(st.success(), "building {name} failed");
    dir.join("release").join(name)
}

fn net_env(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    NET.iter().chain(extra).copied().collect()
}

#[test]
fn conformance_kit_passes_the_net_socket_plugin() {
    let so = net_socket_plugin_so();
    let fxinfo = tool("fxinfo");
    let t = Instant::now();
    let out = Command::new(fxinfo)
        .arg("--check")
        .arg(&so)
        .env("FERROCX_SOCKET_IFNAME", "lo")
        .output()
        .expect("run fxinfo");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "fxinfo --check ({:.1} s):\n{text}",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    for name in [
        "load",
        "lifecycle",
        "can_connect",
        "blob round-trip",
        "transfer 0 B",
        "transfer 16777217 B",
        "requests in flight",
        "receive too small",
        "misuse isend(null conn)",
    ] {
        assert!(
            text.contains(&format!("PASS  {name}")),
            "missing PASS {name}:\n{text}"
        );
    }
    assert!(!text.contains("FAIL") && !text.contains("SKIP"), "{text}");
    assert!(text.contains("0 failed, 0 skipped"), "{text}");
}

#[test]
fn fxinfo_under_fxrun_reports_net_socket_for_every_pair() {
    let fxinfo = tool("fxinfo");
    let fxrun = tool("fxrun");
    let out = Command::new(fxrun)
        .args(["-n", "2", "--"])
        .arg(fxinfo)
        .envs(NET)
        .output()
        .expect("run fxrun");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let pairs: Vec<&str> = text.lines().filter(|l| l.contains("->")).collect();
    assert!(!pairs.is_empty(), "no transport table:\n{text}");
    assert!(
        text.contains("net-socket") && !pairs.iter().any(|l| l.contains("shm")),
        "{text}"
    );
}

fn pairs(n: usize) {
    let t = Instant::now();
    let outs = run_ranks(
        WORKER,
        n,
        &[
            "pairs",
            "0,1,7,4096,1048579,16777216",
            "--expect-transport",
            "net-socket",
        ],
        &net_env(&[("FERROCX_TIMEOUT", "60")]),
        LIMIT,
    );
    eprintln!("pairs on {n} ranks: {:.1} s", t.elapsed().as_secs_f64());
    assert_all_ok(&outs);
    for o in &outs {
        assert!(
            o.stdout.contains("verified with every peer") && o.stdout.contains("net-socket"),
            "rank {}: {}",
            o.rank,
            o.stdout
        );
    }
}

#[test]
fn pairs_2_ranks() {
    pairs(2);
}

#[test]
fn pairs_3_ranks() {
    pairs(3);
}

#[test]
fn collectives_2_ranks() {
    for filter in ["all_reduce", "all_gather", "alltoall", "broadcast"] {
        let t = Instant::now();
        let outs = run_ranks(
            WORKER,
            2,
            &["coll-matrix", "--filter", filter],
            &net_env(&[("FERROCX_TIMEOUT", "30")]),
            LIMIT,
        );
        eprintln!("coll-matrix {filter}: {:.1} s", t.elapsed().as_secs_f64());
        assert_all_ok(&outs);
        for o in &outs {
            assert!(o.stdout.contains("PASS"), "rank {}: {}", o.rank, o.stdout);
        }
    }
}

#[test]
fn killed_rank_is_named_by_survivors_within_the_timeout() {
    killed_rank_is_named(WORKER, &net_env(&[]), 20);
}
