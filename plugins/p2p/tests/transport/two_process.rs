//! Two real processes: this test binary re-runs itself as rank 1 (selected by
//! `FXP2P_CHILD`), and the two exchange their connect blobs as hex text over
//! the child's stdin and stdout — plain bytes are all a peer gets. Each
//! process sets up one connection in each direction and moves data both ways
//! at once; every receiver checks every byte.
//!
//! Every scenario runs on the host-memory stand-in, and on CUDA when a driver
//! and a GPU are present (parent on GPU 0, child on GPU 1 when there are two;
//! otherwise both on GPU 0). Without CUDA the CUDA runs print `SKIPPED`.
//!
//! `FXP2P_CYCLES=N` sets the register/transfer/free cycles of the leak test.

use crate::common::*;
use ferrocx_p2p::{Config, Direct, P2p, P2pConn, P2pRequest};
use ferrocx_sdk::abi::{FX_DIR_RECV, FX_DIR_SEND, FX_REMOTE};
use ferrocx_sdk::{Blob, PluginError, Transport};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

const ENV_CHILD: &str = "FXP2P_CHILD";
const ENV_MODE: &str = "FXP2P_MODE";
const ENV_DEV: &str = "FXP2P_DEV";
const ENV_CONN: &str = "FXP2P_CONN";
const ENV_PARENT: &str = "FXP2P_PARENT";

/// The configuration both processes use in a scenario.
fn config(scenario: &str) -> Config {
    let d = Config::default();
    match scenario {
        "fifo" => ring(d, |r| r.direct = Direct::Off),
        "registered" => ring(d, |r| r.direct = Direct::Registered),
        "mixed" => ring(d, |r| {
            r.chunk_size = 64 << 10;
            r.nslots = 4;
        }),
        _ => d,
    }
}

/// The messages each side sends in a data scenario.
fn messages(scenario: &str) -> Vec<Msg> {
    let big = if scenario == "mixed" {
        16 * MIB
    } else {
        256 * MIB
    };
    let mut sizes = vec![0, 1, 7, 4097, 16_383, 65_541, MIB, MIB + 3, big];
    // Many messages in flight: posted together, completed in any order.
    sizes.extend((0..300).map(|i| (i * 7919) % 70_000));
    sizes
        .into_iter()
        .enumerate()
        .map(|(i, len)| {
            let m = Msg::dev(len);
            match scenario {
                "host" => Msg {
                    src: Mem::Host,
                    dst: Mem::Host,
                    ..m
                },
                "mixed" => Msg {
                    src: if i % 2 == 0 { Mem::Host } else { Mem::Device },
                    dst: if i % 3 == 0 { Mem::Host } else { Mem::Device },
                    ..m
                },
                "registered" => Msg {
                    register: i % 2 == 0 && len > 0,
                    ..m
                },
                _ => m,
            }
        })
        .collect()
}

/// How many of `msgs` must arrive by direct copy in `scenario`.
fn expected_direct(scenario: &str, msgs: &[Msg]) -> Option<u64> {
    let min = Config::default().ring.direct_min;
    let n = |f: &dyn Fn(&Msg) -> bool| msgs.iter().filter(|m| m.len >= min && f(m)).count() as u64;
    match scenario {
        "fifo" | "host" => Some(0),
        "direct" => Some(n(&|_| true)),
        "registered" => Some(n(&|m| m.register)),
        _ => None,
    }
}

/// One process's two ends.
struct Ends {
    p2p: P2p,
    tx: P2pConn,
    rx: P2pConn,
    mode: Mode,
    dev: i32,
}

fn tag_base(rank: i32) -> u64 {
    1000 + 100_000 * rank as u64
}

