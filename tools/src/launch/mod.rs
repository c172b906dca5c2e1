//! Local multi-rank launcher: the engine behind `fxrun` and `fxperf --np N`.
//!
//! [`run_ranks`] starts N copies of a command on this host with the ferrocx rank variables
//! and a fresh job secret set, prefixes their output with `[rank] `, forwards SIGINT/SIGTERM/SIGHUP to them, tears
//! everything down when one rank fails, and returns the exit code the launcher should exit
//! with.
//!
//! Each rank runs in its own process group. A terminal's Ctrl-C therefore reaches only the
//! launcher, which forwards it to every rank's group exactly once (grandchildren such as a
//! `sh -c` pipeline included). Only rank 0 gets the launcher's stdin, and only when stdin is
//! not a terminal (a rank outside the foreground group reading the terminal would be
//! stopped); the other ranks read /dev/null.

use std::ffi::{OsStr, OsString};
use std::io::{self, IsTerminal};
use std::net::TcpListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub mod affinity;
mod output;
mod signals;

pub use signals::signal_name;

/// Grace between SIGTERM and SIGKILL when tearing ranks down, unless `FXRUN_KILL_GRACE`
/// or [`LaunchOptions::kill_grace`] says otherwise.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

/// Exit code when [`LaunchOptions::timeout`] is exceeded (as timeout(1)).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// Environment variable overriding the kill grace, in seconds (fractions allowed).
pub const KILL_GRACE_ENV: &str = "FXRUN_KILL_GRACE";

/// How often the supervisor polls ranks, signals and deadlines.
const POLL: Duration = Duration::from_millis(10);

/// How long to wait for a failed rank's last output before reporting its failure.
const FAILED_OUTPUT_WAIT: Duration = Duration::from_millis(200);

/// How long to wait, once every rank has exited, for output still held open by
/// grandchildren before returning anyway.
const FINAL_OUTPUT_WAIT: Duration = Duration::from_secs(1);

/// Options of [`run_ranks`]; `Default` gives the behaviour of a plain `fxrun -n N CMD`.
#[derive(Clone, Debug, Default)]
pub struct LaunchOptions {
    /// `FERROCX_COMM_ID` given to every rank. `None`: the launcher's own `FERROCX_COMM_ID`
    /// if set and non-empty, else `127.0.0.1:<free port>`.
    pub comm_id: Option<OsString>,
    /// Kill everything and return [`TIMEOUT_EXIT_CODE`] when the ranks run longer.
    pub timeout: Option<Duration>,
    /// SIGTERM→SIGKILL grace on teardown. `None`: `FXRUN_KILL_GRACE` or 3 s.
    pub kill_grace: Option<Duration>,
    /// Extra environment for every rank (the `FERROCX_*` rank variables win over these).
    pub env: Vec<(OsString, OsString)>,
    /// Pass rank output through unchanged instead of prefixing lines with `[rank] `.
    pub raw_output: bool,
    /// CPU binding of the ranks (see [`affinity::Bind`]).
    pub bind: affinity::Bind,
    /// A rank that fails does not stop the others (for programs that go on without
    /// it, `Communicator::shrink`); the exit status is still the first failure's.
    pub keep_going: bool,
}

/// Bytes of OS randomness in a job secret made by [`job_secret`].
pub const SECRET_BYTES: usize = 32;

/// The `FERROCX_SECRET` to give the ranks of one job: `None` when the user already chose
/// one (`FERROCX_SECRET` or `FERROCX_SECRET_FILE`, non-blank, in this process's
/// environment or in `extra`), which the ranks then inherit as they are; else
/// [`SECRET_BYTES`] fresh bytes from the OS random source, as hex.
pub fn job_secret(extra: &[(OsString, OsString)]) -> io::Result<Option<String>> {
    use std::os::unix::ffi::OsStrExt;
    let chosen = |v: &OsStr| !v.as_bytes().trim_ascii().is_empty();
    for var in [
        ferrocx::config::SECRET_VAR,
        ferrocx::config::SECRET_FILE_VAR,
    ] {
        let in_extra = extra.iter().any(|(k, v)| k == var && chosen(v));
        if in_extra || std::env::var_os(var).is_some_and(|v| chosen(&v)) {
            return Ok(None);
        }
    }
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| {
        io::Error::other(format!("no job secret: the OS random source failed: {e}"))
    })?;
    Ok(Some(bytes.iter().map(|b| format!("{b:02x}")).collect()))
}

