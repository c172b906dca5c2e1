//! A rank process for the integration tests. `fxtest-worker SCENARIO ARGS…`;
//! exits 0 when everything it checked was right, prints what went wrong otherwise.

#[path = "../coll/mod.rs"]
mod coll;

use ferrocx::{Communicator, Error};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn pattern(src: usize, dst: usize, size: usize, i: usize) -> u8 {
    (i.wrapping_mul(29) ^ src.wrapping_mul(97) ^ dst.wrapping_mul(53) ^ size ^ (i >> 11)) as u8
}

fn parse_sizes(s: &str) -> Vec<usize> {
    s.split(',')
        .map(|x| x.trim().parse().expect("size"))
        .collect()
}

fn main() -> ExitCode {
    // Per-rank configuration for tests that need ranks to disagree.
    if let Ok(r) = std::env::var("FXTEST_SHM_DISABLE_ON_RANK") {
        if std::env::var("FERROCX_RANK").ok() == Some(r) {
            std::env::set_var("FERROCX_SHM_DISABLE", "1");
        }
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let opt = |f: &str| {
        args.iter()
            .position(|a| a == f)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let r = match args.first().map(String::as_str) {
        Some("pairs") => pairs(
            &parse_sizes(&args[1]),
            flag("--register"),
            opt("--expect-transport"),
        ),
        Some("ring-loop") => ring_loop(
            args[1].parse().expect("size"),
            opt("--victim").map(|v| v.parse().expect("victim")),
            opt("--kill-after-ms").map(|v| v.parse().expect("ms")),
        ),
        Some("badinput") => badinput(),
        Some("groups") => groups(args[1].parse().expect("rounds")),
        Some("stall") => stall(args.get(1).map(String::as_str) == Some("data")),
        Some("abort") => abort(),
        Some("oneway") => oneway(args.get(1).map(String::as_str) == Some("late")),
        Some("idle") => idle(),
        Some("dev-smoke") => coll::device::smoke(),
        Some("dev-lazy") => coll::device::lazy(),
        Some("cuda-latency") => {
            coll::probe::run(args.get(1).map_or(200, |n| n.parse().expect("repetitions")))
        }
        Some("ring-loop-dev") => coll::device::ring_loop(
            args[1].parse().expect("size"),
            opt("--victim").map(|v| v.parse().expect("victim rank")),
            opt("--kill-after-ms").map_or(500, |v| v.parse().expect("milliseconds")),
        ),
        Some("coll-matrix") => coll::matrix::run(
            opt("--filter"),
            opt("--mem").as_deref() == Some("cuda"),
            args.iter().any(|a| a == "--window"),
            opt("--expect"),
        ),
        Some("coll-mix") => coll::mix::run(
            args[1].parse().expect("seed"),
            args[2].parse().expect("iterations"),
            opt("--check-every").map_or(1, |v| v.parse().expect("check-every")),
            opt("--only").map(|v| {
                let (a, b) = v.split_once("..").unwrap_or((&v, &v));
                (a.parse().expect("first"), b.parse().expect("last"))
            }),
            opt("--mem").as_deref() == Some("cuda"),
        ),
        Some("coll-group") => coll::mix::group(args[1].parse().expect("repeat"), &args[2..]),
        Some("split") => coll::mix::split(),
        Some("coll-many") => coll::mix::many(args[1].parse().expect("iterations")),
        Some("coll-bad") => coll::bad::run(args.get(1).map_or("local", String::as_str)),
        Some("coll-async") => coll::bad::asynchronous(),
        Some("mismatch") => coll::mismatch::run(&args[1]),
        Some("run-ahead") => coll::mismatch::run_ahead(),
        Some("hang") => coll::hang::run(&args[1]),
        Some("ce-direct-asym") => coll::ce_direct::run(),
        Some("ce-rooted-own") => coll::ce_rooted::run(),
        Some("ce-hang") => coll::ce_hang::run(),
        Some("selection") => coll::selection::run(&args[1..]),
        Some("p2p-device") => coll::p2p::run(
            opt("--expect"),
            &opt("--sizes").map_or(
                vec![
                    0,
                    1,
                    13,
                    4096,
                    65_520,
                    65_543,
                    512 << 10,
                    (512 << 10) + 1,
                    (1 << 20) + 3,
                    4 << 20,
                    (4 << 20) + 16,
                ],
                |v| parse_sizes(&v),
            ),
        ),
        Some("p2p-graph") => coll::p2p_graph::run(
            args[1].parse().expect("bytes"),
            opt("--replays").map_or(200, |v| v.parse().expect("replays")),
            args.iter().any(|a| a == "--mixed"),
            opt("--timed").map_or(0, |v| v.parse().expect("replays")),
            opt("--expect"),
            args.iter().any(|a| a == "--refused"),
            opt("--capture")
                .map_or(Ok(coll::device::CaptureMode::Relaxed), |v| v.parse())
                .expect("capture mode"),
        ),
        Some("p2p-size-mismatch") => {
            coll::p2p::size_mismatch(&opt("--sizes").map_or(vec![4096, 8192], |v| parse_sizes(&v)))
        }
        Some("devnet-ring") => coll::devnet::ring(
            args[1].parse().expect("rounds"),
            args[2].parse().expect("count"),
            args[3].parse().expect("chunk"),
            args.iter().any(|a| a == "--faults"),
        ),
        Some("devnet-killed") => coll::devnet::killed(),
        Some("devnet-fake") => coll::devnet_fake::run(),
        Some("devnet-none") => coll::devnet_fake::none(),
        Some("devnet-pingpong") => {
            coll::devnet::pingpong(args[1].parse().expect("iterations"), &parse_sizes(&args[2]))
        }
        Some("devnet-moe") => coll::moe::run(
            args[1].parse().expect("steps"),
            args[2].parse().expect("tokens"),
            args[3].parse().expect("hidden bytes"),
            args[4].parse().expect("k"),
            args.iter().any(|a| a == "--bench"),
            args.iter().any(|a| a == "--host"),
        ),
        Some("host-p2p") => coll::host_p2p::run(args[1].parse().expect("rounds"), &args[2]),
        Some("host-p2p-size") => coll::host_p2p::size_mismatch(),
        Some("host-sendrecv") => coll::host_p2p::sendrecv(args[1].parse().expect("rounds")),
        Some("host-p2p-lazy") => coll::host_p2p::lazy_connections(),
        Some("host-p2p-setup-death") => coll::host_p2p::setup_death(),
        Some("host-p2p-two-comms") => coll::host_p2p::two_comms(),
        Some("host-p2p-setup-timeout") => coll::host_p2p::setup_timeout(),
        Some("shrink") => coll::shrink::run(),
        Some("coll-plugin") => coll::plugin::run(
            opt("--expect"),
            opt("--mem").as_deref() == Some("cuda"),
            &opt("--counts").map_or(vec![0, 1, 7, 1000], |v| parse_sizes(&v)),
            opt("--cycles").map_or(0, |v| v.parse().expect("cycles")),
        ),
        Some("coll-repeat") => coll::repeat::run(opt("--expect")),
        Some("window-mismatch") => coll::plugin::mismatched_window(),
        Some("coll-plugin-loop") => coll::plugin::loop_until_error(
            args[1].parse().expect("size"),
            opt("--victim").map_or(1, |v| v.parse().expect("victim")),
            opt("--kill-after-ms").map_or(500, |v| v.parse().expect("ms")),
            match opt("--coll").as_deref() {
                Some("all_reduce") => ferrocx::CollKind::AllReduce,
                _ => ferrocx::CollKind::AllGather,
            },
        ),
        Some("coll-graph") => coll::plugin::graph(coll::plugin::GraphOpts {
            replays: opt("--replays").map_or(1000, |v| v.parse().expect("replays")),
            expect: opt("--expect"),
            mismatch: args.iter().any(|a| a == "--mismatch"),
            stop_after: opt("--stop-after").map(|v| v.parse().expect("replays")),
            block: opt("--block").map_or(64 << 10, |v| parse_sizes(&v)[0]),
            mixed: args.iter().any(|a| a == "--mixed"),
            fork: args.iter().any(|a| a == "--fork"),
            timed: opt("--timed").map_or(0, |v| v.parse().expect("replays")),
            capture: opt("--capture")
                .map_or(Ok(coll::device::CaptureMode::Relaxed), |v| v.parse())
                .expect("capture mode"),
            held: args.iter().any(|a| a == "--held"),
            early_destroy: opt("--early-destroy").map_or(0, |v| v.parse().expect("replays")),
        }),
        Some("dropped-in-capture") => {
            coll::capture_drop::dropped_in_capture(args.get(1).map_or("abort", |s| s.as_str()))
        }
        Some("mixed-soak") => coll::soak::mixed(
            args[1].parse().expect("max bytes"),
            args[2].parse().expect("seconds"),
            args.get(3)
                .map_or(1, |m| m.parse().expect("minimum iterations")),
        ),
        Some("a2a-soak") => coll::soak::all_to_all(
            args[1].parse().expect("bytes"),
            args[2].parse().expect("seconds"),
            args.get(3)
                .map_or(1, |m| m.parse().expect("minimum iterations")),
        ),
        other => Err(format!("unknown scenario {other:?}")),
    };
    match r {
        Ok(msg) => {
            println!("PASS {msg}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            println!("FAIL {msg}");
            ExitCode::from(1)
        }
    }
}

/// Every rank exchanges `size` bytes with every other rank in one group, for each size.
fn pairs(sizes: &[usize], register: bool, expect: Option<String>) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let (me, n) = (comm.rank(), comm.nranks());
    for r in comm.plugin_report() {
        println!(
            "plugin {} {} {}",
            r.name,
            r.source,
            r.skipped.as_deref().unwrap_or("loaded")
        );
    }
    let mut used = Vec::new();
    for p in (0..n).filter(|&p| p != me) {
        let t = comm.transport_to(p).map_err(|e| e.to_string())?;
        if let Some(x) = &expect {
            if &t != x {
                return Err(format!("transport to rank {p} is {t}, expected {x}"));
            }
        }
        used.push(t);
    }
    for &size in sizes {
        let sends: Vec<Vec<u8>> = (0..n)
            .map(|p| (0..size).map(|i| pattern(me, p, size, i)).collect())
            .collect();
        let mut recvs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; size]).collect();
        let regs = if register && size > 0 {
            let mut v = Vec::new();
            for b in sends.iter().chain(recvs.iter()) {
                v.push(comm.register(b).map_err(|e| e.to_string())?);
            }
            v
        } else {
            Vec::new()
        };
        {
            let mut g = comm.group_start();
            for (p, (s, r)) in sends.iter().zip(recvs.iter_mut()).enumerate() {
                if p != me {
                    g.send(s, p).map_err(|e| e.to_string())?;
                    g.recv(r, p).map_err(|e| e.to_string())?;
                }
            }
            g.group_end().map_err(|e| format!("size {size}: {e}"))?;
        }
        for (p, r) in recvs.iter().enumerate().filter(|(p, _)| *p != me) {
            if let Some(i) = (0..size).find(|&i| r[i] != pattern(p, me, size, i)) {
                return Err(format!(
                    "size {size}: byte {i} from rank {p} is {} expected {}",
                    r[i],
                    pattern(p, me, size, i)
                ));
            }
        }
        for h in regs {
            comm.deregister(h).map_err(|e| e.to_string())?;
        }
    }
    if comm.registration_count() != 0 {
        return Err(format!(
            "{} registrations leaked",
            comm.registration_count()
        ));
    }
    comm.destroy().map_err(|e| e.to_string())?;
    Ok(format!(
        "rank {me}: sizes {sizes:?} verified with every peer via {used:?} (registered: {register})"
    ))
}