/// Send `msgs` to the peer and receive the peer's `msgs`, at once; check everything.
fn run_data(e: &mut Ends, scenario: &str, rank: i32) {
    let msgs = messages(scenario);
    let Ends {
        p2p,
        tx,
        rx,
        mode,
        dev,
    } = e;
    let (p2p, mode, dev) = (&*p2p, *mode, *dev);
    let start = Instant::now();
    let (sent, received) = std::thread::scope(|s| {
        let sender = s.spawn(|| send_all(p2p, tx, mode, dev, &msgs, tag_base(rank)));
        let received = recv_all(p2p, rx, mode, dev, &msgs, tag_base(1 - rank));
        (sender.join().expect("sender thread"), received)
    });
    let secs = start.elapsed().as_secs_f64();
    let bytes: usize = msgs.iter().map(|m| m.len).sum();
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(
            sent[i].as_ref().map_err(PluginError::to_string),
            Ok(&m.len),
            "rank {rank} {scenario}: send {i}"
        );
        assert_eq!(
            received[i].as_ref(),
            Ok(&m.len),
            "rank {rank} {scenario}: receive {i}"
        );
    }
    let (ts, rs) = (tx.stats(), rx.stats());
    eprintln!(
        "rank {rank} {scenario} ({}): {} messages, {bytes} B each way in {secs:.2} s; sent {ts:?}; received {rs:?}",
        mode.name(),
        msgs.len()
    );
    if let Some(want) = expected_direct(scenario, &msgs) {
        assert_eq!(rs.direct_messages, want, "rank {rank} {scenario}: {rs:?}");
    }
    assert_eq!(rs.direct_messages + rs.fifo_messages, msgs.len() as u64);
}

/// Rank `me`'s ends: `tx` on connection `ids.0` (parent → child when me = 0).
fn setup_ends(
    mode: Mode,
    scenario: &str,
    me: i32,
    dev: i32,
    peer_dev: i32,
    peer_pid: i32,
    ids: (u64, u64),
) -> (P2p, P2pConn, Blob, P2pConn, Blob) {
    let p2p = ferrocx_p2p::with_driver(host().0, config(scenario), driver(mode)).expect("context");
    let (mine, theirs) = (
        peer_info(mode, me, my_pid(), dev),
        peer_info(mode, 1 - me, peer_pid, peer_dev),
    );
    // The parent sends on ids.0 and receives on ids.1; the child the opposite.
    let (send_id, recv_id) = if me == 0 { ids } else { (ids.1, ids.0) };
    let mut tb = Blob::new();
    let tx = p2p
        .setup(&conn_req(FX_DIR_SEND, mine, theirs, send_id), &mut tb)
        .expect("sender setup");
    let mut rb = Blob::new();
    let rx = p2p
        .setup(&conn_req(FX_DIR_RECV, mine, theirs, recv_id), &mut rb)
        .expect("receiver setup");
    (p2p, tx, tb, rx, rb)
}

fn parse_blobs(line: &str) -> Option<(Blob, Blob)> {
    let at = line.find("BLOBS ")?;
    let mut it = line[at + 6..].split_whitespace();
    Some((unhex(it.next()?), unhex(it.next()?)))
}

/// The child: rank 1.
#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var(ENV_CHILD) else {
        return;
    };
    let mode = Mode::parse(&std::env::var(ENV_MODE).unwrap());
    let dev: i32 = std::env::var(ENV_DEV).unwrap().parse().unwrap();
    let parent: i32 = std::env::var(ENV_PARENT).unwrap().parse().unwrap();
    let base: u64 = std::env::var(ENV_CONN).unwrap().parse().unwrap();
    let (p2p, mut tx, tb, mut rx, rb) =
        setup_ends(mode, &scenario, 1, dev, 0, parent, (base + 1, base + 2));
    println!("BLOBS {} {}", hex(&tb), hex(&rb));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (parent_tx, parent_rx) = parse_blobs(&line).expect("parent blobs");
    connect_until_done(&p2p, &mut tx, &parent_rx);
    connect_until_done(&p2p, &mut rx, &parent_tx);
    let mut e = Ends {
        p2p,
        tx,
        rx,
        mode,
        dev,
    };
    match scenario.as_str() {
        "hang" => {
            println!("CONNECTED");
            std::thread::sleep(Duration::from_secs(120));
        }
        "cycles" => child_cycles(&mut e),
        s => run_data(&mut e, s, 1),
    }
    let Ends { p2p, tx, rx, .. } = e;
    p2p.free(tx).unwrap();
    p2p.free(rx).unwrap();
    p2p.finalize().unwrap();
    println!("CHILD OK");
}