/// A `FERROCX_COMM_ID` value on this host: `127.0.0.1:<port>` for a port that was free a
/// moment ago (bound to 127.0.0.1:0, then released).
pub fn free_comm_id() -> io::Result<String> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let port = listener.local_addr()?.port();
    drop(listener);
    Ok(format!("127.0.0.1:{port}"))
}

/// Checks that `s` looks like `HOST:PORT` (non-empty host, numeric port 1..=65535).
pub fn check_comm_id(s: &str) -> Result<(), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("invalid comm id `{s}`: expected HOST:PORT"))?;
    if host.is_empty() || host == "[]" {
        return Err(format!("invalid comm id `{s}`: empty host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(()),
        _ => Err(format!("invalid comm id `{s}`: bad port `{port}`")),
    }
}

/// The kill grace from `FXRUN_KILL_GRACE`, or [`DEFAULT_KILL_GRACE`] (with a warning if the
/// variable is set but unparsable).
pub fn kill_grace_from_env() -> Duration {
    let Some(raw) = std::env::var_os(KILL_GRACE_ENV) else {
        return DEFAULT_KILL_GRACE;
    };
    match parse_seconds(&raw.to_string_lossy()) {
        Some(d) => d,
        None => {
            eprintln!(
                "fxrun: ignoring {KILL_GRACE_ENV}={}: not a number of seconds",
                raw.to_string_lossy()
            );
            DEFAULT_KILL_GRACE
        }
    }
}

/// Parses a non-negative, finite number of seconds (`3`, `0.5`).
pub fn parse_seconds(s: &str) -> Option<Duration> {
    let v: f64 = s.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v))
}

/// Describes how a rank ended, for `fxrun: rank R <description>`.
pub fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(sig) = status.signal() {
        match signal_name(sig) {
            Some(name) => format!("killed by signal {sig} ({name})"),
            None => format!("killed by signal {sig}"),
        }
    } else {
        format!("ended with {status}")
    }
}

/// The launcher exit code for a failed rank: its exit code, or 128 + the signal.
pub fn status_exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

struct Rank {
    child: Child,
    pid: u32,
    /// Set once reaped (`Err` when the status could not be read).
    done: Option<Result<ExitStatus, ()>>,
    /// Output streams of this rank not yet at EOF.
    open_streams: Arc<AtomicUsize>,
}

impl Rank {
    fn running(&self) -> bool {
        self.done.is_none()
    }

    /// Waits up to `limit` for this rank's output pipes to reach EOF.
    fn wait_output(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while self.open_streams.load(Ordering::Acquire) > 0 && Instant::now() < until {
            thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Starts `n` local ranks of `cmd args…` and supervises them until all have exited.
///
/// Every rank gets `FERROCX_RANK`/`FERROCX_LOCAL_RANK` = its index, `FERROCX_NRANKS`/
/// `FERROCX_LOCAL_NRANKS` = `n`, one shared `FERROCX_COMM_ID` (see
/// [`LaunchOptions::comm_id`]) and one shared `FERROCX_SECRET` made for this call (see
/// [`job_secret`]). Returns the exit code the launcher should exit with:
/// 0 when every rank exited 0; the first failing rank's exit code (128 + signal if it was
/// killed) after the others have been torn down; [`TIMEOUT_EXIT_CODE`] on timeout; 128 +
/// signal when the launcher was interrupted and every rank still exited 0.
///
/// Errors are launch failures (no rank left running): `n == 0` (`InvalidInput`), a command
/// that cannot be started (`NotFound`, `PermissionDenied`, …, message naming the command),
/// or a failure to set up pipes, threads or signal handlers.
///
/// Installs SIGINT/SIGTERM/SIGHUP handlers for its duration and restores the previous ones
/// on return; do not run two calls concurrently in one process.
pub fn run_ranks(
    n: usize,
    cmd: &OsStr,
    args: &[OsString],
    opts: &LaunchOptions,
) -> io::Result<i32> {
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the number of ranks must be at least 1",
        ));
    }
    let comm_id: OsString = match &opts.comm_id {
        Some(c) => c.clone(),
        None => match std::env::var_os("FERROCX_COMM_ID") {
            Some(c) if !c.is_empty() => c,
            _ => free_comm_id()?.into(),
        },
    };
    let secret = job_secret(&opts.env)?;
    let grace = opts.kill_grace.unwrap_or_else(kill_grace_from_env);
    let _signals = signals::Guard::install()?;
    let stdin_to_rank0 = !io::stdin().is_terminal();