/// Ring exchange until an error; the victim kills itself mid-transfer.
fn ring_loop(
    size: usize,
    victim: Option<usize>,
    kill_after_ms: Option<u64>,
) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let (me, n) = (comm.rank(), comm.nranks());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    if victim == Some(me) {
        let ms = kill_after_ms.unwrap_or(300);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            // SAFETY: plain libc calls on our own pid.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
    }
    let out = vec![me as u8; size];
    let mut inp = vec![0u8; size];
    let start = Instant::now();
    let mut iters = 0u64;
    while start.elapsed() < Duration::from_secs(60) {
        let mut g = comm.group_start();
        g.send(&out, right).map_err(|e| e.to_string())?;
        g.recv(&mut inp, left).map_err(|e| e.to_string())?;
        match g.group_end() {
            Ok(()) => iters += 1,
            Err(e) => {
                let elapsed = start.elapsed();
                println!(
                    "ERROR after {iters} iterations, {:.2}s: {e}",
                    elapsed.as_secs_f64()
                );
                return match (victim, e.peer()) {
                    (Some(v), Some(p)) if p == v => {
                        Ok(format!("rank {me} saw the failure of rank {v}: {e}"))
                    }
                    (Some(v), _) if e.to_string().contains(&format!("rank {v}")) => {
                        Ok(format!("rank {me}: {e}"))
                    }
                    _ => Err(format!("unexpected error: {e}")),
                };
            }
        }
    }
    Err(format!("no error after {iters} iterations"))
}