/// The parent's view of a running child.
struct Running {
    child: Child,
    stdin: ChildStdin,
    ends: Ends,
    /// Lines the child printed after its blobs.
    lines: std::sync::mpsc::Receiver<String>,
}

fn start(mode: Mode, scenario: &str) -> Running {
    let (dev, child_dev) = match mode {
        Mode::Cuda if cuda_devices() >= 2 => (0, 1),
        _ => (0, 0),
    };
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let base =
        ((my_pid() as u64) << 24) | (RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 4);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_process::child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_CHILD, scenario)
        .env(ENV_MODE, mode.name())
        .env(ENV_DEV, child_dev.to_string())
        .env(ENV_CONN, base.to_string())
        .env(ENV_PARENT, my_pid().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // The child's pid only arrives with its process; blobs carry it for the receiver.
    let (p2p, mut tx, tb, mut rx, rb) = setup_ends(
        mode,
        scenario,
        0,
        dev,
        child_dev,
        child.id() as i32,
        (base + 1, base + 2),
    );
    writeln!(stdin, "BLOBS {} {}", hex(&tb), hex(&rb)).unwrap();
    stdin.flush().unwrap();
    let mut line = String::new();
    let blobs = loop {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            break None;
        }
        if let Some(b) = parse_blobs(&line) {
            break Some(b);
        }
    };
    let Some((child_tx, child_rx)) = blobs else {
        let _ = child.kill();
        panic!("child exited without its blobs: {:?}", child.wait());
    };
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            eprintln!("[child] {l}");
            let _ = send.send(l);
        }
    });
    connect_until_done(&p2p, &mut tx, &child_rx);
    connect_until_done(&p2p, &mut rx, &child_tx);
    Running {
        child,
        stdin,
        ends: Ends {
            p2p,
            tx,
            rx,
            mode,
            dev,
        },
        lines,
    }
}

