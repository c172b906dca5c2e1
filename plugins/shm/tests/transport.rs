//! The whole shm transport through its `Transport` trait, both ends in this
//! process: every path, sizes, misuse, peers that die or leave.

mod common;

use common::*;
use ferrocx_sdk::abi::{FX_INVALID_ARGUMENT, FX_UNSUPPORTED};
use ferrocx_sdk::env::ZeroCopy;
use ferrocx_sdk::same_host::ops::MAX_OPS;
use ferrocx_sdk::{Blob, ConnectState, MemKind, PluginResult, Transport};
use ferrocx_shm::cma::CmaError;
use ferrocx_shm::{config, Config, ConnStats, Shm, ShmBackend, ShmRequest, SAME_HOST_SCORE};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
const SIZES: [usize; 6] = [0, 1, 7, 4096, MIB + 3, 64 * MIB];

fn check_round_trip(l: &mut Link, sizes: &[usize], register: bool) {
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u64 + 1))
        .collect();
    let (sent, received) = exchange(l, &msgs, sizes, register);
    for (i, (s, r)) in sent.iter().zip(&received).enumerate() {
        assert_eq!(s.as_ref().unwrap(), &sizes[i], "send {i}");
        assert_eq!(r.result.as_ref().unwrap(), &sizes[i], "receive {i}");
        assert!(
            r.buf == msgs[i],
            "bytes of message {i} ({} B) differ",
            sizes[i]
        );
    }
}

/// `FERROCX_SHM_SINGLE_COPY=registered`: unregistered receives use the ring.
fn registered_only() -> Config {
    Config {
        direct: ZeroCopy::Registered,
        ..config::defaults()
    }
}

#[test]
fn ring_path_moves_every_size_intact() {
    let mut l = link(registered_only());
    check_round_trip(&mut l, &SIZES, false);
    let rx = l.rx.stats();
    assert_eq!((rx.fifo_messages, rx.direct_messages), (6, 0), "{rx:?}");
    // 0, 1, 7, 4096: one chunk each; 1 MiB + 3: 3 chunks; 64 MiB: 128 chunks of 512 KiB.
    assert_eq!(rx.fifo_chunks, 4 + 3 + 128);
    assert_eq!(l.tx.stats().fifo_chunks, rx.fifo_chunks);
}

#[test]
fn unregistered_receives_take_single_copy_by_default() {
    let mut l = link(config::defaults());
    check_round_trip(&mut l, &SIZES, false);
    let rx = l.rx.stats();
    assert_eq!((rx.fifo_messages, rx.direct_messages), (4, 2), "{rx:?}");
    assert_eq!(rx.direct_bytes, (MIB + 3 + 64 * MIB) as u64);
}

#[test]
fn single_copy_path_for_registered_receives() {
    let mut l = link(config::defaults());
    check_round_trip(&mut l, &SIZES, true);
    let (tx, rx) = (l.tx.stats(), l.rx.stats());
    // Below the 16 KiB threshold the ring is used even for registered buffers.
    let expect = ConnStats {
        fifo_messages: 4,
        fifo_chunks: 4,
        direct_messages: 2,
        direct_bytes: (MIB + 3 + 64 * MIB) as u64,
        ..ConnStats::default()
    };
    assert_eq!(rx, expect, "receiver");
    assert_eq!(tx, expect, "sender");
}

#[test]
fn single_copy_off_by_config_uses_the_ring() {
    let cfg = Config {
        direct: ZeroCopy::Off,
        ..config::defaults()
    };
    let mut l = link(cfg);
    check_round_trip(&mut l, &[MIB + 3, 100_000], true);
    assert_eq!(l.rx.stats().direct_messages, 0);
    assert_eq!(l.rx.stats().fifo_messages, 2);
}

#[test]
fn sides_with_different_thresholds_still_agree() {
    // The receiver offers its buffer but the sender goes eagerly through the ring…
    let eager_tx = Config {
        direct_min: MIB,
        ..config::defaults()
    };
    let eager_rx = Config {
        direct_min: 1024,
        ..config::defaults()
    };
    let mut l = link_with(eager_tx.clone(), eager_rx.clone(), my_pid(), my_pid());
    check_round_trip(&mut l, &[100_000, 2000, 300_000], true);
    assert_eq!(l.rx.stats().direct_messages, 0);
    // …or the sender waits for an offer that carries no address.
    let mut l = link_with(eager_rx, eager_tx, my_pid(), my_pid());
    check_round_trip(&mut l, &[100_000, 2000, 300_000], true);
    assert_eq!(l.rx.stats().fifo_messages, 3);
}