fn expect_err(what: &str, r: ferrocx::Result<()>, needle: &str) -> Result<(), String> {
    match r {
        Ok(()) => Err(format!("{what}: succeeded but should fail")),
        Err(e) if e.to_string().contains(needle) => {
            println!("ok: {what}: {e}");
            Ok(())
        }
        Err(e) => Err(format!("{what}: error does not mention '{needle}': {e}")),
    }
}

/// Bad input on 2 ranks: errors, no panic, no hang, communicator still usable.
fn badinput() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let me = comm.rank();
    let peer = 1 - me;
    let buf = vec![1u8; 64];
    expect_err("peer out of range", comm.send(&buf, 7), "out of range")?;
    expect_err("send to self", comm.send(&buf, me), "itself")?;
    let mut g = comm.group_start();
    expect_err(
        "null buffer",
        // SAFETY: a null pointer is what we test; the call must reject it without touching memory.
        unsafe { g.send_raw(std::ptr::null(), 16, peer) },
        "null",
    )?;
    expect_err(
        "wrapping buffer",
        // SAFETY: as above.
        unsafe { g.recv_raw(usize::MAX as *mut u8, 16, peer) },
        "wrap",
    )?;
    drop(g);
    // Sender sends 100 bytes; receiver posts 50 (too small) then 200 (too large).
    if me == 0 {
        comm.send(&[5u8; 100], 1).map_err(|e| e.to_string())?;
        comm.send(&[6u8; 100], 1).map_err(|e| e.to_string())?;
    } else {
        let mut small = vec![0u8; 50];
        expect_err(
            "receive smaller than the message",
            comm.recv(&mut small, 0),
            "100",
        )?;
        let mut large = vec![0u8; 200];
        expect_err(
            "receive larger than the message",
            comm.recv(&mut large, 0),
            "mismatched sizes",
        )?;
    }
    // Still usable afterwards.
    let out = vec![me as u8 + 10; 4096];
    let mut inp = vec![0u8; 4096];
    let mut g = comm.group_start();
    g.send(&out, peer).map_err(|e| e.to_string())?;
    g.recv(&mut inp, peer).map_err(|e| e.to_string())?;
    g.group_end()
        .map_err(|e| format!("exchange after bad input: {e}"))?;
    if inp.iter().any(|&b| b != peer as u8 + 10) {
        return Err("data after bad input is wrong".into());
    }
    comm.destroy().map_err(|e| e.to_string())?;
    expect_err(
        "send on a destroyed communicator",
        comm.send(&buf, peer),
        "destroyed",
    )?;
    match comm.destroy() {
        Err(Error::Destroyed(_)) => {}
        other => return Err(format!("second destroy: {other:?}")),
    }
    Ok(format!("rank {me}: bad input rejected"))
}

