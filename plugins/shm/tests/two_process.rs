//! Two real processes: this test binary re-runs itself as the sending rank
//! (selected by `FXSHM_CHILD`), blobs travel as hex over the environment and stdout.

mod common;

use common::*;
use ferrocx_sdk::abi::{FX_DIR_RECV, FX_DIR_SEND};
use ferrocx_sdk::{Blob, ConnectState, MemKind, Transport};
use ferrocx_shm::config;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [usize; 5] = [0, 7, 100_000, (1 << 20) + 3, 16 << 20];

/// Spawn the peer rank (`mode`: "send" and "hang" make it the sender,
/// "recv-hang" the receiver) with our blob; returns it and its blob.
fn spawn_peer(mode: &str, rx_blob: &Blob, conn_id: u64) -> (Child, Blob) {
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

/// The peer rank (runs only in the child process).
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var("FXSHM_CHILD") else {
        return;
    };
    let rx_blob = unhex(&std::env::var("FXSHM_BLOB").unwrap());
    let conn_id: u64 = std::env::var("FXSHM_CONN").unwrap().parse().unwrap();
    let parent: i32 = std::env::var("FXSHM_PARENT").unwrap().parse().unwrap();
    let shm = context(config::defaults());
    if mode == "recv-hang" {
        // Receive nothing, stay until killed.
        let (me, peer) = (peer_info(1, my_pid()), peer_info(0, parent));
        let mut blob = Blob::new();
        let mut conn = shm
            .setup(&conn_req(FX_DIR_RECV, me, peer, conn_id), &mut blob)
            .unwrap();
        println!("BLOB {}", hex(&blob));
        connect_until_done(&shm, &mut conn, &rx_blob);
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
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
        .map(|m| post_until(|| unsafe { shm.isend(&mut conn, m.as_ptr(), m.len(), None) }))
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
    let shm = context(config::defaults());
    let (me, peer) = (peer_info(1, my_pid()), peer_info(0, 0));
    let mut blob = Blob::new();
    let conn = shm
        .setup(&conn_req(FX_DIR_RECV, me, peer, conn_id), &mut blob)
        .unwrap();
    (shm, conn, blob)
}

#[test]
fn ring_and_single_copy_across_processes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (shm, mut conn, rx_blob) = receiver(0xabc);
    let (mut child, tx_blob) = spawn_peer("send", &rx_blob, 0xabc);
    connect_until_done(&shm, &mut conn, &tx_blob);
    assert!(our_segments("shm").is_empty(), "unlinked once connected");
    let mut bufs: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0u8; n]).collect();
    let handles: Vec<_> = bufs
        .iter_mut()
        .map(|b| {
            // SAFETY: each buffer outlives its registration and request.
            unsafe { shm.register(b.as_mut_ptr(), b.len(), MemKind::Host, &mut Blob::new()) }
                .unwrap()
        })
        .collect();
    let reqs = bufs
        .iter_mut()
        .zip(&handles)
        .map(|(b, h)| {
            // SAFETY: buffers untouched until the requests finished.
            post_until(|| unsafe { shm.irecv(&mut conn, b.as_mut_ptr(), b.len(), Some(h)) })
        })
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
        stats.direct_messages + stats.fifo_messages,
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
    let (mut child, tx_blob) = spawn_peer("hang", &rx_blob, 0xdef);
    connect_until_done(&shm, &mut conn, &tx_blob);
    let mut buf = vec![0u8; 100];
    // SAFETY: `buf` outlives the request.
    let mut req = post_until(|| unsafe { shm.irecv(&mut conn, buf.as_mut_ptr(), buf.len(), None) });
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
    assert!(our_segments("shm").is_empty());
}

#[test]
fn killed_receiver_is_detected_by_a_waiting_sender() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let shm = context(config::defaults());
    let (me, peer) = (peer_info(0, my_pid()), peer_info(1, 0));
    let mut tx_blob = Blob::new();
    let mut conn = shm
        .setup(&conn_req(FX_DIR_SEND, me, peer, 0xbee), &mut tx_blob)
        .unwrap();
    let (mut child, rx_blob) = spawn_peer("recv-hang", &tx_blob, 0xbee);
    assert_eq!(
        shm.connect(&mut conn, &rx_blob).unwrap(),
        ConnectState::Done
    );
    // 1 MiB waits for the receiver's offer, which never comes.
    let data = pattern(1 << 20, 9);
    // SAFETY: `data` outlives the request.
    let mut req = post_until(|| unsafe { shm.isend(&mut conn, data.as_ptr(), data.len(), None) });
    assert_eq!(shm.test(&mut req).unwrap(), None);
    child.kill().unwrap();
    let killed = Instant::now();
    let err = wait(&shm, &mut req).unwrap_err();
    let took = killed.elapsed();
    assert_eq!(err.code(), ferrocx_sdk::abi::FX_REMOTE);
    assert!(
        err.message()
            .starts_with(&format!("peer rank 1 (pid {}) exited", child.id())),
        "{err}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // Later posts report the same failure.
    // SAFETY: as above.
    let again = unsafe { shm.isend(&mut conn, data.as_ptr(), 1, None) };
    assert!(again.is_err());
    child.wait().unwrap();
    shm.free(conn).unwrap();
}
