//! Bootstrap authentication across real rank processes (issue 16): a job whose ranks
//! share a secret completes its collectives (and a split's fresh rendezvous) while
//! strangers knocking at its root are refused, and a rank given another secret fails with
//! the authentication error rather than a timeout.

use ferrocx::bootstrap::Bootstrap;
use ferrocx::Error;
use ferrocx_tests::{assert_all_ok, free_port, rank_commands, run_commands, shm_leftovers};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_fxtest-worker");
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_job_with_a_secret_completes_while_strangers_are_refused() {
    let root = format!("127.0.0.1:{}", free_port());
    let secret = "the secret of this job only";
    // Ranks 2 and 3 read the same secret from a file (with the newline `echo` adds).
    let dir = std::env::temp_dir().join(format!("fx-auth-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("job.key");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let env = [("FERROCX_SECRET", secret), ("FERROCX_TIMEOUT", "60")];
    // `split` on 4 ranks: all-reduce on the job, then a 2-rank communicator of its own.
    let mut cmds = rank_commands(WORKER, 4, &["split"], &env, &root);
    for c in &mut cmds[2..] {
        c.env_remove("FERROCX_SECRET")
            .env("FERROCX_SECRET_FILE", &file);
    }
    // Rank 3 starts only once the strangers have been turned away: the root is still
    // waiting for it then, so they meet the root for sure.
    let last = cmds.pop().unwrap();
    let first = std::thread::spawn(move || run_commands(cmds, LIMIT));

    // A stranger without the secret (a thread of this process, with its own bootstrap)
    // claiming the missing rank: refused, and it learns why.
    let t = Instant::now();
    let e = Bootstrap::init(&root, 3, 4, -1, Duration::from_secs(30), None)
        .err()
        .expect("a stranger without the secret must not get in");
    assert!(
        matches!(&e, Error::Auth(m) if m.contains("has a job secret and this process has none")),
        "{e}"
    );
    // A stranger with another secret, as a real rank process: the authentication error
    // (not a timeout), from the root's failed proof.
    let mut intruder = rank_commands(WORKER, 4, &["split"], &env, &root)
        .pop()
        .unwrap();
    intruder.env("FERROCX_SECRET", "a guess");
    let out = run_commands(vec![intruder], LIMIT).pop().unwrap();
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stdout.contains(&format!(
            "FAIL bootstrap authentication failed: the bootstrap root {root} does not know this rank's job secret"
        )),
        "{out:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());

    // The real rank 3; then every rank passes.
    let mut late = run_commands(vec![last], LIMIT);
    late[0].rank = 3;
    let mut outs = first.join().unwrap();
    outs.append(&mut late);
    for o in &outs {
        eprintln!("--- rank {}:\n{}{}", o.rank, o.stdout, o.stderr);
    }
    assert_all_ok(&outs);
    for o in &outs {
        assert!(o.stdout.contains("PASS"), "rank {}: {}", o.rank, o.stdout);
    }
    assert!(outs[0].stdout.contains("in color 0"), "{}", outs[0].stdout);
    // The root said whom it refused, and why.
    let warned = &outs[0].stderr;
    for why in [
        "it claims rank 3 but has no job secret and this job has one",
        "it claims rank 3 but refused our answer to its challenge: its job secret differs from ours",
    ] {
        let line = warned
            .lines()
            .find(|l| l.contains(why))
            .unwrap_or_else(|| panic!("rank 0 did not warn {why:?}:\n{warned}"));
        assert!(
            line.contains("bootstrap root refused a connection from 127.0.0.1:"),
            "{line}"
        );
    }
    // With a secret there is no warning about running without one.
    assert!(
        outs.iter()
            .all(|o| !o.stderr.contains("no job secret (FERROCX_SECRET")),
        "{outs:?}"
    );
    let pids: Vec<u32> = outs.iter().map(|o| o.pid).collect();
    assert_eq!(shm_leftovers(&pids), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_secret_file_that_cannot_be_read_is_a_configuration_error() {
    let root = format!("127.0.0.1:{}", free_port());
    let missing = std::env::temp_dir().join(format!("fx-no-such-key-{}", std::process::id()));
    let path = missing.to_str().unwrap();
    let mut cmds = rank_commands(WORKER, 1, &["split"], &[], &root);
    cmds[0]
        .env_remove("FERROCX_SECRET")
        .env("FERROCX_SECRET_FILE", path);
    let out = run_commands(cmds, LIMIT).pop().unwrap();
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stdout.contains(&format!(
            "FAIL bad configuration FERROCX_SECRET_FILE: cannot read the job secret file {path}: "
        )),
        "{out:?}"
    );
}

#[test]
fn without_a_secret_a_job_runs_and_each_rank_warns_once() {
    let root = format!("127.0.0.1:{}", free_port());
    // `split` makes a second rendezvous: still one warning per process.
    let mut cmds = rank_commands(WORKER, 4, &["split"], &[("FERROCX_TIMEOUT", "60")], &root);
    for c in &mut cmds {
        c.env_remove("FERROCX_SECRET");
    }
    let outs = run_commands(cmds, LIMIT);
    assert_all_ok(&outs);
    let warning = format!(
        "no job secret (FERROCX_SECRET / FERROCX_SECRET_FILE): any process that can reach {root} can join or \
         stall this job"
    );
    for o in &outs {
        assert_eq!(
            o.stderr.matches("no job secret (FERROCX_SECRET").count(),
            1,
            "rank {}: {}",
            o.rank,
            o.stderr
        );
        if o.rank > 0 {
            assert!(o.stderr.contains(&warning), "rank {}: {}", o.rank, o.stderr);
        }
    }
    // Rank 0 names the address it listens at (the same host and port).
    assert!(outs[0].stderr.contains(&warning), "{}", outs[0].stderr);
}
