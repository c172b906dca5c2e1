//! Nothing of ours stays in /dev/shm: after connect, after free, after a
//! setup that never connected. A process of its own (an integration test), so
//! the unit tests' segments cannot interfere; tests here run one at a time.

mod common;

use common::*;
use ferrocx_sdk::{ConnectState, Transport};
use ferrocx_shm::config;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn names_vanish_once_both_ends_connected() {
    let _g = serial();
    let (tx_shm, rx_shm, mut tx, tx_blob, mut rx, rx_blob) = setup(
        context(config::defaults()),
        context(config::defaults()),
        my_pid(),
        my_pid(),
    );
    let name = rx.segment_name().expect("receiver has a segment");
    assert_eq!(
        our_segments("shm"),
        vec![name[1..].to_string()],
        "the segment is visible during the connect window"
    );
    assert_eq!(
        rx_shm.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::InProgress
    );
    assert_eq!(
        tx_shm.connect(&mut tx, &rx_blob).unwrap(),
        ConnectState::Done
    );
    assert!(
        our_segments("shm").is_empty(),
        "the sender unlinks after attaching"
    );
    assert_eq!(
        rx_shm.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::Done
    );
    assert!(our_segments("shm").is_empty());

    // Still usable after unlinking.
    let mut l = Link {
        tx_shm,
        rx_shm,
        tx,
        rx,
    };
    let msgs = vec![pattern(100_000, 1), pattern(0, 2)];
    let (sent, recv) = exchange(&mut l, &msgs, &[100_000, 0], true);
    assert!(sent.iter().all(|s| s.is_ok()));
    assert!(recv[0].buf == msgs[0] && recv[1].result.as_ref() == Ok(&0));

    l.free();
    assert!(our_segments("shm").is_empty());
}

#[test]
fn free_before_connect_unlinks() {
    let _g = serial();
    let (tx_shm, rx_shm, tx, _tx_blob, rx, _rx_blob) = setup(
        context(config::defaults()),
        context(config::defaults()),
        my_pid(),
        my_pid(),
    );
    assert_eq!(our_segments("shm").len(), 1);
    rx_shm.free(rx).unwrap();
    tx_shm.free(tx).unwrap();
    assert!(our_segments("shm").is_empty());
}

#[test]
fn dropped_contexts_and_connections_leave_nothing() {
    let _g = serial();
    for _ in 0..3 {
        let (_tx_shm, _rx_shm, tx, _tx_blob, rx, _rx_blob) = setup(
            context(config::defaults()),
            context(config::defaults()),
            my_pid(),
            my_pid(),
        );
        drop(rx);
        drop(tx);
    }
    let mut l = link(config::defaults());
    let (sent, _) = exchange(&mut l, &[pattern(10, 1)], &[10], false);
    assert!(sent[0].is_ok());
    drop(l);
    assert!(our_segments("shm").is_empty());
}

#[test]
fn receiver_gives_up_when_the_sender_died_before_attaching() {
    let _g = serial();
    let (_tx_shm, rx_shm, _tx, tx_blob, mut rx, _rx_blob) = setup(
        context(config::defaults()),
        context(config::defaults()),
        dead_pid(),
        my_pid(),
    );
    let start = std::time::Instant::now();
    let err = loop {
        match rx_shm.connect(&mut rx, &tx_blob) {
            Ok(ConnectState::InProgress) => std::thread::sleep(std::time::Duration::from_millis(2)),
            Ok(ConnectState::Done) => panic!("nobody attached"),
            Err(e) => break e,
        }
        assert!(start.elapsed() < DEADLINE);
    };
    assert!(err.message().starts_with("peer rank 0 (pid"), "{err}");
    assert!(err.message().contains("exited before attaching"), "{err}");
    rx_shm.free(rx).unwrap();
    assert!(our_segments("shm").is_empty());
}