/// Free our ends, then wait for the child to exit successfully (killing it after `DEADLINE`).
fn finish(r: Running) {
    let Running {
        mut child,
        stdin,
        ends,
        lines,
    } = r;
    let Ends { p2p, tx, rx, .. } = ends;
    p2p.free(tx).unwrap();
    p2p.free(rx).unwrap();
    drop(stdin);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("child did not finish in {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The reader thread forwards the child's last lines shortly after it exits.
    let saw_ok = (0..200).any(|_| {
        lines.try_iter().any(|l| l.contains("CHILD OK")) || {
            std::thread::sleep(Duration::from_millis(10));
            false
        }
    });
    assert!(status.success() && saw_ok, "child failed: {status:?}");
    let left = p2p.stats();
    assert_eq!(left.open_handles, 0, "mappings left open: {left:?}");
    assert_eq!(left.graveyard, 0, "FIFOs left: {left:?}");
    p2p.finalize().unwrap();
}

fn data_scenario(scenario: &str) {
    let _one_at_a_time = serial();
    for mode in modes(scenario) {
        eprintln!("== {scenario} on {}", mode.name());
        let mut r = start(mode, scenario);
        run_data(&mut r.ends, scenario, 0);
        finish(r);
    }
}

#[test]
fn fifo_both_directions() {
    data_scenario("fifo");
}

#[test]
fn direct_into_unregistered_device_buffers() {
    data_scenario("direct");
}

#[test]
fn direct_into_registered_buffers_only() {
    data_scenario("registered");
}

#[test]
fn pageable_host_buffers() {
    data_scenario("host");
}

#[test]
fn host_and_device_mixed_through_a_small_fifo() {
    data_scenario("mixed");
}

fn wait_failure(p: &P2p, req: &mut P2pRequest, within: Duration) -> PluginError {
    let start = Instant::now();
    loop {
        match p.test(req) {
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Ok(Some(n)) => panic!("completed with {n} bytes after the peer was killed"),
            Err(e) => return e,
        }
        assert!(start.elapsed() < within, "no failure within {within:?}");
    }
}

#[test]
fn a_killed_peer_fails_pending_requests() {
    let _one_at_a_time = serial();
    for mode in modes("kill") {
        let mut r = start(mode, "hang");
        let t0 = Instant::now();
        while !r.lines.try_iter().any(|l| l.contains("CONNECTED")) {
            assert!(t0.elapsed() < DEADLINE, "child never connected");
            std::thread::sleep(Duration::from_millis(5));
        }
        let e = &mut r.ends;
        if mode == Mode::Cuda {
            bind(e.dev);
        }
        let rbuf = Buf::new(mode, Mem::Device, e.dev, 100_000);
        let mut sbuf = Buf::new(mode, Mem::Device, e.dev, MIB);
        sbuf.write(&pattern(MIB, 1));
        // SAFETY: the buffers outlive the requests.
        let mut rreq = unsafe {
            e.p2p
                .irecv(&mut e.rx, rbuf.addr() as *mut u8, rbuf.len(), None)
        }
        .unwrap()
        .unwrap();
        // A large send waits for the child's offer, which never comes.
        // SAFETY: as above.
        let mut sreq = unsafe {
            e.p2p
                .isend(&mut e.tx, sbuf.addr() as *const u8, sbuf.len(), None)
        }
        .unwrap()
        .unwrap();
        assert_eq!(e.p2p.test(&mut rreq).unwrap(), None);
        assert_eq!(e.p2p.test(&mut sreq).unwrap(), None);
        let pid = r.child.id();
        r.child.kill().unwrap();
        r.child.wait().unwrap();
        let killed = Instant::now();
        for req in [&mut rreq, &mut sreq] {
            let err = wait_failure(&e.p2p, req, Duration::from_secs(5));
            assert_eq!(err.code(), FX_REMOTE, "{err}");
            assert!(
                err.message()
                    .contains(&format!("peer rank 1 (pid {pid}) exited")),
                "{err}"
            );
        }
        eprintln!(
            "{}: killed peer detected in {:?}",
            mode.name(),
            killed.elapsed()
        );
        assert!(killed.elapsed() < Duration::from_secs(2));
        let Running { ends, .. } = r;
        let Ends { p2p, tx, rx, .. } = ends;
        drop((rbuf, sbuf));
        p2p.free(tx).unwrap();
        p2p.free(rx).unwrap();
        assert_eq!(p2p.stats().open_handles, 0);
        p2p.finalize().unwrap();
    }
}

fn cycles(mode: Mode) -> usize {
    std::env::var("FXP2P_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(match mode {
            Mode::Fake => 300,
            Mode::Cuda => 10_000,
        })
}

const CYCLE_BYTES: usize = MIB;

