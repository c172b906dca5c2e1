//! fxperf's command line: nccl-tests' flags.

use ferrocx::{CollKind, DataType, RedOp};
use std::ffi::OsString;

/// What to benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bench {
    /// A collective (never [`CollKind::Barrier`]).
    Coll(CollKind),
    /// Each rank sends to rank+1 and receives from rank-1 in one group.
    SendRecv,
    /// An all-to-all as one group of sends and receives, one each way with
    /// every rank (itself included): what nccl-tests' `alltoall` posts.
    AllToAllSends,
}

/// The collectives fxperf measures, in the order `--help` lists them: every
/// one but the barrier (which moves no data).
pub fn collectives() -> impl Iterator<Item = CollKind> {
    CollKind::ALL
        .into_iter()
        .filter(|k| *k != CollKind::Barrier)
}

impl Bench {
    /// Parse a benchmark name; nccl-tests' binary names (`all_reduce_perf`) work too.
    pub fn parse(s: &str) -> Option<Bench> {
        let s = s.strip_suffix("_perf").unwrap_or(s);
        if s == "sendrecv" {
            return Some(Bench::SendRecv);
        }
        if s == "alltoall_sends" {
            return Some(Bench::AllToAllSends);
        }
        collectives().find(|k| k.name() == s).map(Bench::Coll)
    }

    /// The name printed in headers and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Bench::Coll(k) => k.name(),
            Bench::SendRecv => "sendrecv",
            Bench::AllToAllSends => "alltoall_sends",
        }
    }

    /// Every name, space-separated.
    pub fn known() -> String {
        let mut v: Vec<&str> = collectives().map(|k| k.name()).collect();
        v.push("sendrecv");
        v.push("alltoall_sends");
        v.join(", ")
    }
}

