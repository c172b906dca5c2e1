//! fxinfo — what ferrocx would load and use, and the plugin conformance kit.
//!
//! `fxinfo`                 plugins found (loaded or skipped, and why) and the effective configuration
//! `fxrun -n 2 -- fxinfo`   additionally the transport chosen for every pair of ranks, and
//!                          who runs each collective per size bucket (core or a collective plugin)
//! `fxinfo --check P.so`    run the conformance battery against a plugin library

use ferrocx::config::VARIABLES;
use ferrocx::plugin::Registry;
use ferrocx::Communicator;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("-h") | Some("--help") => {
            println!("usage: fxinfo                 plugins and configuration (under fxrun: transports per rank pair)\n       fxinfo --check PLUGIN.so  run the conformance battery against a plugin");
            ExitCode::SUCCESS
        }
        Some("--check") => match args.get(1) {
            Some(path) => ferrocx_tools::check::main(path),
            None => {
                eprintln!("fxinfo --check needs a plugin path");
                ExitCode::from(2)
            }
        },
        Some("--check-child") => ferrocx_tools::check::child_main(&args[1..]),
        Some(other) => {
            eprintln!("fxinfo: unknown argument '{other}' (try --help)");
            ExitCode::from(2)
        }
        None => info(),
    }
}

/// The selection table: who runs each collective and how, per size bucket,
/// on plain buffers and on symmetric windows (host, and device memory when
/// this rank has a GPU). Every collective plugin is asked exactly as a call
/// would ask it; the winner's path is the core's algorithm or the plugin's
/// own words (its `describe` hook: ce's LL, Simple, direct … kernels).
fn collectives(comm: &Communicator, lead: bool) -> ferrocx::Result<()> {
    use ferrocx::{CollKind, CollSpec, DataType};
    let n = comm.nranks();
    let buckets = [
        8usize,
        4096,
        256 << 10,
        1 << 20,
        4 << 20,
        16 << 20,
        64 << 20,
    ];
    let cap = buckets[buckets.len() - 1] * n;
    let kinds = [
        CollKind::AllReduce,
        CollKind::AllGather,
        CollKind::ReduceScatter,
        CollKind::Broadcast,
        CollKind::Reduce,
        CollKind::AllToAll,
        CollKind::Gather,
        CollKind::Scatter,
    ];
    let mut host = (vec![0u64; cap / 8], vec![0u64; cap / 8]);
    let dev = match comm.device() {
        Some(_) => Some((
            ferrocx_tools::perf::device::DevMem::new(cap)?,
            ferrocx_tools::perf::device::DevMem::new(cap)?,
        )),
        None => None,
    };
    let bytes = |v: &mut Vec<u64>| -> &'static mut [u8] {
        // SAFETY: u64 storage viewed as bytes; the vectors outlive every use below
        // (deregistered before they drop at the end of this function).
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
    };
    let mut lines = Vec::new();
    for windows in [false, true] {
        let mut regs = Vec::new();
        if windows {
            regs.push(comm.window_register(bytes(&mut host.0))?);
            regs.push(comm.window_register(bytes(&mut host.1))?);
            if let Some((s, r)) = &dev {
                // SAFETY: the allocations live until after the deregistration below.
                unsafe {
                    regs.push(comm.window_register_device(s.ptr, cap)?);
                    regs.push(comm.window_register_device(r.ptr, cap)?);
                }
            }
        }
        let mut mems = vec![(
            "host",
            host.0.as_ptr() as u64,
            host.1.as_ptr() as u64,
            false,
        )];
        if let Some((s, r)) = &dev {
            mems.push(("cuda", s.ptr, r.ptr, true));
        }
        for (mem, sp, rp, device) in mems {
            for kind in kinds {
                let cells: Vec<String> = buckets
                    .iter()
                    .map(|&b| {
                        let spec = CollSpec::new(kind, DataType::F32, (b / 4).max(1));
                        comm.collective_choice(&spec, sp, rp, false, device)
                            .map_or_else(
                                |e| format!("? ({e})"),
                                |c| format!("{} ({})", c.winner_path(), c.explain()),
                            )
                    })
                    .collect();
                lines.push(format!(
                    "  {:<15} {:<4} {:<8} {}",
                    kind.name(),
                    mem,
                    if windows { "windows" } else { "buffers" },
                    cells.join(" | ")
                ));
            }
        }
        for w in regs {
            comm.window_deregister(w)?;
        }
    }
    if lead {
        println!(
            "\ncollectives: the selection table (who runs each call and how, float elements, size per rank \
             8 B | 4 KiB | 256 KiB | 1 MiB | 4 MiB | 16 MiB | 64 MiB; the winner, its path, and the bids in parentheses, \
             the core's is {}; forced with FERROCX_COLLECTIVES (which plugins bid), FERROCX_ALGO (the core's algorithm) and \
             FERROCX_CE_LL_BYTES / _LL128_BYTES / _SIMPLE_BYTES / _DIRECT_BYTES (ce's kernels), docs/ENV.md):",
            ferrocx_sdk::abi::FX_COLL_CORE_PRIORITY
        );
        let plugins = comm.collective_plugins();
        println!(
            "  collective plugins taking part: {}",
            if plugins.is_empty() {
                "none".to_string()
            } else {
                plugins.join(", ")
            }
        );
        for l in lines {
            println!("{l}");
        }
        if comm.device().is_some() && plugins.iter().any(|p| p == "ce") {
            ce_routes(n);
        }
    }
    p2p_routes(comm, lead)?;
    devnet(comm, lead)
}