#[test]
fn small_rings_pipeline_odd_sizes() {
    let mut l = link(small_ring());
    let sizes: Vec<usize> = (0..40).map(|i| (i * 997 + i * i * 31) % 20_000).collect();
    check_round_trip(&mut l, &sizes, false);
}

#[test]
fn many_requests_in_flight_mixed_paths() {
    let cfg = Config {
        chunk_size: 8192,
        nslots: 4,
        direct_min: 16 * 1024,
        ..config::defaults()
    };
    let mut l = link(cfg);
    // 100 messages posted at once, tested newest first; a third go the direct path.
    let sizes: Vec<usize> = (0..100)
        .map(|i| {
            if i % 3 == 0 {
                20_000 + i * 101
            } else {
                i * 37 % 9000
            }
        })
        .collect();
    check_round_trip(&mut l, &sizes, true);
    let rx = l.rx.stats();
    assert_eq!(rx.direct_messages, 34, "{rx:?}");
    assert_eq!(rx.fifo_messages, 66);
}

#[test]
fn a_full_request_table_says_not_now() {
    let mut l = link(small_ring());
    let data = [7u8; 3];
    // SAFETY: `data` outlives every request.
    let send = |l: &mut Link| unsafe { l.tx_shm.isend(&mut l.tx, data.as_ptr(), data.len(), None) };
    let reqs: Vec<ShmRequest> = (0..MAX_OPS)
        .map(|_| send(&mut l).unwrap().expect("room"))
        .collect();
    assert!(
        send(&mut l).unwrap().is_none(),
        "the 257th outstanding send is refused, not lost"
    );
    let mut bufs = vec![[0u8; 3]; MAX_OPS];
    let rreqs: Vec<ShmRequest> = bufs
        .iter_mut()
        // SAFETY: `bufs` is not touched until the receives finished.
        .map(|b| post_until(|| unsafe { l.rx_shm.irecv(&mut l.rx, b.as_mut_ptr(), 3, None) }))
        .collect();
    std::thread::scope(|s| {
        let rx_shm = &l.rx_shm;
        let r = s.spawn(move || wait_all(rx_shm, rreqs));
        assert!(wait_all(&l.tx_shm, reqs)
            .iter()
            .all(|r| r.as_ref() == Ok(&3)));
        assert!(r.join().unwrap().iter().all(|r| r.as_ref() == Ok(&3)));
    });
    assert!(bufs.iter().all(|b| b == &data));
    assert!(send(&mut l).unwrap().is_some(), "room again once collected");
}

fn expect_too_long(r: &PluginResult<usize>, sent: usize, posted: usize) {
    let err = r.as_ref().unwrap_err();
    assert_eq!(err.code(), FX_INVALID_ARGUMENT);
    assert_eq!(
        err.message(),
        format!("rank 0 sent {sent} bytes but the receive posted on rank 1 holds only {posted}")
    );
}

#[test]
fn longer_message_fails_the_receive_and_the_next_arrives_intact() {
    let mut l = link(small_ring());
    // Multi-chunk overflow, then a fitting one, then a shorter one.
    let msgs = vec![pattern(10_000, 1), pattern(4000, 2), pattern(5, 3)];
    let (sent, recv) = exchange(&mut l, &msgs, &[100, 4000, 50], false);
    assert!(sent.iter().all(|s| s.is_ok()), "{sent:?}");
    expect_too_long(&recv[0].result, 10_000, 100);
    assert_eq!(recv[1].result.as_ref().unwrap(), &4000);
    assert!(recv[1].buf == msgs[1]);
    assert_eq!(
        recv[2].result.as_ref().unwrap(),
        &5,
        "a shorter message reports its own length"
    );
    assert_eq!(&recv[2].buf[..5], &msgs[2][..]);
}

