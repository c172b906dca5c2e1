//! fxperf — nccl-tests-style benchmarks of every collective and of sendrecv.
//! `fxperf --np 2 all_reduce` runs the whole thing; `fxperf --help` lists the flags.

use ferrocx::Communicator;
use ferrocx_tools::launch::{run_ranks, LaunchOptions};
use ferrocx_tools::perf::args::Bench;
use ferrocx_tools::perf::{args, coll, sendrecv, table};
use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let a = match args::parse(&argv) {
        Ok(a) => a,
        Err(msg) => {
            let help = argv.iter().any(|s| s == "-h" || s == "--help");
            eprintln!("{msg}");
            return if help {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    // `--np N` outside a launcher: start N ranks of ourselves with the same flags.
    if let Some(np) = a.np {
        if std::env::var_os("FERROCX_RANK").is_none() {
            let exe = match std::env::current_exe() {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("fxperf: cannot find my own executable: {e}");
                    return ExitCode::from(2);
                }
            };
            let opts = LaunchOptions {
                raw_output: true,
                bind: a.bind,
                ..Default::default()
            };
            return match run_ranks(np, exe.as_os_str(), &a.passthrough, &opts) {
                Ok(0) => ExitCode::SUCCESS,
                Ok(c) => ExitCode::from(c.clamp(1, 255) as u8),
                Err(e) => {
                    eprintln!("fxperf: cannot launch {np} ranks: {e}");
                    ExitCode::from(2)
                }
            };
        }
    }
    match run(&a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e @ ferrocx::Error::InvalidArgument(_)) => {
            eprintln!("fxperf: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("fxperf: {e}");
            ExitCode::from(1)
        }
    }
}

/// Returns Ok(false) when any element was wrong.
fn run(a: &args::PerfArgs) -> ferrocx::Result<bool> {
    if std::env::var_os("FERROCX_RANK").is_none()
        && std::env::var_os("OMPI_COMM_WORLD_RANK").is_none()
        && std::env::var_os("SLURM_PROCID").is_none()
        && std::env::var_os("RANK").is_none()
    {
        return Err(ferrocx::Error::InvalidArgument(
            "not launched as a rank: use `fxperf --np N ...`, or run it under fxrun/mpirun/srun/torchrun".into(),
        ));
    }
    let comm = Communicator::from_env()?;
    let n = comm.nranks();
    if matches!(a.bench, Bench::SendRecv) && n < 2 {
        return Err(ferrocx::Error::InvalidArgument(
            "sendrecv needs at least 2 ranks (--np 2)".into(),
        ));
    }
    let lead = comm.rank() == 0;
    if lead {
        let transport = if n > 1 {
            let t = if a.cuda {
                comm.device_transport_to(1)
            } else {
                comm.transport_to(1)
            };
            t.unwrap_or_else(|e| format!("? ({e})"))
        } else {
            "none (1 rank)".into()
        };
        println!(
            "# fxperf {}: nranks {n}, transport {transport} (rank 0 -> 1), registered buffers: {}, iters {}, warmup {}, check {}",
            a.bench.name(),
            match a.register {
                0 => "no (-R 0)",
                1 => "yes (-R 1)",
                _ => "yes, and symmetric windows (-R 2)",
            },
            a.iters,
            a.warmup,
            if a.check { 1 } else { 0 }
        );
        println!(
            "# time: mean per call over -n calls after a barrier, max over ranks; sizes and busbw as nccl-tests (fxperf --help)"
        );
        let plugins = comm.collective_plugins();
        if !plugins.is_empty() {
            println!(
                "# collective plugins: {} (FERROCX_COLLECTIVES)",
                plugins.join(", ")
            );
        }
        if a.bench == Bench::Coll(ferrocx::CollKind::AllToAllV) {
            println!("# alltoallv: rank r sends peer p T*(1+(p-r) mod n)/(n(n+1)/2) of T = n*count elements (fxperf --help)");
        }
        println!("{}", table::header());
    }
    let print = |r: &table::Row| {
        if lead {
            println!("{}", table::line(r));
        }
    };
    let rows = match a.bench {
        Bench::SendRecv => sendrecv::run(&comm, a, false, print)?,
        Bench::AllToAllSends => sendrecv::run(&comm, a, true, print)?,
        Bench::Coll(kind) => coll::run(&comm, a, kind, print)?,
    };
    let wrong = table::total_wrong(&rows);
    if lead {
        println!("{}", table::footer(&rows));
        if let Some(path) = &a.json {
            if let Err(e) = std::fs::write(path, table::json(a.bench.name(), n, &rows)) {
                eprintln!("fxperf: cannot write {path}: {e}");
            }
        }
    }
    comm.destroy()?;
    Ok(wrong == 0)
}