/// Parsed options.
#[derive(Debug, Clone)]
pub struct PerfArgs {
    /// Benchmark name as given.
    pub op: String,
    /// The benchmark.
    pub bench: Bench,
    /// Launch this many local ranks first (`--np`).
    pub np: Option<usize>,
    /// With `--np`: CPU binding (`--bind`; default `core` for host memory, `share`
    /// with `--mem cuda`).
    pub bind: crate::launch::affinity::Bind,
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
    /// Register buffers (`-R`): 0 no, 1 with the transports, 2 also as
    /// symmetric windows (what collective plugins such as ce need).
    pub register: u8,
    /// `--mem cuda`: buffers in GPU memory, stream-ordered calls (default host).
    pub cuda: bool,
    /// Element types (`-d`; default `float`, `all` for every type).
    pub dtypes: Vec<DataType>,
    /// Reduction operators (`-o`; default `sum`, `all` for every operator).
    pub redops: Vec<RedOp>,
    /// Root of rooted collectives (`-r`; `None`: every rank in turn, `-r all` or `-r -1`).
    pub root: Option<usize>,
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

pub const USAGE: &str = "usage: fxperf [--np N] [--bind core|share|none] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
              [-c 0|1] [-d TYPE|all] [-o OP|all] [-r ROOT|all] [-R 0|1] [--json FILE] BENCHMARK

Benchmarks (nccl-tests' names; `all_reduce_perf` etc. are accepted too):
  all_reduce all_gather reduce_scatter broadcast reduce alltoall alltoallv gather scatter sendrecv
  alltoall_sends (an all-to-all as one group of sends and receives with every rank, itself
  included: what nccl-tests' alltoall posts through NCCL's API)
  sendrecv sends to rank+1 and receives from rank-1: on host memory one
  Communicator::sendrecv (Open MPI's benchmark calls MPI_Sendrecv), on CUDA a group

  --np N      start N local ranks of this benchmark (otherwise run under fxrun/mpirun/srun/torchrun)
  --bind B    with --np: core (rank i on CPU i modulo the CPUs, like mpirun; the default),
              share (rank i on the i-th of N blocks of the CPUs; the default with --mem cuda,
              where a progress thread and the thread waiting on the stream both poll) or none
  -b, -e      smallest / largest size in bytes (K, M, G suffixes), default 8 / 256M
  -f          size multiplier between rows, default 2 (the last row is always -e)
  -n, -w      timed / warm-up iterations per row and placement, default 20 / 5; with --mem cuda
              the first row warms up for at least 200 ms in doubling rounds (idle GPUs start slow)
  -c          check every element of the result on every rank (the #wrong columns), default 1
  -d          element type: int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double
              f8e4m3 f8e5m2,
              or all (every type in turn); default float. sendrecv always moves bytes (uint8)
  -o          reduction: sum prod min max avg, or all; default sum (all_reduce, reduce_scatter, reduce)
  -r          root of broadcast, reduce, gather, scatter: a rank, or all (-1) for every rank in turn; default 0
  -R          register buffers: 0 no; 1 with the transports (single-copy path on shm; with
              --mem cuda: the device buffers, IPC-registered for p2p), the default; 2 also as
              symmetric windows (collectives then may run on a collective plugin, e.g. ce:
              FERROCX_COLLECTIVES=ce / ^ce picks; the table's footer says which ran)
  --mem M     host (default) or cuda: buffers in GPU memory (this rank's FERROCX_DEVICE),
              calls queued on a CUDA stream; time = iterations queued, then the stream
              synchronized (as nccl-tests)
  --json F    also write the rows as JSON to F

Sizes are nccl-tests' (`size` is the larger of one rank's send and receive buffers; `count` is
the `count` argument): all_reduce, broadcast, reduce, sendrecv: count = size/eltsize;
all_gather, gather (send count), reduce_scatter, scatter (receive count), alltoall (per-peer
count): count = (size/eltsize/nranks) rounded down to a multiple of 16 bytes, so small sizes can
give 0-byte rows as in nccl-tests. alltoallv (not in classic nccl-tests) moves the same total as
alltoall, T = nranks*count elements per rank, split unevenly: rank r sends peer p
floor(T*(1+d)/(nranks*(nranks+1)/2)) elements, d = (p-r) mod nranks, the rounding remainder going
to the peer at d = nranks-1; every rank sends and receives T in total. alltoall_sends moves
bytes (uint8), size/nranks rounded down to 16 bytes to each rank.

time: average per iteration over -n iterations started after a barrier, the maximum over ranks
(nccl-tests -a 3; its default -a 1 averages over ranks). algbw = bytes/time with bytes = count*
eltsize (all_reduce, broadcast, reduce, sendrecv) or count*eltsize*nranks (the others).
busbw = algbw * 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, alltoall(v), gather,
scatter, alltoall_sends), 1 (broadcast, reduce, sendrecv). Each row runs out-of-place then
in-place (NCCL's in-place layouts); sendrecv and alltoall_sends have no in-place column.
With FXPERF_QUEUE_TIME=1, rank 0 also prints on stderr, per timed row, how much of the time per
call the host spent queuing the calls (slowest rank): near the whole time, the host bounds it;
and the longest single call (a stall hides in the mean).

Checking (-c 1) runs one extra, untimed call per row and placement on fresh inputs and a poisoned
output, and compares every element on every rank: integers and sum/prod/min/max of floats
exactly (inputs are small integers, products powers of two, all exact in every type), avg of
floats within 4 units in the last place of the type (implementations may divide or multiply by
1/nranks). Exit status: 0 all correct, 1 any element wrong or a run-time error, 2 bad usage.";

/// Parse the command line (without the program name).
pub fn parse(args: &[OsString]) -> Result<PerfArgs, String> {
    let mut bind_set = false;
    let mut a = PerfArgs {
        op: String::new(),
        bench: Bench::SendRecv,
        np: None,
        bind: crate::launch::affinity::Bind::Core,
        min_bytes: 8,
        max_bytes: 256 << 20,
        factor: 2,
        iters: 20,
        warmup: 5,
        check: true,
        register: 1,
        cuda: false,
        dtypes: vec![DataType::F32],
        redops: vec![RedOp::Sum],
        root: Some(0),
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
                let v = value(i, s)?;
                a.bind = crate::launch::affinity::Bind::parse(&v)
                    .ok_or_else(|| format!("--bind takes core, share or none, not '{v}'"))?;
                bind_set = true;
                i += 2;
                continue;
            }
            "-b" => a.min_bytes = parse_size(&value(i, s)?)?,
            "-e" => a.max_bytes = parse_size(&value(i, s)?)?,
            "-f" => a.factor = num(&value(i, s)?, s)?,
            "-n" => a.iters = num(&value(i, s)?, s)?,
            "-w" => a.warmup = num(&value(i, s)?, s)?,
            "-c" => a.check = num(&value(i, s)?, s)? != 0,
            "-R" => {
                a.register = match num(&value(i, s)?, s)? {
                    r @ 0..=2 => r as u8,
                    r => return Err(format!("-R takes 0, 1 or 2, not {r}")),
                }
            }
            "-d" => {
                let v = value(i, s)?;
                a.dtypes = if v == "all" {
                    DataType::ALL.to_vec()
                } else {
                    vec![DataType::parse(&v).map_err(|e| format!("-d: {e}"))?]
                };
            }
            "-o" => {
                let v = value(i, s)?;
                a.redops = if v == "all" {
                    RedOp::ALL.to_vec()
                } else {
                    vec![RedOp::parse(&v).map_err(|e| format!("-o: {e}"))?]
                };
            }
            "-r" => {
                let v = value(i, s)?;
                a.root = if v == "all" || v == "-1" {
                    None
                } else {
                    Some(num(&v, s).map_err(|e| format!("{e} (a rank, or all)"))?)
                };
            }
            "--json" => a.json = Some(value(i, s)?),
            "--mem" => {
                a.cuda = match value(i, s)?.as_str() {
                    "host" => false,
                    "cuda" => true,
                    other => return Err(format!("--mem takes host or cuda, not '{other}'")),
                }
            }
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
    a.bench = Bench::parse(&a.op).ok_or_else(|| {
        format!(
            "unknown benchmark '{}' (known: {}; fxperf --help)",
            a.op,
            Bench::known()
        )
    })?;
    if a.cuda && !bind_set {
        a.bind = crate::launch::affinity::Bind::Share;
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

/// Sizes from `-b` to `-e` by `-f` (the last one is `-e` even off the progression).
pub fn sizes(a: &PerfArgs) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = a.min_bytes;
    loop {
        v.push(s);
        if s >= a.max_bytes {
            break;
        }
        s = s.saturating_mul(a.factor).min(a.max_bytes);
        if s == 0 {
            // -b 0: step to 1 byte rather than loop forever.
            s = 1;
        }
    }
    v
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
        assert_eq!(a.bench, Bench::SendRecv);
        assert_eq!(
            a.passthrough,
            ["-b", "1K", "-e", "4M", "-n", "3", "sendrecv"].map(OsString::from)
        );
        assert!(p(&["nope"])
            .unwrap_err()
            .contains("unknown benchmark 'nope'"));
        assert!(p(&["-b", "x", "sendrecv"])
            .unwrap_err()
            .contains("not a size"));
        assert!(p(&["-b", "8M", "-e", "1K", "sendrecv"]).is_err());
        assert!(p(&[]).is_err());
    }

    #[test]
    fn collective_flags() {
        let a = p(&["-d", "all", "-o", "all", "-r", "all", "all_reduce_perf"]).unwrap();
        assert_eq!(a.bench, Bench::Coll(CollKind::AllReduce));
        assert_eq!(
            (a.dtypes.len(), a.redops.len(), a.root),
            (DataType::ALL.len(), 5, None)
        );
        let a = p(&["-d", "bf16", "-o", "max", "-r", "3", "broadcast"]).unwrap();
        assert_eq!(
            (a.dtypes, a.redops, a.root),
            (vec![DataType::Bf16], vec![RedOp::Max], Some(3))
        );
        let a = p(&["alltoallv"]).unwrap();
        assert_eq!(
            (a.bench, a.dtypes, a.redops, a.root),
            (
                Bench::Coll(CollKind::AllToAllV),
                vec![DataType::F32],
                vec![RedOp::Sum],
                Some(0)
            )
        );
        assert!(p(&["-d", "quad", "all_gather"])
            .unwrap_err()
            .contains("quad"));
        assert!(p(&["-o", "xor", "all_gather"]).unwrap_err().contains("xor"));
        assert!(p(&["-r", "x", "reduce"]).unwrap_err().contains("-r"));
        assert!(p(&["barrier"]).unwrap_err().contains("known: all_reduce"));
        for k in collectives() {
            assert_eq!(Bench::parse(k.name()), Some(Bench::Coll(k)));
        }
    }

    #[test]
    fn size_sweep() {
        let a = p(&["-b", "8", "-e", "64M", "-f", "4", "all_reduce"]).unwrap();
        let s = sizes(&a);
        assert_eq!((s[0], s[1], s.len()), (8, 32, 13));
        assert_eq!(*s.last().unwrap(), 64 << 20);
        let a = p(&["-b", "0", "-e", "4", "all_reduce"]).unwrap();
        assert_eq!(sizes(&a), vec![0, 1, 2, 4]);
    }
}