#[test]
fn longer_message_into_registered_receive_falls_back_to_ring_and_fails() {
    let mut l = link(config::defaults());
    let msgs = vec![pattern(MIB + 3, 1), pattern(MIB, 2)];
    let (sent, recv) = exchange(&mut l, &msgs, &[128 * 1024, MIB], true);
    assert!(sent.iter().all(|s| s.is_ok()), "{sent:?}");
    expect_too_long(&recv[0].result, MIB + 3, 128 * 1024);
    assert_eq!(recv[1].result.as_ref().unwrap(), &MIB);
    assert!(recv[1].buf == msgs[1]);
    assert_eq!(l.rx.stats().direct_messages, 1);
}

/// Test `req` until it finishes; returns the result and how long it took.
fn wait_one(shm: &Shm, req: &mut ShmRequest) -> (PluginResult<usize>, Duration) {
    let start = Instant::now();
    loop {
        match shm.test(req) {
            Ok(None) => {
                assert!(start.elapsed() < DEADLINE, "request never finished");
                std::thread::sleep(Duration::from_millis(1));
            }
            done => return (done.map(Option::unwrap), start.elapsed()),
        }
    }
}

#[test]
fn data_published_before_the_sender_left_is_still_delivered() {
    let dead = dead_pid();
    let mut l = link_with(small_ring(), small_ring(), dead, my_pid());
    let data = pattern(3000, 4);
    // SAFETY: `data` outlives the request.
    let mut s =
        post_until(|| unsafe { l.tx_shm.isend(&mut l.tx, data.as_ptr(), data.len(), None) });
    assert_eq!(
        wait_one(&l.tx_shm, &mut s).0.unwrap(),
        3000,
        "eager send completes into the ring"
    );
    std::thread::sleep(Duration::from_millis(80));
    let mut buf = vec![0u8; 3000];
    // SAFETY: `buf` outlives the request.
    let mut r =
        post_until(|| unsafe { l.rx_shm.irecv(&mut l.rx, buf.as_mut_ptr(), buf.len(), None) });
    assert_eq!(wait_one(&l.rx_shm, &mut r).0.unwrap(), 3000);
    assert!(buf == data);
}

#[test]
fn freeing_one_end_fails_the_other_ends_waiting_requests() {
    let Link {
        tx_shm,
        rx_shm,
        tx,
        mut rx,
    } = link(small_ring());
    tx_shm.free(tx).unwrap();
    let mut buf = vec![0u8; 8];
    // SAFETY: `buf` outlives the request.
    let mut req =
        post_until(|| unsafe { rx_shm.irecv(&mut rx, buf.as_mut_ptr(), buf.len(), None) });
    let err = wait_one(&rx_shm, &mut req).0.unwrap_err();
    assert!(err.message().contains("peer rank 0 closed"), "{err}");
}

#[test]
fn free_with_requests_outstanding_cancels_them() {
    let Link {
        tx_shm,
        rx_shm,
        mut tx,
        rx,
    } = link(small_ring());
    let data = pattern(50_000, 5);
    // SAFETY: `data` outlives the requests.
    let mut reqs: Vec<ShmRequest> = (0..3)
        .map(|_| post_until(|| unsafe { tx_shm.isend(&mut tx, data.as_ptr(), data.len(), None) }))
        .collect();
    assert_eq!(
        tx_shm.test(&mut reqs[0]).unwrap(),
        None,
        "a 50 KB send cannot fit a 16 KB ring"
    );
    tx_shm.free(tx).unwrap();
    let err = tx_shm.test(&mut reqs[1]).unwrap_err();
    assert!(err.message().contains("freed"), "{err}");
    drop(reqs);
    rx_shm.free(rx).unwrap();
}

