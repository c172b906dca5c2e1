//! Integration tests of the `fxrun` binary.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

const FXRUN: &str = env!("CARGO_BIN_EXE_fxrun");

/// An fxrun command with a short kill grace and no inherited comm id or secret.
fn fxrun(args: &[&str]) -> Command {
    let mut c = Command::new(FXRUN);
    c.args(args)
        .env("FXRUN_KILL_GRACE", "1")
        .env_remove("FERROCX_COMM_ID")
        .env_remove("FERROCX_SECRET")
        .env_remove("FERROCX_SECRET_FILE")
        .stdin(Stdio::null());
    c
}

fn run(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = fxrun(args).output().expect("run fxrun");
    (out, start.elapsed())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh empty directory under the system temp dir.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fxrun-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; no memory is involved.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn ranks_get_variables_and_prefixed_output() {
    let (out, _) = run(&[
        "-n",
        "3",
        "sh",
        "-c",
        "echo hello $FERROCX_RANK of $FERROCX_NRANKS $FERROCX_LOCAL_RANK $FERROCX_LOCAL_NRANKS; \
         echo oops $FERROCX_RANK >&2; printf 'no newline'",
    ]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "[0] hello 0 of 3 0 3",
            "[0] no newline",
            "[1] hello 1 of 3 1 3",
            "[1] no newline",
            "[2] hello 2 of 3 2 3",
            "[2] no newline",
        ]
    );
    let stderr = text(&out.stderr);
    for r in 0..3 {
        assert!(stderr.contains(&format!("[{r}] oops {r}\n")), "{stderr}");
    }
}

#[test]
fn output_is_binary_safe() {
    let (out, _) = run(&["-n", "1", "printf", "\\377\\000x\\n"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"[0] \xff\x00x\n");
}

#[test]
fn comm_id_is_shared_and_valid() {
    let (out, _) = run(&["-n", "4", "sh", "-c", "echo $FERROCX_COMM_ID"]);
    assert_eq!(out.status.code(), Some(0));
    let ids: BTreeSet<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split_once("] ").unwrap().1.to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let addr: SocketAddr = ids.first().unwrap().parse().unwrap();
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0);

    // Passed through from --comm-id, and from the environment.
    let (out, _) = run(&[
        "-n",
        "2",
        "--comm-id",
        "10.1.2.3:29500",
        "sh",
        "-c",
        "echo $FERROCX_COMM_ID",
    ]);
    assert_eq!(text(&out.stdout).matches("10.1.2.3:29500").count(), 2);
    let out = fxrun(&["-n", "2", "sh", "-c", "echo $FERROCX_COMM_ID"])
        .env("FERROCX_COMM_ID", "node7:1234")
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).matches("node7:1234").count(), 2);
}

/// What each rank printed, without the `[rank] ` prefixes, by rank.
fn per_rank(out: &Output) -> Vec<String> {
    let mut lines: Vec<(String, String)> = text(&out.stdout)
        .lines()
        .map(|l| {
            let (r, v) = l.split_once("] ").unwrap();
            (r.to_owned(), v.to_owned())
        })
        .collect();
    lines.sort();
    lines.into_iter().map(|(_, v)| v).collect()
}

#[test]
fn each_job_gets_its_own_secret_shared_by_its_ranks() {
    let show = [
        "-n",
        "2",
        "sh",
        "-c",
        "echo \"$FERROCX_SECRET|$FERROCX_SECRET_FILE\"",
    ];
    let (a, _) = run(&show);
    let (b, _) = run(&show);
    assert_eq!(a.status.code(), Some(0), "{}", text(&a.stderr));
    let (a, b) = (per_rank(&a), per_rank(&b));
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0], a[1], "both ranks of a job hold one secret");
    assert_eq!(b[0], b[1]);
    let secret = a[0].strip_suffix('|').expect("no secret file");
    assert_eq!(secret.len(), 64, "32 random bytes as hex: {secret}");
    assert!(secret.bytes().all(|c| c.is_ascii_hexdigit()), "{secret}");
    assert_ne!(a[0], b[0], "two jobs, two secrets");

    // The user's choice is passed through as it is.
    let out = fxrun(&show).env("FERROCX_SECRET", "mine").output().unwrap();
    assert_eq!(per_rank(&out), ["mine|", "mine|"]);
    let out = fxrun(&show)
        .env("FERROCX_SECRET_FILE", "/etc/job.key")
        .output()
        .unwrap();
    assert_eq!(per_rank(&out), ["|/etc/job.key", "|/etc/job.key"]);
}

#[test]
fn failing_rank_tears_down_the_rest() {
    let (out, took) = run(&[
        "-n",
        "3",
        "sh",
        "-c",
        "if [ $FERROCX_RANK = 2 ]; then echo bye; exit 3; fi; exec sleep 30",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("fxrun: rank 2 exited with status 3"),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout), "[2] bye\n");
}

#[test]
fn rank_killed_by_signal_is_reported() {
    let (out, took) = run(&[
        "-n",
        "2",
        "sh",
        "-c",
        "if [ $FERROCX_RANK = 1 ]; then kill -9 $$; fi; exec sleep 30",
    ]);
    assert_eq!(out.status.code(), Some(128 + 9));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("fxrun: rank 1 killed by signal 9 (SIGKILL)"),
        "{stderr}"
    );
}