/// Groups posted in a different order on every rank, several messages per
/// peer in one group (matched in posting order), for `rounds` rounds.
fn groups(rounds: usize) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let (me, n) = (comm.rank(), comm.nranks());
    let sizes = [0usize, 3, 4096, 70_000];
    for round in 0..rounds {
        let peers: Vec<usize> = (0..n).filter(|&p| p != me).collect();
        let sends: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|p| {
                sizes
                    .iter()
                    .map(|&z| (0..z).map(|i| pattern(me, p, z + round, i)).collect())
                    .collect()
            })
            .collect();
        let mut recvs: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|_| sizes.iter().map(|&z| vec![0u8; z]).collect())
            .collect();
        let mut g = comm.group_start();
        // Receives first on odd ranks, sends first on even ranks; peers in rotated order.
        let order: Vec<usize> = peers
            .iter()
            .cycle()
            .skip(me + round)
            .take(peers.len())
            .copied()
            .collect();
        if me % 2 == 0 {
            post_sends(&mut g, &sends, &order)?;
        }
        for (p, bufs) in recvs.iter_mut().enumerate().filter(|(p, _)| *p != me) {
            for b in bufs.iter_mut() {
                g.recv(b, p).map_err(|e| e.to_string())?;
            }
        }
        if me % 2 == 1 {
            post_sends(&mut g, &sends, &order)?;
        }
        g.group_end().map_err(|e| format!("round {round}: {e}"))?;
        for p in peers {
            for (k, &z) in sizes.iter().enumerate() {
                if let Some(i) = (0..z).find(|&i| recvs[p][k][i] != pattern(p, me, z + round, i)) {
                    return Err(format!(
                        "round {round}: message {k} from rank {p} wrong at byte {i}"
                    ));
                }
            }
        }
    }
    comm.destroy().map_err(|e| e.to_string())?;
    Ok(format!(
        "rank {me}: {rounds} rounds of mixed-order groups verified"
    ))
}

