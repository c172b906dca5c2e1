//! Two real processes: this test binary re-runs itself as the sending rank
//! (selected by `FXSHM_CHILD`), blobs travel as hex over the environment and stdout.

use ferrocx_shm as shm;

#[path = "../src/tests/harness.rs"]
mod harness;

use ferrocx_sdk::abi::{FX_DIR_RECV, FX_DIR_SEND};
use ferrocx_sdk::{Blob, ConnectState, MemKind, Transport};
use ferrocx_shm::Config;
use harness::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [usize; 5] = [0, 7, 100_000, (1 << 20) + 3, 16 << 20];

fn hex(b: &Blob) -> String {
    b.as_bytes().iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Blob {
    let bytes: Vec<u8> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect();
    let mut b = Blob::new();
    b.set_bytes(&bytes).unwrap();
    b
}

/// Spawn the sending rank with the receiver's blob; returns it and its blob.
fn spawn_sender(mode: &str, rx_blob: &Blob, conn_id: u64) -> (Child, Blob) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("FXSHM_CHILD", mode)
        .env("FXSHM_BLOB", hex(rx_blob))
        .env("FXSHM_CONN", conn_id.to_string())
        .env("FXSHM_PARENT", std::process::id().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let blob = loop {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            break None;
        }
        // The test harness may have printed "test child_entry ... " on the same line.
        if let Some(at) = line.find("BLOB ") {
            break Some(unhex(line[at + 5..].trim()));
        }
    };
    let Some(blob) = blob else {
        let _ = child.kill();
        let status = child.wait();
        panic!("child exited without a blob: {status:?}");
    };
    // Keep draining the child's output so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, blob)
}

/// The sending rank (runs only in the child process).
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var("FXSHM_CHILD") else {
        return;
    };
    let rx_blob = unhex(&std::env::var("FXSHM_BLOB").unwrap());
    let conn_id: u64 = std::env::var("FXSHM_CONN").unwrap().parse().unwrap();
    let parent: i32 = std::env::var("FXSHM_PARENT").unwrap().parse().unwrap();
    let shm = context(Config::default());
    let (me, peer) = (peer_info(0, my_pid()), peer_info(1, parent));
    let mut blob = Blob::new();
    let mut conn = shm
        .setup(&conn_req(FX_DIR_SEND, me, peer, conn_id), &mut blob)
        .unwrap();
    println!("BLOB {}", hex(&blob));
    assert_eq!(
        shm.connect(&mut conn, &rx_blob).unwrap(),
        ConnectState::Done
    );
    if mode == "hang" {
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
    let msgs: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u64))
        .collect();
    // SAFETY: `msgs` outlives the requests.
    let reqs = msgs
        .iter()
        .map(|m| post(|| unsafe { shm.isend(&mut conn, m.as_ptr(), m.len(), None) }))
        .collect();
    for r in wait_all(&shm, reqs) {
        r.unwrap();
    }
    println!("STATS {:?}", conn.stats());
    shm.free(conn).unwrap();
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The receiving rank's end (the sender's pid arrives in its blob).
fn receiver(conn_id: u64) -> (ferrocx_shm::Shm, ferrocx_shm::ShmConn, Blob) {
    let shm = context(Config::default());
    let (me, peer) = (peer_info(1, my_pid()), peer_info(0, 0));
    let mut blob = Blob::new();
    let conn = shm
        .setup(&conn_req(FX_DIR_RECV, me, peer, conn_id), &mut blob)
        .unwrap();
    (shm, conn, blob)
}

fn connect(shm: &ferrocx_shm::Shm, conn: &mut ferrocx_shm::ShmConn, tx_blob: &Blob) {
    let start = Instant::now();
    while shm.connect(conn, tx_blob).unwrap() == ConnectState::InProgress {
        assert!(start.elapsed() < DEADLINE, "sender never attached");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn ring_and_single_copy_across_processes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (shm, mut conn, rx_blob) = receiver(0xabc);
    let (mut child, tx_blob) = spawn_sender("send", &rx_blob, 0xabc);
    connect(&shm, &mut conn, &tx_blob);
    assert!(our_segments().is_empty(), "unlinked once connected");
    let mut bufs: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0u8; n]).collect();
    // SAFETY: each buffer outlives its registration and request.
    let handles: Vec<_> = bufs
        .iter_mut()
        .map(|b| {
            unsafe { shm.register(b.as_mut_ptr(), b.len(), MemKind::Host, &mut Blob::new()) }
                .unwrap()
        })
        .collect();
    let reqs = bufs
        .iter_mut()
        .zip(&handles)
        // SAFETY: buffers untouched until the requests finished.
        .map(|(b, h)| post(|| unsafe { shm.irecv(&mut conn, b.as_mut_ptr(), b.len(), Some(h)) }))
        .collect();
    for (i, r) in wait_all(&shm, reqs).into_iter().enumerate() {
        assert_eq!(r.unwrap(), SIZES[i]);
        assert!(
            bufs[i] == pattern(SIZES[i], i as u64),
            "message {i} differs"
        );
    }
    let stats = conn.stats();
    assert_eq!(
        stats.single_copy_messages + stats.ring_messages,
        SIZES.len() as u64,
        "{stats:?}"
    );
    eprintln!("cross-process receiver stats: {stats:?}");
    assert!(child.wait().unwrap().success());
    shm.free(conn).unwrap();
}

#[test]
fn killed_sender_is_detected() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (shm, mut conn, rx_blob) = receiver(0xdef);
    let (mut child, tx_blob) = spawn_sender("hang", &rx_blob, 0xdef);
    connect(&shm, &mut conn, &tx_blob);
    let mut buf = vec![0u8; 100];
    // SAFETY: `buf` outlives the request.
    let mut req = post(|| unsafe { shm.irecv(&mut conn, buf.as_mut_ptr(), buf.len(), None) });
    assert_eq!(shm.test(&mut req).unwrap(), None);
    child.kill().unwrap();
    let killed = Instant::now();
    let err = loop {
        match shm.test(&mut req) {
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Ok(Some(n)) => panic!("received {n} bytes from a killed sender"),
            Err(e) => break e,
        }
        assert!(killed.elapsed() < DEADLINE);
    };
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        killed.elapsed()
    );
    assert!(
        err.message()
            .starts_with(&format!("peer rank 0 (pid {}) exited", child.id())),
        "{err}"
    );
    child.wait().unwrap();
    assert!(our_segments().is_empty());
}