/// Which device-networking handler kernels would get, and why (collective:
/// every rank opens and closes it).
fn devnet(comm: &Communicator, lead: bool) -> ferrocx::Result<()> {
    let line = match comm.devnet_open() {
        Ok(dn) => {
            let d = format!("{}: {}", dn.name(), dn.describe());
            dn.close()?;
            d
        }
        Err(e) => format!("not available: {e}"),
    };
    if lead {
        println!("\ndevice networking (kernels posting puts and signals, Communicator::devnet_open):\n  {line}");
    }
    Ok(())
}

/// Who runs a send to the next rank, per size and memory kind (the same
/// answer its receive gets on the peer).
fn p2p_routes(comm: &Communicator, lead: bool) -> ferrocx::Result<()> {
    if comm.nranks() < 2 {
        return Ok(());
    }
    let peer = (comm.rank() + 1) % comm.nranks();
    let sizes = [8usize, 4096, 4097, 64 << 10, 4 << 20, 4 << 20 | 1];
    let mut rows = vec![("host", true)];
    if comm.device().is_some() {
        rows.push(("cuda", false));
    }
    let mut lines = Vec::new();
    for (mem, host) in rows {
        let cells = sizes
            .iter()
            .map(|&b| {
                let who = if host {
                    comm.host_p2p_runner(true, b, peer)
                } else {
                    comm.device_p2p_runner(true, b, peer)
                };
                who.unwrap_or_else(|e| format!("? ({e})"))
            })
            .collect::<Vec<_>>();
        lines.push(format!("  send {mem:<4} {}", cells.join(" | ")));
    }
    if lead {
        println!("
point-to-point (who runs a send, per size 8 B | 4 KiB | 4 KiB+1 | 64 KiB | 4 MiB | 4 MiB+1; the core: its transports above):");
        for l in lines {
            println!("{l}");
        }
    }
    Ok(())
}

/// ce's selection table (`ferrocx_ce::select::table`) for `n` ranks, from
/// this process's environment, as every rank reading the same would agree.
fn ce_routes(n: usize) {
    let cfg = match ferrocx_ce::config::Config::from_lookup(|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            println!("\nce routes: {e}");
            return;
        }
    };
    let sizes = [
        8usize,
        64 << 10,
        1 << 20,
        4 << 20,
        32 << 20,
        64 << 20,
        256 << 20,
    ];
    let red = ferrocx_ce::select::Agreed::assumed(&cfg);
    println!(
        "\nce routes on device memory ({n} ranks; block per rank 8 B | 64 KiB | 1 MiB | 4 MiB | 32 MiB | 64 MiB | 256 MiB; \
         FERROCX_CE_LL_BYTES, _LL128_BYTES, _SIMPLE_BYTES, _ONESHOT_BYTES, _SCRATCH_BYTES and _STAGE move the boundaries; LL128 as if every rank had its own GPU joined to the others by NVLink):"
    );
    for (row, cells) in ferrocx_ce::select::table(n, &red, &sizes) {
        println!("  {row:<23} {}", cells.join(" | "));
    }
    // Sends and receives: the message's size (FERROCX_CE_P2P_BYTES, _P2P_LL_BYTES).
    let cells: Vec<&str> = sizes
        .iter()
        .map(|&b| ferrocx_ce::p2p::route(&cfg, n, b))
        .collect();
    println!("  {:<23} {}", "send/recv (message)", cells.join(" | "));
}