/// Child side of the leak test: every receive goes into a fresh registered
/// allocation, deregistered and freed right after.
fn child_cycles(e: &mut Ends) {
    let n = cycles(e.mode);
    if e.mode == Mode::Cuda {
        bind(e.dev);
    }
    let mut mem_before = None;
    for i in 0..n {
        if i == 10 && e.mode == Mode::Cuda {
            mem_before = Some(mem_info(e.dev).0);
        }
        let buf = Buf::new(e.mode, Mem::Device, e.dev, CYCLE_BYTES);
        // SAFETY: the buffer outlives its registration.
        let reg = unsafe {
            e.p2p.register(
                buf.addr() as *mut u8,
                buf.len(),
                buf.kind(),
                &mut Blob::new(),
            )
        }
        .expect("register");
        let p2p = &e.p2p;
        // SAFETY: the buffer outlives the request.
        let n_got = run_all(p2p, 1, |_| unsafe {
            p2p.irecv(&mut e.rx, buf.addr() as *mut u8, buf.len(), Some(&reg))
        })
        .remove(0)
        .expect("cycle receive");
        assert_eq!(n_got, CYCLE_BYTES);
        assert!(
            buf.read(CYCLE_BYTES) == pattern(CYCLE_BYTES, i as u64),
            "cycle {i} differs"
        );
        e.p2p.deregister(reg).unwrap();
        drop(buf);
    }
    assert_eq!(e.rx.stats().direct_messages, n as u64, "{:?}", e.rx.stats());
    assert_eq!(e.p2p.stats().exports, 0, "every registration was released");
    // Tell the parent we are done (after the last revocation was written).
    let done = Buf::new(e.mode, Mem::Host, e.dev, 8);
    let p2p = &e.p2p;
    // SAFETY: `done` outlives the request.
    run_all(p2p, 1, |_| unsafe {
        p2p.isend(&mut e.tx, done.addr() as *const u8, 8, None)
    })
    .remove(0)
    .unwrap();
    let mut fin = [0u8; 8];
    // SAFETY: `fin` outlives the request.
    run_all(p2p, 1, |_| unsafe {
        p2p.irecv(&mut e.rx, fin.as_mut_ptr(), 8, None)
    })
    .remove(0)
    .unwrap();
    if let Some(before) = mem_before {
        let after = mem_info(e.dev).0;
        eprintln!(
            "child GPU {}: free memory {before} B after warm-up, {after} B after {n} cycles",
            e.dev
        );
        // A leaked allocation per cycle would be n MiB; allow for driver noise.
        assert!(
            after + 32 * MIB >= before,
            "GPU memory leaked: {} B over {n} cycles",
            before - after
        );
    }
}

#[test]
fn register_transfer_free_cycles_leak_nothing() {
    let _one_at_a_time = serial();
    for mode in modes("cycles") {
        let mut r = start(mode, "cycles");
        {
            let e = &mut r.ends;
            if mode == Mode::Cuda {
                bind(e.dev);
            }
            let baseline = e.p2p.stats().open_handles;
            assert_eq!(baseline, 1, "only the child's FIFO is mapped");
            let n = cycles(mode);
            let mut buf = Buf::new(mode, Mem::Device, e.dev, CYCLE_BYTES);
            let mut peak = 0;
            let t0 = Instant::now();
            for i in 0..n {
                buf.write(&pattern(CYCLE_BYTES, i as u64));
                let (p2p, tx) = (&e.p2p, &mut e.tx);
                // SAFETY: `buf` outlives the request.
                run_all(p2p, 1, |_| unsafe {
                    p2p.isend(tx, buf.addr() as *const u8, CYCLE_BYTES, None)
                })
                .remove(0)
                .expect("cycle send");
                peak = peak.max(p2p.stats().open_handles);
            }
            let (p2p, tx, rx) = (&e.p2p, &mut e.tx, &mut e.rx);
            // The child says "done" after its last deregistration...
            let mut done = [0u8; 8];
            // SAFETY: `done` outlives the request.
            run_all(p2p, 1, |_| unsafe {
                p2p.irecv(rx, done.as_mut_ptr(), 8, None)
            })
            .remove(0)
            .unwrap();
            // ...so progress on our sending end now reads every revocation.
            let fin = [1u8; 8];
            // SAFETY: `fin` outlives the request.
            run_all(p2p, 1, |_| unsafe { p2p.isend(tx, fin.as_ptr(), 8, None) })
                .remove(0)
                .unwrap();
            let open = p2p.stats().open_handles;
            let ts = tx.stats();
            eprintln!(
                "{}: {n} register/transfer/deregister/free cycles in {:.2} s; open handles: {baseline} before, at most {peak} during, {open} after; {ts:?}",
                mode.name(),
                t0.elapsed().as_secs_f64()
            );
            assert_eq!(ts.direct_messages, n as u64);
            assert!(peak <= baseline + 2, "mappings piled up: {peak}");
            assert_eq!(open, baseline, "revoked mappings were closed");
            assert_eq!(ts.mappings, 0);
        }
        finish(r);
    }
}
