//! A rank process for the integration tests. `fxtest-worker SCENARIO ARGS…`;
//! exits 0 when everything it checked was right, prints what went wrong otherwise.

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
    // SAFETY: a null pointer is what we test; the call must reject it without touching memory.
    expect_err(
        "null buffer",
        unsafe { g.send_raw(std::ptr::null(), 16, peer) },
        "null",
    )?;
    // SAFETY: as above.
    expect_err(
        "wrapping buffer",
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