    let mut ranks: Vec<Rank> = Vec::with_capacity(n);
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    for i in 0..n {
        let ids = Ids {
            comm_id: &comm_id,
            secret: secret.as_deref(),
        };
        match spawn_rank(i, n, cmd, args, &ids, opts, stdin_to_rank0, &mut pumps) {
            Ok(rank) => ranks.push(rank),
            Err(e) => {
                for r in &mut ranks {
                    signals::signal_group(r.pid, libc::SIGKILL);
                    let _ = r.child.wait();
                }
                return Err(spawn_error(cmd, e));
            }
        }
    }
    let code = supervise(&mut ranks, opts.timeout, grace, opts.keep_going);

    let until = Instant::now() + FINAL_OUTPUT_WAIT;
    for r in &ranks {
        r.wait_output(until.saturating_duration_since(Instant::now()));
    }
    for p in pumps {
        if p.is_finished() {
            let _ = p.join();
        }
        // Otherwise a grandchild still holds the pipe open; leave the thread detached.
    }
    Ok(code)
}

/// Hardware work queues per CUDA context. A device operation makes the
/// user's stream wait (a polling kernel or a stream memory operation) while
/// copies on other streams complete it; with the driver's default of 8 queues
/// shared by every stream — and, under MPS, by every rank on the GPU — a copy
/// can land in a queue behind such a wait and never run (seen: two ranks on
/// one H100 under MPS stalled at 128 B until FERROCX_TIMEOUT). Ranks launched
/// here get more queues unless the variable is set; other launchers should
/// export it too (docs/ENV.md).
const CUDA_CONNECTIONS: &str = "CUDA_DEVICE_MAX_CONNECTIONS";
const CUDA_CONNECTIONS_DEFAULT: &str = "32";

/// Ranks print a status report on SIGUSR1 (docs/ERRORS.md) unless the user set it.
const STATUS_SIGNAL: &str = "FERROCX_STATUS_SIGNAL";

/// What every rank of one job shares.
struct Ids<'a> {
    comm_id: &'a OsStr,
    /// `None`: the user's `FERROCX_SECRET` / `FERROCX_SECRET_FILE` is inherited.
    secret: Option<&'a str>,
}