fn info() -> ExitCode {
    ferrocx::log::init();
    let under_launcher = std::env::var_os("FERROCX_RANK").is_some()
        || std::env::var_os("OMPI_COMM_WORLD_RANK").is_some();
    let registry = match Registry::discover() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fxinfo: {e}");
            return ExitCode::from(1);
        }
    };
    let comm = if under_launcher {
        match Communicator::from_env() {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("fxinfo: cannot create a communicator: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    let lead = comm.as_ref().is_none_or(|c| c.rank() == 0);
    if lead {
        println!(
            "ferrocx {} — plugin ABI v{}",
            env!("CARGO_PKG_VERSION"),
            ferrocx_sdk::abi::FX_ABI_VERSION_1
        );
        println!("\nplugins:");
        for r in comm
            .as_ref()
            .map_or(&registry.report[..], |c| c.plugin_report())
        {
            let abi = r.abi_version.map_or("-".to_string(), |v| format!("v{v}"));
            let status = r
                .skipped
                .as_ref()
                .map_or("loaded".to_string(), |w| format!("skipped: {w}"));
            println!(
                "  {:<12} {:<10} abi {:<3} {:<40} {status}",
                r.name,
                r.kind,
                abi,
                r.source.to_string()
            );
        }
        println!("\nconfiguration:");
        for (name, default, meaning) in VARIABLES {
            let (value, origin) = match std::env::var_os(name) {
                // The secret itself is never printed (fxinfo output lands in logs).
                Some(v) if *name == ferrocx::config::SECRET_VAR => {
                    (format!("({} bytes, hidden)", v.len()), "set")
                }
                Some(v) => (v.to_string_lossy().into_owned(), "set"),
                None => (default.to_string(), "default"),
            };
            println!("  {name:<28} = {value:<24} ({origin}) {meaning}");
        }
    }
    let Some(comm) = comm else {
        if lead {
            println!("\n(run under `fxrun -n N -- fxinfo` to see the transport chosen for each pair of ranks)");
        }
        return ExitCode::SUCCESS;
    };
    let n = comm.nranks();
    let mine: Vec<String> = (0..n)
        .map(|p| {
            if p == comm.rank() {
                "-".to_string()
            } else {
                let host = comm
                    .transport_to(p)
                    .unwrap_or_else(|e| format!("none ({e})"));
                match comm.device_transport_to(p) {
                    Ok(d) if d != host => format!("{host} (host memory), {d} (device memory)"),
                    _ => host,
                }
            }
        })
        .collect();
    let gathered = match comm.all_gather_oob(mine.join("\n").as_bytes()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("fxinfo: {e}");
            return ExitCode::from(1);
        }
    };
    if lead {
        println!("\ntransport chosen for each pair (sender -> receiver):");
        for (src, row) in gathered.iter().enumerate() {
            let host = comm
                .peers()
                .get(src)
                .map(|p| p.host_name.clone())
                .unwrap_or_default();
            for (dst, t) in String::from_utf8_lossy(row).lines().enumerate() {
                if src != dst {
                    println!("  rank {src} ({host}) -> rank {dst}: {t}");
                }
            }
        }
    }
    if let Err(e) = collectives(&comm, lead) {
        eprintln!("fxinfo: {e}");
        return ExitCode::from(1);
    }
    match comm.destroy() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fxinfo: {e}");
            ExitCode::from(1)
        }
    }
}