#[test]
fn abort_fails_pending_requests() {
    let (host, table) = host();
    let rx_shm = ferrocx_shm::with_config(host, small_ring()).unwrap();
    let (tx_shm, rx_shm, mut tx, tx_blob, mut rx, rx_blob) =
        setup(context(small_ring()), rx_shm, my_pid(), my_pid());
    let _ = rx_shm.connect(&mut rx, &tx_blob).unwrap();
    tx_shm.connect(&mut tx, &rx_blob).unwrap();
    assert_eq!(
        rx_shm.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::Done
    );
    let mut buf = vec![0u8; 8];
    // SAFETY: `buf` outlives the request.
    let mut req =
        post_until(|| unsafe { rx_shm.irecv(&mut rx, buf.as_mut_ptr(), buf.len(), None) });
    assert_eq!(rx_shm.test(&mut req).unwrap(), None);
    abort(table);
    let err = rx_shm.test(&mut req).unwrap_err();
    assert!(err.message().contains("aborted"), "{err}");
}

#[test]
fn refused_single_copy_falls_back_to_the_ring() {
    unsafe fn refuse(_: i32, _: u64, _: usize, _: u64) -> Result<(), CmaError> {
        Err(CmaError::Unsupported(std::io::Error::from_raw_os_error(
            libc::EPERM,
        )))
    }
    let backend = ShmBackend::with_copier(config::defaults(), refuse).unwrap();
    let tx_shm = ferrocx_sdk::same_host::SameHost::new(host().0, backend);
    let (tx_shm, rx_shm, mut tx, tx_blob, mut rx, rx_blob) =
        setup(tx_shm, context(config::defaults()), my_pid(), my_pid());
    rx_shm.connect(&mut rx, &tx_blob).unwrap();
    tx_shm.connect(&mut tx, &rx_blob).unwrap();
    rx_shm.connect(&mut rx, &tx_blob).unwrap();
    let mut l = Link {
        tx_shm,
        rx_shm,
        tx,
        rx,
    };
    check_round_trip(&mut l, &[MIB + 3, 200_000, 10], true);
    let (tx, rx) = (l.tx.stats(), l.rx.stats());
    assert_eq!((tx.direct_messages, tx.fifo_messages), (0, 3), "{tx:?}");
    assert_eq!((rx.direct_messages, rx.fifo_messages), (0, 3), "{rx:?}");
}

