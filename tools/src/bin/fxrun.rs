//! `fxrun`: start N local ranks of a command with the ferrocx rank variables set.
//!
//! The work is done by [`ferrocx_tools::launch::run_ranks`]; this file is the command line.

use std::ffi::{OsStr, OsString};
use std::io;
use std::process::exit;
use std::time::Duration;

use ferrocx_tools::launch::{
    check_comm_id, parse_seconds, run_ranks, LaunchOptions, DEFAULT_KILL_GRACE, KILL_GRACE_ENV,
    TIMEOUT_EXIT_CODE,
};

/// Exit code for usage errors and commands that cannot be started.
const USAGE_EXIT: i32 = 2;

fn usage() -> String {
    format!(
        "\
Usage: fxrun -n N [OPTIONS] [--] CMD [ARGS...]

Start N ranks of CMD on this host, for ferrocx programs.

Each rank gets FERROCX_RANK and FERROCX_LOCAL_RANK (0..N-1), FERROCX_NRANKS and
FERROCX_LOCAL_NRANKS (N), one shared FERROCX_COMM_ID, and one shared FERROCX_SECRET
made fresh for this job (32 random bytes, hex) so that only its ranks can join it
(a FERROCX_SECRET or FERROCX_SECRET_FILE already set is passed through instead). Every line a rank writes is
prefixed with `[RANK] ` (stdout to stdout, stderr to stderr). SIGINT, SIGTERM and SIGHUP
are forwarded to all ranks (a third one kills them); SIGUSR1 goes to rank 0, which prints
where every rank is (FERROCX_STATUS_SIGNAL, set to 1 for the ranks). When a rank exits
non-zero or is killed by a signal, the other ranks get SIGTERM and, after a grace period,
SIGKILL (unless --keep-going).

Options:
  -n, --np N           number of ranks (required, at least 1)
      --comm-id H:P    FERROCX_COMM_ID for the ranks (default: $FERROCX_COMM_ID if set,
                       else 127.0.0.1:<free port>)
      --timeout SECS   kill all ranks and exit {TIMEOUT_EXIT_CODE} after SECS seconds
      --no-prefix      pass rank output through without `[RANK] ` prefixes
      --keep-going     a failing rank does not stop the others (programs that go on
                       without it: Communicator::shrink); the exit status is still
                       the first failure's
      --bind core|share|none
                       core: rank i on the i-th CPU this launcher may use, like
                       `mpirun --bind-to core`; share: rank i on the i-th of N equal
                       blocks of those CPUs (GPU ranks: a progress thread and a thread
                       waiting on a stream each need a core); default: none
  -h, --help           print this help
  -V, --version        print the version

Environment:
  {KILL_GRACE_ENV}     seconds between SIGTERM and SIGKILL on teardown (default {})

Exit status: 0 if every rank exited 0; else the first failing rank's exit status, or
128+SIGNAL if it was killed; {TIMEOUT_EXIT_CODE} on timeout; {USAGE_EXIT} on usage errors or if CMD cannot be run.
",
        DEFAULT_KILL_GRACE.as_secs()
    )
}

#[derive(Debug, PartialEq)]
enum Cli {
    Help,
    Version,
    Run {
        n: usize,
        cmd: OsString,
        args: Vec<OsString>,
        opts: Options,
    },
}

#[derive(Debug, Default, PartialEq)]
struct Options {
    comm_id: Option<OsString>,
    timeout: Option<Duration>,
    raw_output: bool,
    bind: ferrocx_tools::launch::affinity::Bind,
    keep_going: bool,
}

