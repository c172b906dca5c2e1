//! Launching under the launchers a job already uses (README, "Launching with
//! mpirun or torchrun"): Open MPI's `mpirun`, whose ranks ferrocx reads from
//! `OMPI_COMM_WORLD_*`, and torchrun's variables (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`). Neither sets any `FERROCX_*`
//! rank variable; the workers verify every byte they receive.

use ferrocx_tests::netns::{required, Hosts, A, B};
use ferrocx_tests::{assert_all_ok, clear_selection_env, free_port, run_commands, RankOutput};
use std::process::Command;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");

/// Variables that would make ferrocx read another launcher's rank than the one tested.
const LAUNCH_VARS: &[&str] = &[
    "FERROCX_RANK",
    "FERROCX_NRANKS",
    "FERROCX_LOCAL_RANK",
    "FERROCX_COMM_ID",
    "FERROCX_PORT",
    "FERROCX_HOSTID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
];

fn clean(c: &mut Command) {
    clear_selection_env(c);
    for v in LAUNCH_VARS {
        c.env_remove(v);
    }
}

/// The `pairs` scenario: every rank exchanges these sizes with every other rank.
const PAIRS: [&str; 2] = ["pairs", "0,1,4096,1048579,16777216"];

/// `mpirun` on PATH, or `None` after printing why the test skips.
fn mpirun() -> Option<String> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("mpirun"))
            .find(|f| f.is_file())
    });
    match found {
        Some(f) => Some(f.to_string_lossy().into_owned()),
        None => {
            eprintln!("skipping: mpirun (Open MPI, package openmpi-bin) is not on PATH");
            None
        }
    }
}

/// mpirun's options for a bounded, unbound run of this test as root or not.
fn mpirun_command(mpirun: &str) -> Command {
    let mut c = Command::new(mpirun);
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "--tag-output",
        "--timeout",
        "60",
    ]);
    clean(&mut c);
    c
}

/// The lines mpirun's `--tag-output` attributes to `rank`: `[1,R]<stdout>:` / `<stderr>:`.
fn rank_lines(text: &str, rank: usize) -> String {
    let tag = format!("[1,{rank}]<");
    text.lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, rest)| rest))
        .filter_map(|l| l.split_once(">:").map(|(_, rest)| rest))
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_mpirun(out: &RankOutput, root: &str, transport: &str) {
    let all = format!("{}\n{}", out.stdout, out.stderr);
    assert!(out.ok(), "mpirun failed ({:?}):\n{all}", out.code);
    for r in 0..2 {
        let mine = rank_lines(&all, r);
        assert!(
            mine.contains(&format!("PASS rank {r}: sizes"))
                && mine.contains(&format!("verified with every peer via [\"{transport}\"]")),
            "rank {r} did not verify its data over {transport}:\n{all}"
        );
        assert!(
            mine.contains(&format!("launch from Open MPI: rank {r} of 2 at {root}")),
            "rank {r} did not take its rank from Open MPI's variables:\n{all}"
        );
    }
}

/// `mpirun -np 1 ip netns exec A … : -np 1 ip netns exec B …`: Open MPI starts
/// the two ranks of an MPMD job in two namespaces (two hosts); without
/// namespaces, `mpirun -np 2` on this host.
#[test]
fn mpirun_launches_two_ranks() {
    let Some(mpirun) = mpirun() else {
        return;
    };
    let debug = ("FERROCX_DEBUG", "warn,ferrocx::comm=debug");
    let t = Instant::now();
    let hosts = match Hosts::try_new(1) {
        Ok(h) => Some(h),
        Err(why) if required() => panic!("FXTEST_REQUIRE_NETNS=1, but: {why}"),
        Err(why) => {
            eprintln!("note: no namespaces ({why}): mpirun starts both ranks on this host");
            None
        }
    };
    let (out, root, transport) = match &hosts {
        Some(h) => {
            let root = h.root();
            let mut c = mpirun_command(&mpirun);
            for (i, host) in [A, B].into_iter().enumerate() {
                if i > 0 {
                    c.arg(":");
                }
                c.args(["-np", "1", "ip", "netns", "exec", h.ns(host), "env"])
                    .arg(format!("FERROCX_HOSTID={}", h.ns(host)))
                    .arg(WORKER)
                    .args(PAIRS)
                    .args(["--expect-transport", "net-socket"]);
            }
            c.env("FERROCX_COMM_ID", &root)
                .env("FERROCX_SOCKET_IFNAME", "fxr")
                .env(debug.0, debug.1)
                .env("FERROCX_TIMEOUT", "30");
            let out = run_commands(vec![c], Duration::from_secs(90)).remove(0);
            (out, root, "net-socket")
        }
        None => {
            let root = format!("127.0.0.1:{}", free_port());
            let mut c = mpirun_command(&mpirun);
            c.args(["-np", "2", WORKER])
                .args(PAIRS)
                .env("FERROCX_COMM_ID", &root)
                .env(debug.0, debug.1)
                .env("FERROCX_TIMEOUT", "30");
            let out = run_commands(vec![c], Duration::from_secs(90)).remove(0);
            (out, root, "shm")
        }
    };
    eprintln!(
        "mpirun, 2 ranks over {transport}: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    check_mpirun(&out, &root, transport);
}

/// Two processes with torchrun's variables only: rank and size from `RANK` and
/// `WORLD_SIZE`, the rendezvous at `MASTER_ADDR` on port `MASTER_PORT + 1`
/// (torch's own store owns `MASTER_PORT`).
#[test]
fn torchrun_variables_launch_two_ranks() {
    let port = free_port();
    let master_port = (port - 1).to_string();
    let root = format!("127.0.0.1:{port}");
    let cmds = (0..2)
        .map(|r| {
            let mut c = Command::new(WORKER);
            clean(&mut c);
            c.args(PAIRS)
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("LOCAL_RANK", r.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &master_port)
                .env("FERROCX_DEBUG", "warn,ferrocx::comm=debug")
                .env("FERROCX_TIMEOUT", "30");
            c
        })
        .collect();
    let t = Instant::now();
    let outs = run_commands(cmds, Duration::from_secs(90));
    eprintln!(
        "torchrun variables, 2 ranks: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_all_ok(&outs);
    for o in &outs {
        let r = o.rank;
        assert!(
            o.stdout.contains(&format!("PASS rank {r}: sizes"))
                && o.stdout.contains("verified with every peer"),
            "rank {r}:\n{}\n{}",
            o.stdout,
            o.stderr
        );
        assert!(
            o.stderr
                .contains(&format!("launch from torchrun: rank {r} of 2 at {root}")),
            "rank {r} did not take its rank and rendezvous from torchrun's variables:\n{}",
            o.stderr
        );
    }
}