#[allow(clippy::too_many_arguments)]
fn spawn_rank(
    i: usize,
    n: usize,
    cmd: &OsStr,
    args: &[OsString],
    ids: &Ids<'_>,
    opts: &LaunchOptions,
    stdin_to_rank0: bool,
    pumps: &mut Vec<JoinHandle<()>>,
) -> io::Result<Rank> {
    let mut c = Command::new(cmd);
    if opts.bind != affinity::Bind::None {
        let cpus = opts.bind.cpus_for(i, n, &affinity::allowed_cpus()?);
        if !cpus.is_empty() {
            affinity::bind_to(&mut c, cpus);
        }
    }
    if std::env::var_os(CUDA_CONNECTIONS).is_none() {
        c.env(CUDA_CONNECTIONS, CUDA_CONNECTIONS_DEFAULT);
    }
    // `kill -USR1 <fxrun>` reaches rank 0, which prints where every rank is.
    if std::env::var_os(STATUS_SIGNAL).is_none() {
        c.env(STATUS_SIGNAL, "1");
    }
    if let Some(secret) = ids.secret {
        c.env(ferrocx::config::SECRET_VAR, secret);
    }
    c.args(args)
        .envs(opts.env.iter().map(|(k, v)| (k, v)))
        .env("FERROCX_RANK", i.to_string())
        .env("FERROCX_NRANKS", n.to_string())
        .env("FERROCX_LOCAL_RANK", i.to_string())
        .env("FERROCX_LOCAL_NRANKS", n.to_string())
        .env("FERROCX_COMM_ID", ids.comm_id)
        .process_group(0)
        .stdin(if i == 0 && stdin_to_rank0 {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    let streams = if opts.raw_output {
        c.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        0
    } else {
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        2
    };
    let mut child = c.spawn()?;
    let pid = child.id();
    let open_streams = Arc::new(AtomicUsize::new(streams));
    let mut start_pumps = || -> io::Result<()> {
        if let Some(out) = child.stdout.take() {
            let open = open_streams.clone();
            pumps.push(output::spawn_pump(i, out, output::Sink::Stdout, open)?);
        }
        if let Some(err) = child.stderr.take() {
            let open = open_streams.clone();
            pumps.push(output::spawn_pump(i, err, output::Sink::Stderr, open)?);
        }
        Ok(())
    };
    if let Err(e) = start_pumps() {
        signals::signal_group(pid, libc::SIGKILL);
        let _ = child.wait();
        return Err(e);
    }
    Ok(Rank {
        child,
        pid,
        done: None,
        open_streams,
    })
}

fn spawn_error(cmd: &OsStr, e: io::Error) -> io::Error {
    let name = cmd.to_string_lossy();
    let is_path = cmd.as_encoded_bytes().contains(&b'/');
    let msg = match e.kind() {
        io::ErrorKind::NotFound if !is_path => format!("`{name}`: command not found"),
        io::ErrorKind::NotFound => format!("`{name}`: no such file or directory"),
        _ => format!("cannot run `{name}`: {e}"),
    };
    io::Error::new(e.kind(), msg)
}

fn signal_running(ranks: &[Rank], sig: libc::c_int) -> usize {
    let mut count = 0;
    for r in ranks.iter().filter(|r| r.running()) {
        signals::signal_group(r.pid, sig);
        count += 1;
    }
    count
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Polls ranks, signals and deadlines until every rank has been reaped; returns the code.
fn supervise(
    ranks: &mut [Rank],
    timeout: Option<Duration>,
    grace: Duration,
    keep_going: bool,
) -> i32 {
    let deadline = timeout.map(|t| Instant::now() + t);
    // The exit code once decided (first failure or timeout).
    let mut outcome: Option<i32> = None;
    // First signal forwarded to the ranks, for the exit code of an interrupted clean run.
    let mut interrupted: Option<libc::c_int> = None;
    let mut signals_seen = 0u32;
    // Set when tearing down: when to escalate to SIGKILL.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;

    loop {
        // 1. Reap.
        for i in 0..ranks.len() {
            if !ranks[i].running() {
                continue;
            }
            let status = match ranks[i].child.try_wait() {
                Ok(None) => continue,
                Ok(Some(st)) => Ok(st),
                Err(e) => {
                    eprintln!("fxrun: rank {i}: cannot read exit status: {e}");
                    Err(())
                }
            };
            ranks[i].done = Some(status);
            let failed = status.map_or(true, |st| !st.success());
            if failed && outcome.is_none() {
                let code = match status {
                    Ok(st) => {
                        ranks[i].wait_output(FAILED_OUTPUT_WAIT);
                        eprintln!("fxrun: rank {i} {}", describe_status(st));
                        status_exit_code(st)
                    }
                    Err(()) => 1,
                };
                outcome = Some(code);
                if keep_going {
                    continue;
                }
                let left = signal_running(ranks, libc::SIGTERM);
                if left > 0 {
                    eprintln!("fxrun: terminating {left} remaining rank{}", plural(left));
                }
                kill_at.get_or_insert(Instant::now() + grace);
            }
        }
        if ranks.iter().all(|r| !r.running()) {
            break;
        }

        // 2. Forward signals received by the launcher.
        for (sig, count) in signals::take() {
            if sig == libc::SIGUSR1 {
                if ranks[0].running() {
                    signals::signal_group(ranks[0].pid, sig);
                    eprintln!("fxrun: got SIGUSR1; asked rank 0 for a status report");
                }
                continue;
            }
            signals_seen += count;
            interrupted.get_or_insert(sig);
            let name = signal_name(sig).unwrap_or("signal");
            if signals_seen >= 3 && !killed {
                let left = signal_running(ranks, libc::SIGKILL);
                eprintln!("fxrun: {name} again; killing {left} rank{}", plural(left));
                killed = true;
            } else if !killed {
                let left = signal_running(ranks, sig);
                eprintln!(
                    "fxrun: got {name}; forwarded to {left} rank{}",
                    plural(left)
                );
            }
        }

        // 3. Timeout.
        if let Some(d) = deadline {
            if outcome.is_none() && Instant::now() >= d {
                let left = signal_running(ranks, libc::SIGTERM);
                eprintln!(
                    "fxrun: timeout of {:?} exceeded; terminating {left} rank{}",
                    timeout.unwrap_or_default(),
                    plural(left)
                );
                outcome = Some(TIMEOUT_EXIT_CODE);
                kill_at.get_or_insert(Instant::now() + grace);
            }
        }

        // 4. Escalate after the grace.
        if let Some(at) = kill_at {
            if !killed && Instant::now() >= at {
                let left = signal_running(ranks, libc::SIGKILL);
                eprintln!(
                    "fxrun: {left} rank{} still running after {grace:?}; sending SIGKILL",
                    plural(left)
                );
                killed = true;
            }
        }

        thread::sleep(POLL);
    }

    match (outcome, interrupted) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_id_checks() {
        assert!(check_comm_id("127.0.0.1:29500").is_ok());
        assert!(check_comm_id("node-1:1").is_ok());
        assert!(check_comm_id("[::1]:80").is_ok());
        assert!(check_comm_id("127.0.0.1").is_err());
        assert!(check_comm_id(":80").is_err());
        assert!(check_comm_id("h:0").is_err());
        assert!(check_comm_id("h:70000").is_err());
        assert!(check_comm_id("h:x").is_err());
    }

    #[test]
    fn free_comm_id_is_loopback() {
        let id = free_comm_id().unwrap();
        let addr: std::net::SocketAddr = id.parse().unwrap();
        assert!(addr.ip().is_loopback());
        assert_ne!(addr.port(), 0);
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_seconds(" 0.25 "), Some(Duration::from_millis(250)));
        assert_eq!(parse_seconds("0"), Some(Duration::ZERO));
        assert_eq!(parse_seconds("-1"), None);
        assert_eq!(parse_seconds("inf"), None);
        assert_eq!(parse_seconds("x"), None);
    }

    #[test]
    fn status_codes() {
        // Raw wait statuses: exit code in bits 8..16, terminating signal in the low bits.
        let exited = ExitStatus::from_raw(3 << 8);
        assert_eq!(status_exit_code(exited), 3);
        assert_eq!(describe_status(exited), "exited with status 3");
        let killed = ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(status_exit_code(killed), 128 + libc::SIGKILL);
        assert_eq!(describe_status(killed), "killed by signal 9 (SIGKILL)");
    }

    #[test]
    fn zero_ranks_is_invalid() {
        let e = run_ranks(0, OsStr::new("true"), &[], &LaunchOptions::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