/// Rank 1 stays alive but never sends: rank 0's receive must time out naming
/// it, during connection setup or (`data`) on an established connection.
fn stall(data: bool) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    if data {
        // Establish both directions first.
        let peer = 1 - comm.rank();
        let out = [9u8; 64];
        let mut inp = [0u8; 64];
        let mut g = comm.group_start();
        g.send(&out, peer).map_err(|e| e.to_string())?;
        g.recv(&mut inp, peer).map_err(|e| e.to_string())?;
        g.group_end().map_err(|e| e.to_string())?;
    }
    if comm.rank() == 1 {
        std::thread::sleep(comm.timeout() * 3);
        return Ok("rank 1 stalled".into());
    }
    let start = Instant::now();
    let mut buf = vec![0u8; 64];
    match comm.recv(&mut buf, 1) {
        Ok(()) => Err("receive from a silent peer succeeded".into()),
        // The timeout, with every rank's state (`Error::Hang`).
        Err(e @ Error::Hang { rank: 0, .. }) => {
            println!("ERROR after {:.2}s: {e}", start.elapsed().as_secs_f64());
            let again = comm.send(&buf, 1);
            match again {
                Err(Error::Destroyed(m)) if m.contains("timed out") => {
                    Ok(format!("rank 0: {e}; later calls: {m}"))
                }
                other => Err(format!(
                    "after a timeout the communicator should refuse work: {other:?}"
                )),
            }
        }
        Err(e) => Err(format!("unexpected error: {e}")),
    }
}

/// Rank 1 aborts while rank 0 waits on it: rank 0 fails naming rank 1.
fn abort() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    if comm.rank() == 1 {
        std::thread::sleep(Duration::from_millis(300));
        comm.abort();
        let r = comm.send(&[1u8; 8], 0);
        return match r {
            Err(Error::Destroyed(m)) if m.contains("aborted") => Ok("rank 1 aborted".into()),
            other => Err(format!("use after abort: {other:?}")),
        };
    }
    let mut buf = vec![0u8; 64];
    match comm.recv(&mut buf, 1) {
        Err(e @ Error::PeerFailed { rank: 1, .. }) => Ok(format!("rank 0: {e}")),
        other => Err(format!("expected rank 1's abort, got {other:?}")),
    }
}

fn post_sends<'a>(
    g: &mut ferrocx::Group<'a>,
    sends: &'a [Vec<Vec<u8>>],
    order: &[usize],
) -> Result<(), String> {
    for &p in order {
        for b in &sends[p] {
            g.send(b, p).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Rank 0 sends 4 KiB to rank 1 and nothing else.
/// `oneway [late]`: rank 0 sends 4 KiB to rank 1; with `late`, rank 1
/// posts its receive only after rank 0's request (or refusal) is in.
fn oneway(late: bool) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let mut buf = vec![comm.rank() as u8; 4096];
    if late && comm.rank() == 1 {
        std::thread::sleep(Duration::from_millis(300));
    }
    let r = if comm.rank() == 0 {
        // A failed send is tried once more: what the communicator says then
        // (broken or not) is part of the report.
        comm.send(&buf, 1).map_err(|e| {
            let again = comm.send(&buf, 1).err().map(|e| e.to_string());
            format!("{e}\nAGAIN: {again:?}")
        })
    } else {
        comm.recv(&mut buf, 0).map_err(|e| e.to_string())
    };
    r?;
    comm.destroy().map_err(|e| e.to_string())?;
    Ok(format!("rank {} done", comm.rank()))
}

/// CPU time (user + system) this process has used so far.
fn cpu_time() -> Duration {
    let mut ru: libc::rusage = unsafe_zeroed_rusage();
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn unsafe_zeroed_rusage() -> libc::rusage {
    // SAFETY: rusage is plain data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// After connecting and exchanging, a communicator with nothing in flight must
/// not burn CPU: its service and progress threads park.
fn idle() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let peer = 1 - comm.rank();
    let out = vec![1u8; 1 << 20];
    let mut inp = vec![0u8; 1 << 20];
    for _ in 0..10 {
        let mut g = comm.group_start();
        g.send(&out, peer).map_err(|e| e.to_string())?;
        g.recv(&mut inp, peer).map_err(|e| e.to_string())?;
        g.group_end().map_err(|e| e.to_string())?;
    }
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_time() - before;
    comm.barrier().map_err(|e| e.to_string())?;
    comm.destroy().map_err(|e| e.to_string())?;
    println!("cpu while idle for 2 s: {} ms", used.as_millis());
    if used > Duration::from_millis(50) {
        return Err(format!(
            "rank {} used {} ms of CPU in 2 s with nothing in flight: a thread is spinning",
            comm.rank(),
            used.as_millis()
        ));
    }
    Ok(format!("rank {} idle", comm.rank()))
}