#[test]
fn a_pid_that_is_not_the_receiver_is_never_written() {
    // A live process with another pid stands in for "the receiver's pid as
    // seen from a different pid namespace": the token probe must refuse it.
    let mut stranger = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let mut l = link_with(
        config::defaults(),
        config::defaults(),
        my_pid(),
        stranger.id() as i32,
    );
    check_round_trip(&mut l, &[MIB + 3, 200_000], true);
    assert_eq!(l.tx.stats().direct_messages, 0);
    assert_eq!(l.rx.stats().fifo_messages, 2);
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

#[test]
fn can_connect_register_and_misuse() {
    let shm = context(config::defaults());
    let (me, same) = (peer_info(0, 1), peer_info(1, 2));
    let mut other = peer_info(1, 2);
    other.host_hash ^= 1;
    assert_eq!(shm.can_connect(&me, &same), SAME_HOST_SCORE);
    assert_eq!(shm.can_connect(&me, &other), 0);
    let off = context(Config {
        disabled: true,
        ..config::defaults()
    });
    assert_eq!(off.can_connect(&me, &same), 0);
    let off =
        config::from_lookup(|n| (n == "FERROCX_SHM_DISABLE").then(|| "1".to_string())).unwrap();
    assert!(off.disabled);

    let mut buf = [0u8; 16];
    // SAFETY: `buf` outlives the registration attempt.
    let err = unsafe { shm.register(buf.as_mut_ptr(), 16, MemKind::Cuda, &mut Blob::new()) }
        .err()
        .unwrap();
    assert_eq!(err.code(), FX_UNSUPPORTED);

    // Blobs from the wrong end, or garbage, are refused with a clear message.
    let (tx_shm, rx_shm, mut tx, tx_blob, mut rx, _rx_blob) =
        setup(context(small_ring()), context(small_ring()), 1, 2);
    let err = tx_shm.connect(&mut tx, &tx_blob).unwrap_err();
    assert!(
        err.message().contains("both ends set up as senders"),
        "{err}"
    );
    let err = tx_shm.connect(&mut tx, &Blob::new()).unwrap_err();
    assert!(err.message().contains("no shm blob"), "{err}");
    let err = rx_shm.connect(&mut rx, &Blob::new()).unwrap_err();
    assert!(
        err.message().contains("expected the sender's blob"),
        "{err}"
    );
    // Data calls before connect, and in the wrong direction.
    // SAFETY: zero-length buffers.
    assert!(unsafe { tx_shm.isend(&mut tx, std::ptr::null(), 0, None) }.is_err());
    let mut l = link(small_ring());
    // SAFETY: zero-length buffers.
    let err = unsafe { l.tx_shm.irecv(&mut l.tx, std::ptr::null_mut(), 0, None) }
        .err()
        .unwrap();
    assert!(err.message().contains("irecv on the sending end"), "{err}");
}

#[test]
fn drives_the_c_table() {
    use ferrocx_sdk::abi::{FxConnReq, FX_DIR_RECV, FX_DIR_SEND, FX_IN_PROGRESS, FX_OK};
    use std::ffi::c_void;
    let t = ferrocx_sdk::transport_table::<Shm>();
    assert_eq!(t.name_str(), "shm");
    let detached = Box::leak(Box::new(ferrocx_sdk::DetachedHost::new(
        Duration::from_secs(5),
    )));
    let (mut c0, mut c1): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: all pointers below are valid for the calls; the hooks come from the table of Shm.
    unsafe {
        assert_eq!(t.init.unwrap()(detached.as_ptr(), &mut c0), FX_OK);
        assert_eq!(t.init.unwrap()(detached.as_ptr(), &mut c1), FX_OK);
        let (p0, p1) = (peer_info(0, my_pid()), peer_info(1, my_pid()));
        let r0 = FxConnReq {
            me: p0,
            peer: p1,
            direction: FX_DIR_SEND,
            channel: 0,
            conn_id: 77,
        };
        let r1 = FxConnReq {
            me: p1,
            peer: p0,
            direction: FX_DIR_RECV,
            channel: 0,
            conn_id: 77,
        };
        let (mut k0, mut k1) = (std::ptr::null_mut(), std::ptr::null_mut());
        let (mut b0, mut b1) = (Blob::new(), Blob::new());
        assert_eq!(t.setup.unwrap()(c0, &r0, &mut k0, &mut b0), FX_OK);
        assert_eq!(t.setup.unwrap()(c1, &r1, &mut k1, &mut b1), FX_OK);
        assert_eq!(t.connect.unwrap()(k1, &b0), FX_IN_PROGRESS);
        assert_eq!(t.connect.unwrap()(k0, &b1), FX_OK);
        assert_eq!(t.connect.unwrap()(k1, &b0), FX_OK);
        let data = pattern(10_000, 3);
        let mut out = vec![0u8; 10_000];
        let (mut sreq, mut rreq) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(
            t.isend.unwrap()(
                k0,
                data.as_ptr() as *const c_void,
                data.len(),
                std::ptr::null_mut(),
                &mut sreq
            ),
            FX_OK
        );
        assert_eq!(
            t.irecv.unwrap()(
                k1,
                out.as_mut_ptr() as *mut c_void,
                out.len(),
                std::ptr::null_mut(),
                &mut rreq
            ),
            FX_OK
        );
        let (mut sdone, mut rdone, mut n) = (0, 0, 0usize);
        let start = Instant::now();
        while sdone == 0 || rdone == 0 {
            assert!(start.elapsed() < DEADLINE);
            if sdone == 0 {
                assert_eq!(t.test.unwrap()(sreq, &mut sdone, &mut n), FX_OK);
            }
            if rdone == 0 {
                assert_eq!(t.test.unwrap()(rreq, &mut rdone, &mut n), FX_OK);
            }
        }
        assert_eq!(n, 10_000);
        assert!(out == data);
        // One request left outstanding on free: the wrapper drops it first.
        let mut stray = std::ptr::null_mut();
        assert_eq!(
            t.irecv.unwrap()(
                k1,
                out.as_mut_ptr() as *mut c_void,
                1,
                std::ptr::null_mut(),
                &mut stray
            ),
            FX_OK
        );
        assert_eq!(t.free.unwrap()(k0), FX_OK);
        assert_eq!(t.free.unwrap()(k1), FX_OK);
        assert_eq!(t.finalize.unwrap()(c0), FX_OK);
        assert_eq!(t.finalize.unwrap()(c1), FX_OK);
    }
}