#[test]
fn rank_ignoring_sigterm_is_killed_after_grace() {
    let dir = scratch("grace");
    // Rank 1 ignores SIGTERM, then signals readiness; rank 0 fails once it is ready.
    let script = format!(
        "ready={}/ready; if [ $FERROCX_RANK = 0 ]; then \
           while [ ! -e $ready ]; do sleep 0.01; done; exit 1; fi; \
         trap '' TERM; touch $ready; sleep 30",
        dir.display()
    );
    let (out, took) = run(&["-n", "2", "sh", "-c", &script]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(
        text(&out.stderr).contains("SIGKILL"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sigint_reaches_all_ranks() {
    let dir = scratch("sigint");
    let script = format!(
        "echo $$ > {}/pid.$FERROCX_RANK; exec sleep 30",
        dir.display()
    );
    let start = Instant::now();
    let mut child = fxrun(&["-n", "3", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = |r: usize| dir.join(format!("pid.{r}"));
    let pids: Vec<i32> = (0..3)
        .map(|r| loop {
            if let Some(pid) = std::fs::read_to_string(pid_file(r))
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "ranks did not start"
            );
            sleep(Duration::from_millis(10));
        })
        .collect();
    assert!(pids.iter().all(|&p| alive(p)));

    let fx = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: plain kill(2) of the fxrun child we just spawned.
    assert_eq!(unsafe { libc::kill(fx, libc::SIGINT) }, 0);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("fxrun did not exit after SIGINT");
        }
        sleep(Duration::from_millis(10));
    };
    assert!(!status.success());
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    for pid in pids {
        assert!(!alive(pid), "rank process {pid} survived");
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("SIGINT"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timeout_kills_everything() {
    let (out, took) = run(&["-n", "2", "--timeout", "0.3", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(text(&out.stderr).contains("timeout"));
}

#[test]
fn usage_errors_exit_2() {
    for (args, needle) in [
        (&[][..], "missing -n"),
        (&["sh"], "missing -n"),
        (&["-n", "0", "sh"], "at least 1"),
        (&["-n", "two", "sh"], "invalid number of ranks"),
        (&["-n", "2"], "no command"),
        (&["-n", "2", "--frobnicate", "sh"], "unknown option"),
        (&["-n", "2", "--comm-id", "nohostport", "sh"], "HOST:PORT"),
        (
            &["-n", "2", "fxrun-no-such-command"],
            "fxrun-no-such-command",
        ),
        (&["-n", "2", "/no/such/dir/prog"], "/no/such/dir/prog"),
    ] {
        let (out, _) = run(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn help_prints_usage() {
    for flag in ["-h", "--help"] {
        let (out, _) = run(&[flag]);
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out.stdout).starts_with("Usage: fxrun -n N"));
    }
}

#[test]
fn bind_core_puts_each_rank_on_its_own_cpu() {
    let cpus = ferrocx_tools::launch::affinity::allowed_cpus().expect("affinity");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fxrun"))
        .args([
            "-n",
            "2",
            "--bind",
            "core",
            "--",
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/self/status",
        ])
        .output()
        .expect("run fxrun");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for rank in 0..2 {
        let want = cpus[rank % cpus.len()].to_string();
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("[{rank}] ")))
            .unwrap_or_else(|| panic!("no line from rank {rank}: {text}"));
        assert_eq!(
            line.split_whitespace().last(),
            Some(want.as_str()),
            "{text}"
        );
    }
}

#[test]
fn keep_going_lets_the_other_ranks_finish() {
    let (out, _) = run(&[
        "-n",
        "3",
        "--keep-going",
        "sh",
        "-c",
        "if [ $FERROCX_RANK = 2 ]; then exit 3; fi; sleep 0.5; echo done $FERROCX_STATUS_SIGNAL",
    ]);
    assert_eq!(out.status.code(), Some(3), "the first failure's status");
    let stdout = text(&out.stdout);
    for r in 0..2 {
        assert!(stdout.contains(&format!("[{r}] done 1")), "{stdout}");
    }
}

#[test]
fn sigusr1_reaches_rank_0_only() {
    let dir = scratch("usr1");
    let script = format!(
        "trap 'echo usr1 $FERROCX_RANK; exit 0' USR1; echo $$ > {}/pid.$FERROCX_RANK; \
         i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; echo no signal $FERROCX_RANK",
        dir.display()
    );
    let start = Instant::now();
    let child = fxrun(&["-n", "2", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for r in 0..2 {
        while !dir.join(format!("pid.{r}")).exists() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "ranks did not start"
            );
            sleep(Duration::from_millis(10));
        }
    }
    let fx = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: plain kill(2) of the fxrun child we just spawned.
    assert_eq!(unsafe { libc::kill(fx, libc::SIGUSR1) }, 0);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("[0] usr1 0"), "{stdout}");
    assert!(stdout.contains("[1] no signal 1"), "{stdout}");
    assert!(
        text(&out.stderr).contains("asked rank 0 for a status report"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
