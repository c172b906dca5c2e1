//! fxperf's command line: nccl-tests' flags.

use std::ffi::OsString;

/// Parsed options.
#[derive(Debug, Clone)]
pub struct PerfArgs {
    /// Benchmark name (`sendrecv`).
    pub op: String,
    /// Launch this many local ranks first (`--np`).
    pub np: Option<usize>,
    /// With `--np`: bind rank i to CPU i (`--bind core`, the default) or not (`--bind none`).
    pub bind_cores: bool,
    /// Smallest size in bytes (`-b`).
    pub min_bytes: usize,
    /// Largest size in bytes (`-e`).
    pub max_bytes: usize,
    /// Size multiplier (`-f`).
    pub factor: usize,
    /// Timed iterations (`-n`).
    pub iters: usize,
    /// Warm-up iterations (`-w`).
    pub warmup: usize,
    /// Check results (`-c`).
    pub check: bool,
    /// Register buffers (`-R`).
    pub register: bool,
    /// Write results as JSON here (`--json`).
    pub json: Option<String>,
    /// The arguments minus `--np N`, to relaunch ourselves.
    pub passthrough: Vec<OsString>,
}

/// Parse `8`, `4K`, `256M`, `1G` (binary units).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1usize << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 8, 4K, 256M, 1G)"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("size '{s}' overflows"))
}

pub const USAGE: &str = "usage: fxperf [--np N] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-R 0|1] [--json FILE] sendrecv

  --np N      start N local ranks of this benchmark (otherwise run under fxrun/mpirun/srun/torchrun)
  --bind B    with --np: core (default, rank i on CPU i, like mpirun) or none
  -b, -e      smallest / largest message size in bytes (K, M, G suffixes), default 8 / 256M
  -f          size multiplier between rows, default 2
  -n, -w      timed / warm-up iterations per size, default 20 / 5
  -c          check every received element (the #wrong column), default 1
  -R          register buffers (single-copy path on shm), default 1
  --json F    also write the results as JSON to F

Benchmarks: sendrecv (each rank sends to rank+1 and receives from rank-1 in one group).
Exit status is non-zero when any element is wrong.";

/// Parse the command line (without the program name).
pub fn parse(args: &[OsString]) -> Result<PerfArgs, String> {
    let mut a = PerfArgs {
        op: String::new(),
        np: None,
        bind_cores: true,
        min_bytes: 8,
        max_bytes: 256 << 20,
        factor: 2,
        iters: 20,
        warmup: 5,
        check: true,
        register: true,
        json: None,
        passthrough: Vec::new(),
    };
    let mut i = 0;
    let strs: Vec<String> = args
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let value = |i: usize, flag: &str| {
        strs.get(i + 1)
            .cloned()
            .ok_or_else(|| format!("{flag} needs a value"))
    };
    let num = |v: &str, flag: &str| {
        v.parse::<usize>()
            .map_err(|_| format!("{flag}: '{v}' is not a non-negative integer"))
    };
    while i < strs.len() {
        let s = strs[i].as_str();
        let mut consumed_pair = true;
        match s {
            "-h" | "--help" => return Err(USAGE.to_string()),
            "--np" => {
                let n = num(&value(i, s)?, s)?;
                if n == 0 {
                    return Err("--np must be at least 1".into());
                }
                a.np = Some(n);
                i += 2;
                continue;
            }
            "--bind" => {
                a.bind_cores = match value(i, s)?.as_str() {
                    "core" => true,
                    "none" => false,
                    other => return Err(format!("--bind takes core or none, not '{other}'")),
                };
                i += 2;
                continue;
            }
            "-b" => a.min_bytes = parse_size(&value(i, s)?)?,
            "-e" => a.max_bytes = parse_size(&value(i, s)?)?,
            "-f" => a.factor = num(&value(i, s)?, s)?,
            "-n" => a.iters = num(&value(i, s)?, s)?,
            "-w" => a.warmup = num(&value(i, s)?, s)?,
            "-c" => a.check = num(&value(i, s)?, s)? != 0,
            "-R" => a.register = num(&value(i, s)?, s)? != 0,
            "--json" => a.json = Some(value(i, s)?),
            _ if s.starts_with('-') => return Err(format!("unknown option '{s}'\n\n{USAGE}")),
            _ => {
                if !a.op.is_empty() {
                    return Err(format!(
                        "more than one benchmark given ('{}' and '{s}')",
                        a.op
                    ));
                }
                a.op = s.to_string();
                consumed_pair = false;
            }
        }
        a.passthrough.push(args[i].clone());
        if consumed_pair {
            a.passthrough.push(args[i + 1].clone());
            i += 2;
        } else {
            i += 1;
        }
    }
    if a.op.is_empty() {
        return Err(format!("no benchmark given\n\n{USAGE}"));
    }
    if a.op != "sendrecv" {
        return Err(format!("unknown benchmark '{}': this build has sendrecv (the collectives come with their own issue)", a.op));
    }
    if a.factor < 2 {
        return Err("-f must be at least 2".into());
    }
    if a.iters == 0 {
        return Err("-n must be at least 1".into());
    }
    if a.min_bytes > a.max_bytes {
        return Err(format!(
            "-b ({}) is larger than -e ({})",
            a.min_bytes, a.max_bytes
        ));
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<PerfArgs, String> {
        parse(&v.iter().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn flags() {
        let a = p(&["--np", "2", "-b", "1K", "-e", "4M", "-n", "3", "sendrecv"]).unwrap();
        assert_eq!(
            (a.np, a.min_bytes, a.max_bytes, a.iters),
            (Some(2), 1024, 4 << 20, 3)
        );
        assert_eq!(
            a.passthrough,
            ["-b", "1K", "-e", "4M", "-n", "3", "sendrecv"].map(OsString::from)
        );
        assert!(p(&["nope"]).unwrap_err().contains("unknown benchmark"));
        assert!(p(&["-b", "x", "sendrecv"])
            .unwrap_err()
            .contains("not a size"));
        assert!(p(&["-b", "8M", "-e", "1K", "sendrecv"]).is_err());
        assert!(p(&[]).is_err());
    }
}