/// Parses the arguments after the program name. Options come before CMD; the first
/// argument that is not an option (or everything after `--`) is the command.
fn parse(argv: &[OsString]) -> Result<Cli, String> {
    let mut n: Option<usize> = None;
    let mut opts = Options::default();
    let mut it = argv.iter();
    let mut cmd: Option<OsString> = None;

    while let Some(arg) = it.next() {
        let Some(s) = arg.to_str() else {
            cmd = Some(arg.clone());
            break;
        };
        if s == "--" {
            cmd = it.next().cloned();
            if cmd.is_none() {
                return Err("no command given after `--`".into());
            }
            break;
        }
        if !s.starts_with('-') || s == "-" {
            cmd = Some(arg.clone());
            break;
        }
        // Split `--opt=value` and `-nVALUE`.
        let (name, inline): (&str, Option<&str>) = if let Some(rest) = s.strip_prefix("--") {
            match rest.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (rest, None),
            }
        } else if s.len() > 2 && s.is_char_boundary(2) {
            (&s[1..2], Some(&s[2..]))
        } else {
            (&s[1..], None)
        };
        let mut value = |what: &str| -> Result<String, String> {
            match inline {
                Some(v) => Ok(v.to_owned()),
                None => match it.next() {
                    Some(v) => v
                        .to_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("{s}: {what} is not valid UTF-8")),
                    None => Err(format!("{s} needs a value ({what})")),
                },
            }
        };
        match name {
            "h" | "help" if inline.is_none() => return Ok(Cli::Help),
            "V" | "version" if inline.is_none() => return Ok(Cli::Version),
            "no-prefix" if inline.is_none() => opts.raw_output = true,
            "keep-going" if inline.is_none() => opts.keep_going = true,
            "bind" => {
                let v = value("core, share or none")?;
                opts.bind = ferrocx_tools::launch::affinity::Bind::parse(&v)
                    .ok_or_else(|| format!("--bind takes core, share or none, not `{v}`"))?;
            }
            "n" | "np" => {
                let v = value("number of ranks")?;
                let count: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid number of ranks `{v}`"))?;
                if count == 0 {
                    return Err("the number of ranks must be at least 1".into());
                }
                n = Some(count);
            }
            "comm-id" => {
                let v = value("HOST:PORT")?;
                check_comm_id(&v)?;
                opts.comm_id = Some(v.into());
            }
            "timeout" => {
                let v = value("seconds")?;
                match parse_seconds(&v) {
                    Some(d) if !d.is_zero() => opts.timeout = Some(d),
                    _ => return Err(format!("invalid timeout `{v}`: expected seconds > 0")),
                }
            }
            _ => return Err(format!("unknown option `{s}`")),
        }
    }

    let n = n.ok_or("missing -n N (the number of ranks)")?;
    let cmd = cmd.ok_or("no command given")?;
    Ok(Cli::Run {
        n,
        cmd,
        args: it.cloned().collect(),
        opts,
    })
}

fn main() {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (n, cmd, args, opts) = match parse(&argv) {
        Ok(Cli::Help) => {
            print!("{}", usage());
            return;
        }
        Ok(Cli::Version) => {
            println!("fxrun {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Ok(Cli::Run { n, cmd, args, opts }) => (n, cmd, args, opts),
        Err(msg) => {
            eprintln!("fxrun: {msg}");
            eprintln!(
                "Usage: fxrun -n N [--comm-id HOST:PORT] [--timeout SECS] [--] CMD [ARGS...]"
            );
            eprintln!("Try `fxrun --help` for more.");
            exit(USAGE_EXIT);
        }
    };
    let launch = LaunchOptions {
        comm_id: opts.comm_id,
        timeout: opts.timeout,
        raw_output: opts.raw_output,
        bind: opts.bind,
        keep_going: opts.keep_going,
        ..LaunchOptions::default()
    };
    match run_ranks(n, OsStr::new(&cmd), &args, &launch) {
        Ok(code) => exit(code),
        Err(e) => {
            eprintln!("fxrun: {e}");
            let code = match e.kind() {
                io::ErrorKind::NotFound
                | io::ErrorKind::PermissionDenied
                | io::ErrorKind::InvalidInput => USAGE_EXIT,
                _ => 1,
            };
            exit(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn run(list: &[&str]) -> Result<Cli, String> {
        parse(&args(list))
    }

    #[test]
    fn basic_forms() {
        let want = Cli::Run {
            n: 4,
            cmd: "prog".into(),
            args: args(&["-x", "--y"]),
            opts: Options::default(),
        };
        assert_eq!(run(&["-n", "4", "prog", "-x", "--y"]), Ok(want));
        assert!(matches!(run(&["-n4", "prog"]), Ok(Cli::Run { n: 4, .. })));
        assert!(matches!(
            run(&["--np=4", "prog"]),
            Ok(Cli::Run { n: 4, .. })
        ));
        assert!(matches!(
            run(&["-n", "2", "--", "-weird"]),
            Ok(Cli::Run { n: 2, ref cmd, .. }) if cmd == "-weird"
        ));
        assert_eq!(run(&["-h"]), Ok(Cli::Help));
        assert_eq!(run(&["-n", "2", "--help", "x"]), Ok(Cli::Help));
    }

    #[test]
    fn options() {
        let Ok(Cli::Run { opts, .. }) = run(&[
            "-n",
            "2",
            "--comm-id",
            "10.0.0.1:29500",
            "--timeout=1.5",
            "--no-prefix",
            "prog",
        ]) else {
            panic!("parse failed");
        };
        assert_eq!(opts.comm_id, Some("10.0.0.1:29500".into()));
        assert_eq!(opts.timeout, Some(Duration::from_millis(1500)));
        assert!(opts.raw_output);
    }

    #[test]
    fn errors() {
        for bad in [
            &[][..],
            &["prog"],
            &["-n", "0", "prog"],
            &["-n", "x", "prog"],
            &["-n"],
            &["-n", "2"],
            &["-n", "2", "--"],
            &["-n", "2", "--comm-id", "nope", "prog"],
            &["-n", "2", "--timeout", "0", "prog"],
            &["-n", "2", "--bogus", "prog"],
        ] {
            assert!(run(bad).is_err(), "{bad:?} should fail");
        }
    }
}
