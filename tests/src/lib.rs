//! Helpers for the multi-process integration tests: start N real rank
//! processes of the `fxtest-worker` binary, bounded in time, and collect
//! their outputs; locate (building if needed) plugin `.so` files.

pub mod cprog;
pub mod netns;
pub mod soak;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one rank did.
#[derive(Debug)]
pub struct RankOutput {
    /// Rank.
    pub rank: usize,
    /// Process id.
    pub pid: u32,
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl RankOutput {
    /// Exit code 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// A free 127.0.0.1 port (bound then released).
pub fn free_port() -> u16 {
    // Below Linux's ephemeral range (32768–60999 by default): a port the kernel
    // handed out for `bind(0)` is free again once the listener closes, and
    // any rank's own ephemeral sockets (connections, data listeners) may take
    // it before the bootstrap root binds it ("Address already in use", seen
    // in CI). Random, so that tests running at once rarely pick alike; checked
    // free on every address the root listens on. Never the same port twice in one
    // process: two jobs of one test binary drawing one port is the likeliest reading of
    // a CI failure where a rank joined another job's root, which then closed.
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for attempt in 0u64..1000 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(attempt);
        h.write_u32(std::process::id());
        let port = 20_000 + (h.finish() % 12_000) as u16;
        if given.contains(&port) {
            continue;
        }
        // One listener at a time (the first, alive, would block the second).
        let any = std::net::TcpListener::bind(("0.0.0.0", port)).is_ok();
        let local = any && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if local {
            given.push(port);
            return port;
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Start `n` ranks of `worker args`, with `env` added, and wait at most `limit`.
/// Ranks still running at the limit are killed (the test then fails on their code).
pub fn run_ranks(
    worker: &str,
    n: usize,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> Vec<RankOutput> {
    // The port is free when picked but not held: another job's root can
    // take it before this one's binds (seen in CI, once in a few hundred
    // jobs). Such a run never started the job, so it is run again.
    for _ in 0..3 {
        let root = format!("127.0.0.1:{}", free_port());
        let outs = run_commands(rank_commands(worker, n, args, env, &root), limit);
        let taken = outs.iter().any(|o| {
            o.stdout.contains("cannot listen on") && o.stdout.contains("Address already in use")
        });
        if !taken {
            return outs;
        }
        eprintln!("bootstrap port {root} was taken meanwhile: running the job again");
    }
    panic!("three bootstrap ports in a row were taken before the root bound them");
}

/// The commands of `n` ranks of `worker args` meeting at `root`, as `fxrun` would
/// start them (one fresh `FERROCX_SECRET` for the job), with `env` added last.
pub fn rank_commands(
    worker: &str,
    n: usize,
    args: &[&str],
    env: &[(&str, &str)],
    root: &str,
) -> Vec<Command> {
    let secret = job_secret();
    (0..n)
        .map(|r| {
            let mut c = Command::new(worker);
            c.args(args)
                .env("FERROCX_COMM_ID", root)
                .env("FERROCX_RANK", r.to_string())
                .env("FERROCX_NRANKS", n.to_string())
                .env("FERROCX_LOCAL_RANK", r.to_string())
                .env("FERROCX_SECRET", &secret)
                .env_remove("FERROCX_SECRET_FILE");
            clear_selection_env(&mut c);
            for (k, v) in env {
                c.env(k, v);
            }
            c
        })
        .collect()
}

/// A job secret no other job of this test run shares (uniqueness is all a test needs;
/// fxrun draws its secrets from the OS random source).
pub fn job_secret() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static JOBS: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "fxtest-{}-{}-{}",
        std::process::id(),
        now.as_nanos(),
        JOBS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Remove the transport selection variables a developer's shell may hold, so a
/// test sees the defaults unless it sets them.
pub fn clear_selection_env(c: &mut Command) {
    c.env_remove("FERROCX_TRANSPORTS")
        .env_remove("FERROCX_COLLECTIVES")
        .env_remove("FERROCX_PLUGINS")
        .env_remove("FERROCX_PLUGIN_PATH")
        .env_remove("FERROCX_BUILTIN_PLUGINS");
}

/// Start every command (command `i` is rank `i`) with piped output, and wait at
/// most `limit` for all of them. Commands still running at the limit are killed
/// (the test then fails on their code).
pub fn run_commands(cmds: Vec<Command>, limit: Duration) -> Vec<RankOutput> {
    let n = cmds.len();
    let mut children: Vec<(usize, Child)> = cmds
        .into_iter()
        .enumerate()
        .map(|(r, mut c)| {
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
            (r, c.spawn().expect("spawn worker"))
        })
        .collect();
    // Drain pipes in threads so a chatty rank cannot block on a full pipe.
    let mut readers = Vec::new();
    for (r, c) in children.iter_mut() {
        let mut so = c.stdout.take().expect("stdout");
        let mut se = c.stderr.take().expect("stderr");
        let r = *r;
        readers.push(std::thread::spawn(move || {
            use std::io::Read;
            let (mut a, mut b) = (String::new(), String::new());
            let t = std::thread::spawn(move || {
                let _ = se.read_to_string(&mut b);
                b
            });
            let _ = so.read_to_string(&mut a);
            (r, a, t.join().unwrap_or_default())
        }));
    }
    let start = Instant::now();
    let mut codes: Vec<Option<Option<i32>>> = vec![None; n];
    let pids: Vec<u32> = children.iter().map(|(_, c)| c.id()).collect();
    while codes.iter().any(|c| c.is_none()) {
        for (r, c) in children.iter_mut() {
            if codes[*r].is_none() {
                if let Ok(Some(st)) = c.try_wait() {
                    codes[*r] = Some(st.code());
                }
            }
        }
        if start.elapsed() > limit {
            for (r, c) in children.iter_mut() {
                if codes[*r].is_none() {
                    let _ = c.kill();
                    let _ = c.wait();
                    codes[*r] = Some(None);
                    eprintln!("rank {r} killed: still running after {limit:?}");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut outs: Vec<RankOutput> = readers
        .into_iter()
        .map(|h| {
            let (rank, stdout, stderr) = h.join().expect("reader");
            RankOutput {
                rank,
                pid: pids[rank],
                code: codes[rank].flatten(),
                stdout,
                stderr,
            }
        })
        .collect();
    outs.sort_by_key(|o| o.rank);
    outs
}

/// Run 3 ranks of `ring-loop` over 8 MiB messages, kill rank 1 after
/// 400 ms, and check that it died by SIGKILL and that both survivors fail
/// with an error naming rank 1 within `FERROCX_TIMEOUT` = `timeout_s`
/// (`env` adds variables, e.g. the transport). Returns the outputs.
pub fn killed_rank_is_named(worker: &str, env: &[(&str, &str)], timeout_s: u64) -> Vec<RankOutput> {
    killed_rank_is_named_at(worker, "8388608", env, timeout_s)
}

/// [`killed_rank_is_named`] over messages of `bytes`.
pub fn killed_rank_is_named_at(
    worker: &str,
    bytes: &str,
    env: &[(&str, &str)],
    timeout_s: u64,
) -> Vec<RankOutput> {
    let timeout = timeout_s.to_string();
    let mut vars: Vec<(&str, &str)> = env.to_vec();
    vars.push(("FERROCX_TIMEOUT", &timeout));
    let start = std::time::Instant::now();
    let args = [
        "ring-loop",
        bytes,
        "--victim",
        "1",
        "--kill-after-ms",
        "400",
    ];
    let outs = run_ranks(worker, 3, &args, &vars, std::time::Duration::from_secs(90));
    let elapsed = start.elapsed();
    let victim = &outs[1];
    assert_eq!(
        victim.code, None,
        "the victim should have died by SIGKILL: {victim:?}"
    );
    for o in outs.iter().filter(|o| o.rank != 1) {
        assert!(
            o.ok() && o.stdout.contains("rank 1"),
            "survivor rank {} did not report the failure of rank 1:\n{}\n{}",
            o.rank,
            o.stdout,
            o.stderr
        );
    }
    assert!(
        elapsed < std::time::Duration::from_secs(timeout_s),
        "survivors took {elapsed:?}, longer than FERROCX_TIMEOUT"
    );
    outs
}

/// Run a `fxtest-worker` scenario on `n` ranks, echo their output to stderr, and
/// require that every rank exited 0 having printed `PASS` and that no shared
/// memory was left behind.
pub fn run_passing(
    worker: &str,
    n: usize,
    args: &[&str],
    env: &[(&str, &str)],
    limit: std::time::Duration,
) -> Vec<RankOutput> {
    let t = std::time::Instant::now();
    let outs = run_ranks(worker, n, args, env, limit);
    eprintln!("{args:?} on {n} ranks: {:.1} s", t.elapsed().as_secs_f64());
    for o in &outs {
        for line in o.stdout.lines() {
            eprintln!("  [{}] {line}", o.rank);
        }
    }
    assert_all_ok(&outs);
    for o in &outs {
        assert!(o.stdout.contains("PASS"), "rank {}: {}", o.rank, o.stdout);
    }
    let pids: Vec<u32> = outs.iter().map(|o| o.pid).collect();
    assert_eq!(
        shm_leftovers(&pids),
        Vec::<String>::new(),
        "shared memory left behind"
    );
    outs
}

/// Panic with every rank's output unless all exited 0.
pub fn assert_all_ok(outs: &[RankOutput]) {
    if outs.iter().all(RankOutput::ok) {
        return;
    }
    let mut msg = String::from("some ranks failed:\n");
    for o in outs {
        msg.push_str(&format!(
            "--- rank {} (pid {}) exit {:?}\nstdout:\n{}\nstderr:\n{}\n",
            o.rank, o.pid, o.code, o.stdout, o.stderr
        ));
    }
    panic!("{msg}");
}

/// `/dev/shm` entries that ferrocx made for any of these pids.
pub fn shm_leftovers(pids: &[u32]) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| pids.iter().any(|p| n.starts_with(&format!("ferrocx-{p}-"))))
        .collect()
}

/// The workspace's target directory (from the test executable's location).
pub fn target_dir() -> PathBuf {
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    let exe = std::env::current_exe().expect("exe");
    // target/<profile>/deps/<test> → target
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

static BUILD: Mutex<()> = Mutex::new(());

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Path of the shm transport as a loadable `.so` (see [`plugin_so`]).
pub fn shm_plugin_so() -> PathBuf {
    plugin_so("ferrocx-plugin-shm", "libferrocx_plugin_shm.so")
}

/// Path of a plugin's cdylib (`package`, giving `file`), built into a separate
/// target directory (so this cannot contend with the running cargo's lock).
pub fn plugin_so(package: &str, file: &str) -> PathBuf {
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = target_dir().join("fx-plugins");
    let so = dir.join("release").join(file);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", package, "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&dir)
        .status()
        .unwrap_or_else(|e| panic!("run cargo to build {package}: {e}"));
    assert!(st.success(), "building {file} failed");
    assert!(so.exists(), "{} missing after build", so.display());
    so
}

/// Compile a C source into a shared library in a temp dir; `None` when no C compiler exists.
pub fn compile_c_plugin(src: &Path, name: &str) -> Option<PathBuf> {
    compile_c_plugin_with(src, name, &[])
}

/// As [`compile_c_plugin`], with extra compiler flags (e.g. `-DBAD_SIZE`).
pub fn compile_c_plugin_with(src: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = std::env::temp_dir().join(format!("fx-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let out = dir.join(format!("lib{name}.so"));
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/include");
    let st = Command::new(&cc)
        .args(["-std=c99", "-O2", "-Wall", "-fPIC", "-shared", "-o"])
        .arg(&out)
        .arg(src)
        .args(flags)
        .arg(format!("-I{}", inc.display()))
        .status();
    match st {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("compiling {} failed: {s}", src.display()),
        Err(e) => {
            eprintln!("skipped: no C compiler ({cc}: {e}); set CC");
            None
        }
    }
}

/// Path of the net-socket transport as a loadable `.so`, built like
/// [`shm_plugin_so`] into the separate `fx-plugins` target directory.
pub fn net_socket_plugin_so() -> PathBuf {
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = target_dir().join("fx-plugins");
    let so = dir.join("release").join("libferrocx_plugin_net_socket.so");
    let manifest = repo_root().join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "ferrocx-plugin-net-socket",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&dir)
        .status()
        .expect("run cargo to build the net-socket plugin");
    assert!(
        st.success(),
        "building libferrocx_plugin_net_socket.so failed"
    );
    assert!(so.exists(), "{} missing after build", so.display());
    so
}
