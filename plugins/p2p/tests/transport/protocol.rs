use crate::common::*;
use ferrocx_p2p::{Config, Direct, P2p, P2pRequest, SAME_HOST_SCORE};
use ferrocx_sdk::abi::{FX_DIR_RECV, FX_DIR_SEND, FX_INVALID_ARGUMENT, FX_REMOTE, FX_UNSUPPORTED};
use ferrocx_sdk::device::fake::FakeBuf;
use ferrocx_sdk::{Blob, ConnectState, MemKind, PluginResult, Transport};
use std::time::{Duration, Instant};

const M: Mode = Mode::Fake;

fn fifo_only() -> Config {
    ring(small_fifo(), |r| r.direct = Direct::Off)
}

/// Same process, but through "IPC" (the stand-in's named mappings).
fn via_ipc(cfg: Config) -> Config {
    ring(cfg, |r| r.same_process_shortcut = false)
}

fn chunks(len: usize, chunk: usize) -> u64 {
    len.div_ceil(chunk).max(1) as u64
}

#[test]
fn fifo_moves_every_size_intact() {
    let sizes = [0, 1, 7, 4095, 4096, 4097, 100_000, MIB + 3];
    let msgs: Vec<Msg> = sizes.iter().map(|&n| Msg::dev(n)).collect();
    for cfg in [fifo_only(), via_ipc(fifo_only())] {
        let mut l = link(M, cfg);
        let (sent, received) = exchange(&mut l, &msgs, 1);
        assert_all_ok(&msgs, &sent, &received);
        let (tx, rx) = (l.tx.stats(), l.rx.stats());
        assert_eq!((rx.fifo_messages, rx.direct_messages), (8, 0), "{rx:?}");
        let want: u64 = sizes.iter().map(|&n| chunks(n, 4096)).sum();
        assert_eq!((tx.fifo_chunks, rx.fifo_chunks), (want, want));
    }
}

#[test]
fn host_buffers_go_through_the_fifo() {
    let msgs: Vec<Msg> = [0, 5, 20_000, 3 * MIB + 1]
        .iter()
        .map(|&n| Msg {
            src: Mem::Host,
            dst: Mem::Host,
            ..Msg::dev(n)
        })
        .collect();
    let mut l = link(M, Config::default());
    let (sent, received) = exchange(&mut l, &msgs, 10);
    assert_all_ok(&msgs, &sent, &received);
    let rx = l.rx.stats();
    assert_eq!((rx.fifo_messages, rx.direct_messages), (4, 0), "{rx:?}");
}

#[test]
fn device_receives_are_written_directly() {
    // 16384 is the default threshold: 16383 takes the FIFO, the others go direct.
    let sizes = [0, 1, 16_383, 16_384, 100_000, 4 * MIB + 5];
    let msgs: Vec<Msg> = sizes.iter().map(|&n| Msg::dev(n)).collect();
    for cfg in [Config::default(), via_ipc(Config::default())] {
        let ipc = !cfg.ring.same_process_shortcut;
        let mut l = link(M, cfg);
        let (sent, received) = exchange(&mut l, &msgs, 20);
        assert_all_ok(&msgs, &sent, &received);
        let (tx, rx) = (l.tx.stats(), l.rx.stats());
        assert_eq!((rx.fifo_messages, rx.direct_messages), (3, 3), "{rx:?}");
        assert_eq!(tx.direct_messages, 3);
        assert_eq!(rx.direct_bytes, (16_384 + 100_000 + 4 * MIB + 5) as u64);
        // Through IPC, every receive buffer (one allocation each) was opened once.
        assert_eq!(tx.mappings, if ipc { 3 } else { 0 }, "{tx:?}");
        let (tx_p2p, rx_p2p) = l.free_conns();
        assert_eq!(
            tx_p2p.stats().open_handles,
            0,
            "freeing the connection closes every mapping (FIFO included)"
        );
        assert_eq!(rx_p2p.stats().graveyard, 0, "the FIFO was freed");
    }
}

#[test]
fn registered_mode_offers_registered_buffers_only() {
    let cfg = via_ipc(ring(Config::default(), |r| r.direct = Direct::Registered));
    let msgs = [
        Msg {
            register: true,
            ..Msg::dev(100_000)
        },
        Msg::dev(100_000),
        Msg {
            register: true,
            ..Msg::dev(MIB)
        },
    ];
    let mut l = link(M, cfg);
    let (sent, received) = exchange(&mut l, &msgs, 30);
    assert_all_ok(&msgs, &sent, &received);
    let rx = l.rx.stats();
    assert_eq!((rx.direct_messages, rx.fifo_messages), (2, 1), "{rx:?}");
}

#[test]
fn direct_off_on_the_sender_still_works_with_offers() {
    // The receiver offers, the sender does not want direct writes: FIFO.
    let msgs: Vec<Msg> = [50_000, 2 * MIB].iter().map(|&n| Msg::dev(n)).collect();
    let mut l = link_with(M, fifo_only(), Config::default());
    let (sent, received) = exchange(&mut l, &msgs, 40);
    assert_all_ok(&msgs, &sent, &received);
    assert_eq!(l.rx.stats().fifo_messages, 2);
}

#[test]
fn many_messages_in_flight_in_both_paths() {
    // More messages than the request table holds: posting says "not now" and retries.
    let msgs: Vec<Msg> = (0..600)
        .map(|i| {
            let len = match i % 5 {
                0 => 0,
                1 => 1 + i,
                2 => 4096 * (i % 7) + 3,
                3 => 20_000 + 17 * i,
                _ => 70_001,
            };
            Msg {
                src: if i % 3 == 0 { Mem::Host } else { Mem::Device },
                dst: if i % 4 == 0 { Mem::Host } else { Mem::Device },
                ..Msg::dev(len)
            }
        })
        .collect();
    for cfg in [small_fifo(), via_ipc(small_fifo())] {
        let mut l = link(M, cfg);
        let (sent, received) = exchange(&mut l, &msgs, 1000);
        assert_all_ok(&msgs, &sent, &received);
        let rx = l.rx.stats();
        assert!(rx.direct_messages > 50 && rx.fifo_messages > 50, "{rx:?}");
    }
}

#[test]
fn oversized_message_fails_its_receive_only() {
    let msgs = [
        Msg {
            cap: 100,
            ..Msg::dev(10_000)
        },
        Msg::dev(30_000),
        // Large enough for the direct path, but the offer is too small: FIFO, then overflow.
        Msg {
            cap: 20_000,
            ..Msg::dev(MIB)
        },
        Msg::dev(7),
    ];
    let mut l = link(M, small_fifo());
    let (sent, received) = exchange(&mut l, &msgs, 50);
    for s in &sent {
        s.as_ref().unwrap();
    }
    for i in [0, 2] {
        let e = received[i].as_ref().unwrap_err();
        assert!(
            e.contains(&format!("rank 0 sent {} bytes", msgs[i].len))
                && e.contains(&format!("rank 1 holds only {}", msgs[i].cap)),
            "{e}"
        );
    }
    assert_eq!(received[1].as_ref().unwrap(), &30_000);
    assert_eq!(received[3].as_ref().unwrap(), &7);
}

fn posted_recv(l: &mut Link, buf: &FakeBuf) -> P2pRequest {
    // SAFETY: `buf` outlives the request (the tests keep it to the end).
    let r = unsafe {
        l.rx_p2p
            .irecv(&mut l.rx, buf.addr() as *mut u8, 100_000, None)
    };
    r.unwrap().expect("posted")
}

fn wait_err(p: &P2p, req: &mut P2pRequest, within: Duration) -> ferrocx_sdk::PluginError {
    let start = Instant::now();
    loop {
        match p.test(req) {
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Ok(Some(n)) => panic!("completed with {n} bytes"),
            Err(e) => return e,
        }
        assert!(start.elapsed() < within, "no failure within {within:?}");
    }
}

#[test]
fn a_freed_sender_fails_pending_receives() {
    let mut l = link(M, Config::default());
    let buf = FakeBuf::new(100_000).unwrap();
    let mut req = posted_recv(&mut l, &buf);
    assert_eq!(l.rx_p2p.test(&mut req).unwrap(), None);
    let Link {
        tx_p2p, rx_p2p, tx, ..
    } = l;
    tx_p2p.free(tx).unwrap();
    let e = wait_err(&rx_p2p, &mut req, Duration::from_secs(2));
    assert_eq!(e.code(), FX_REMOTE);
    assert!(e.message().contains("peer rank 0 closed"), "{e}");
}

#[test]
fn abort_fails_pending_requests() {
    let (host, table) = host();
    let l = link(M, Config::default());
    let rx_p2p = ferrocx_p2p::with_driver(host, Config::default(), driver(M)).unwrap();
    // A second receiving context whose host gets aborted, connected to a new sender.
    let id = next_conn_id();
    let (p0, p1) = (peer_info(M, 0, my_pid(), 0), peer_info(M, 1, my_pid(), 0));
    let mut rb = Blob::new();
    let mut rx = rx_p2p
        .setup(&conn_req(FX_DIR_RECV, p1, p0, id), &mut rb)
        .unwrap();
    let mut tb = Blob::new();
    let mut tx = l
        .tx_p2p
        .setup(&conn_req(FX_DIR_SEND, p0, p1, id), &mut tb)
        .unwrap();
    l.tx_p2p.connect(&mut tx, &rb).unwrap();
    connect_until_done(&rx_p2p, &mut rx, &tb);
    let buf = FakeBuf::new(10).unwrap();
    // SAFETY: `buf` outlives the request.
    let mut req = unsafe { rx_p2p.irecv(&mut rx, buf.addr() as *mut u8, 10, None) }
        .unwrap()
        .unwrap();
    abort(table);
    let e = wait_err(&rx_p2p, &mut req, Duration::from_secs(1));
    assert_eq!(e.code(), FX_REMOTE);
    assert!(e.message().contains("aborted"), "{e}");
    l.tx_p2p.free(tx).unwrap();
    rx_p2p.free(rx).unwrap();
}

#[test]
fn deregistering_revokes_the_senders_mapping() {
    let mut l = link(M, via_ipc(Config::default()));
    let baseline = l.tx_p2p.stats().open_handles;
    for cycle in 0..300u64 {
        let buf = FakeBuf::new(64 << 10).unwrap();
        // SAFETY: `buf` outlives its registration.
        let reg = unsafe {
            l.rx_p2p.register(
                buf.addr() as *mut u8,
                buf.len(),
                MemKind::Cuda,
                &mut Blob::new(),
            )
        }
        .unwrap();
        let data = pattern(buf.len(), cycle);
        let Link {
            tx_p2p,
            rx_p2p,
            tx,
            rx,
            ..
        } = &mut l;
        let (tx_p2p, rx_p2p) = (&*tx_p2p, &*rx_p2p);
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: `data` outlives the request.
                run_all(tx_p2p, 1, |_| unsafe {
                    tx_p2p.isend(tx, data.as_ptr(), data.len(), None)
                })
                .remove(0)
                .unwrap()
            });
            // SAFETY: `buf` outlives the request.
            run_all(rx_p2p, 1, |_| unsafe {
                rx_p2p.irecv(rx, buf.addr() as *mut u8, buf.len(), Some(&reg))
            })
            .remove(0)
            .unwrap();
        });
        assert!(buf.read(buf.len()) == data, "cycle {cycle}");
        l.rx_p2p.deregister(reg).unwrap();
        drop(buf);
        let open = l.tx_p2p.stats().open_handles;
        assert!(open <= baseline + 2, "cycle {cycle}: {open} handles open");
    }
    assert_eq!(l.rx.stats().direct_messages, 300);
    assert_eq!(
        l.rx_p2p.stats().exports,
        0,
        "every registration was dropped"
    );
    // One more message lets the sender process the last revocation.
    let (sent, received) = exchange(&mut l, &[Msg::dev(10)], 7);
    assert_all_ok(&[Msg::dev(10)], &sent, &received);
    assert_eq!(
        l.tx_p2p.stats().open_handles,
        baseline,
        "only the FIFO stays open"
    );
    assert_eq!(l.tx.stats().mappings, 0);
    assert!(l.tx.stats().revocations >= 300);
}

#[test]
fn reallocated_receive_buffers_are_not_written_through_stale_handles() {
    // Unregistered device receives: the export cache notices a new allocation
    // (new identity) and revokes the old handle.
    let mut l = link(M, via_ipc(Config::default()));
    for round in 0..20u64 {
        let msgs = [Msg::dev(40_000), Msg::dev(50_000)];
        let (sent, received) = exchange(&mut l, &msgs, 100 + round * 2);
        assert_all_ok(&msgs, &sent, &received);
    }
    let tx = l.tx.stats();
    assert_eq!(tx.direct_messages, 40);
    assert!(tx.mappings <= 6, "{tx:?}");
    assert!(l.rx_p2p.stats().exports <= 6);
    assert!(tx.revocations >= 30, "{tx:?}");
}

#[test]
fn the_fifo_outlives_its_receiver_until_the_sender_lets_go() {
    let l = link(M, via_ipc(Config::default()));
    let Link {
        tx_p2p,
        rx_p2p,
        tx,
        rx,
        ..
    } = l;
    rx_p2p.free(rx).unwrap();
    assert_eq!(
        rx_p2p.stats().graveyard,
        1,
        "the sender still maps the FIFO"
    );
    tx_p2p.free(tx).unwrap();
    assert_eq!(rx_p2p.stats().graveyard, 0, "freed once the sender let go");
    rx_p2p.finalize().unwrap();
    tx_p2p.finalize().unwrap();
}

#[test]
fn can_connect_needs_the_same_host_and_gpus_on_both_ends() {
    let p = context(M, Config::default());
    let (a, b) = (peer_info(M, 0, 1, 0), peer_info(M, 1, 2, 1));
    assert_eq!(p.can_connect(&a, &b), SAME_HOST_SCORE);
    const { assert!(SAME_HOST_SCORE > 100, "p2p wins over shm") };
    let mut other_host = b;
    other_host.host_hash ^= 1;
    assert_eq!(p.can_connect(&a, &other_host), 0);
    let mut no_gpu = b;
    no_gpu.cuda_device = -1;
    no_gpu.cuda_pci = -1;
    assert_eq!(p.can_connect(&a, &no_gpu), 0);
    assert_eq!(p.can_connect(&no_gpu, &a), 0);
    let off = context(M, ring(Config::default(), |r| r.disabled = true));
    assert_eq!(off.can_connect(&a, &b), 0);
    // Without CUDA the real backend never offers itself.
    if ferrocx_sdk::cuda::available().is_err() {
        let real = ferrocx_p2p::with_config(host().0, Config::default()).unwrap();
        assert_eq!(real.can_connect(&a, &b), 0);
    }
}

#[test]
fn misuse_is_an_error_not_a_crash() {
    let mut l = link(M, Config::default());
    let v = [0u8; 8];
    // SAFETY: `v` outlives the (refused) calls.
    let e = unsafe { l.rx_p2p.isend(&mut l.rx, v.as_ptr(), 8, None) }
        .err()
        .unwrap();
    assert_eq!(e.code(), FX_INVALID_ARGUMENT);
    let mut w = [0u8; 8];
    // SAFETY: as above.
    let e = unsafe { l.tx_p2p.irecv(&mut l.tx, w.as_mut_ptr(), 8, None) }
        .err()
        .unwrap();
    assert_eq!(e.code(), FX_INVALID_ARGUMENT);
    // SAFETY: as above.
    let e = unsafe {
        l.rx_p2p
            .register(w.as_mut_ptr(), 8, MemKind::Host, &mut Blob::new())
    }
    .err()
    .unwrap();
    assert_eq!(e.code(), FX_UNSUPPORTED);
    // SAFETY: as above; host memory claimed to be device memory.
    let e = unsafe {
        l.rx_p2p
            .register(w.as_mut_ptr(), 8, MemKind::Cuda, &mut Blob::new())
    }
    .err()
    .unwrap();
    assert!(e.message().contains("not CUDA device memory"), "{e}");
    let buf = FakeBuf::new(100).unwrap();
    // SAFETY: past the end: refused before anything is kept.
    let e = unsafe {
        l.rx_p2p
            .register(buf.addr() as *mut u8, 200, MemKind::Cuda, &mut Blob::new())
    }
    .err()
    .unwrap();
    assert!(e.message().contains("run past the end"), "{e}");
}

#[test]
fn connect_checks_blobs() {
    let tx_p2p = context(M, Config::default());
    let rx_p2p = context(M, Config::default());
    let id = next_conn_id();
    let (p0, p1) = (peer_info(M, 0, my_pid(), 0), peer_info(M, 1, my_pid(), 0));
    let (mut tb, mut rb, mut rb2) = (Blob::new(), Blob::new(), Blob::new());
    let mut tx = tx_p2p
        .setup(&conn_req(FX_DIR_SEND, p0, p1, id), &mut tb)
        .unwrap();
    let mut rx = rx_p2p
        .setup(&conn_req(FX_DIR_RECV, p1, p0, id), &mut rb)
        .unwrap();
    let rx2 = rx_p2p
        .setup(&conn_req(FX_DIR_RECV, p1, p0, id + 1), &mut rb2)
        .unwrap();
    let e = tx_p2p.connect(&mut tx, &tb).unwrap_err();
    assert!(e.message().contains("both ends set up as senders"), "{e}");
    let e = tx_p2p.connect(&mut tx, &rb2).unwrap_err();
    assert!(e.message().contains("wrong peer"), "{e}");
    assert!(
        our_segments("p2p").len() >= 2,
        "segments exist until attached"
    );
    assert_eq!(tx_p2p.connect(&mut tx, &rb).unwrap(), ConnectState::Done);
    connect_until_done(&rx_p2p, &mut rx, &tb);
    // The blob carries plain bytes: its size is that of the shareable struct.
    assert_eq!(
        rb.len as usize,
        std::mem::size_of::<ferrocx_sdk::same_host::blob::RecvInfo>()
    );
    tx_p2p.free(tx).unwrap();
    rx_p2p.free(rx).unwrap();
    rx_p2p.free(rx2).unwrap();
}

#[test]
fn segments_leave_dev_shm_once_connected() {
    let l = link(M, Config::default());
    let name = l.rx.segment_name().unwrap();
    assert!(
        !std::path::Path::new("/dev/shm").join(&name[1..]).exists(),
        "{name} still linked"
    );
}

#[test]
fn results_are_collected_in_any_order() {
    let mut l = link(M, small_fifo());
    let data: Vec<Vec<u8>> = (0..5).map(|i| pattern(10_000 * i + 1, i as u64)).collect();
    let bufs: Vec<FakeBuf> = (0..5).map(|_| FakeBuf::new(60_000).unwrap()).collect();
    let mut recvs: Vec<P2pRequest> = bufs
        .iter()
        .map(|b| {
            // SAFETY: the buffers outlive the requests.
            let r = unsafe { l.rx_p2p.irecv(&mut l.rx, b.addr() as *mut u8, 60_000, None) };
            r.unwrap().unwrap()
        })
        .collect();
    let mut sends: Vec<P2pRequest> = data
        .iter()
        .map(|d| {
            // SAFETY: `data` outlives the requests.
            let r = unsafe { l.tx_p2p.isend(&mut l.tx, d.as_ptr(), d.len(), None) };
            r.unwrap().unwrap()
        })
        .collect();
    let start = Instant::now();
    let mut got: Vec<Option<PluginResult<usize>>> = vec![None; 5];
    while got.iter().any(Option::is_none) {
        assert!(start.elapsed() < DEADLINE);
        for i in (0..5).rev() {
            for s in sends.iter_mut() {
                let _ = l.tx_p2p.test(s);
            }
            if got[i].is_none() {
                if let Some(n) = l.rx_p2p.test(&mut recvs[i]).unwrap() {
                    got[i] = Some(Ok(n));
                }
            }
        }
    }
    for (i, g) in got.into_iter().enumerate() {
        assert_eq!(g.unwrap().unwrap(), data[i].len());
        assert!(bufs[i].read(data[i].len()) == data[i]);
    }
}

/// fxperf's `sendrecv --mem cuda -c 1` on one link: ONE send buffer and ONE
/// receive buffer reused for every message, sizes from FIFO-sized to
/// direct-sized, many messages posted back to back with one side a whole
/// burst ahead of the other (the sender waiting for offers, or the receiver
/// with offers out before any send), then the check: zeros written into the
/// receive buffer once everything finished, one more message, compare. A
/// direct copy for an older message (or an offer left over from one) landing
/// on the receive buffer before the zeros would leave zeros behind.
#[test]
fn reused_buffers_back_to_back_then_zero_check() {
    const ITERS: usize = 13;
    let max = 256 * 1024;
    for (cfg, sender_ahead) in [
        (Config::default(), true),
        (Config::default(), false),
        (via_ipc(Config::default()), true),
        (via_ipc(Config::default()), false),
        (via_ipc(small_fifo()), true),
    ] {
        let l = link(M, cfg);
        let sbuf = FakeBuf::new(max).unwrap();
        let rbuf = FakeBuf::new(max).unwrap();
        let (tx_p2p, rx_p2p) = (&l.tx_p2p, &l.rx_p2p);
        let (mut tx, mut rx) = (l.tx, l.rx);
        let mut size = 8;
        let mut round = 0u64;
        while size <= max {
            let data = pattern(size, 1000 + round);
            sbuf.write(&data);
            // Post one burst of `n` messages on each side, `first` side entirely
            // before the other; `poll_first` rounds of progress in between.
            // One burst of `n` messages on each side, one side entirely posted
            // (and progressed) before the other posts anything.
            let mut burst = |n: usize, zero_first: bool| {
                let mut sends: Vec<Option<P2pRequest>> = (0..n).map(|_| None).collect();
                let mut recvs: Vec<Option<P2pRequest>> = (0..n).map(|_| None).collect();
                let mut sres: Vec<Option<PluginResult<usize>>> = (0..n).map(|_| None).collect();
                let mut rres: Vec<Option<PluginResult<usize>>> = (0..n).map(|_| None).collect();
                if zero_first {
                    rbuf.write(&vec![0u8; size]);
                }
                let mut post_sends =
                    |sends: &mut [Option<P2pRequest>], sres: &mut [Option<PluginResult<usize>>]| {
                        for s in sends.iter_mut() {
                            // SAFETY: the buffer outlives every request (drained below).
                            let r = unsafe {
                                tx_p2p.isend(&mut tx, sbuf.addr() as *const u8, size, None)
                            };
                            *s = Some(r.unwrap().expect("room for the send"));
                        }
                        for _ in 0..5 {
                            sweep(tx_p2p, sends, sres);
                        }
                    };
                if sender_ahead {
                    post_sends(&mut sends, &mut sres);
                }
                for r in recvs.iter_mut() {
                    // SAFETY: as above.
                    let q = unsafe { rx_p2p.irecv(&mut rx, rbuf.addr() as *mut u8, size, None) };
                    *r = Some(q.unwrap().expect("room for the receive"));
                }
                if !sender_ahead {
                    for _ in 0..5 {
                        sweep(rx_p2p, &mut recvs, &mut rres);
                    }
                    post_sends(&mut sends, &mut sres);
                }
                let start = Instant::now();
                while sres.iter().chain(&rres).any(Option::is_none) {
                    assert!(start.elapsed() < DEADLINE, "size {size}: stuck");
                    sweep(tx_p2p, &mut sends, &mut sres);
                    sweep(rx_p2p, &mut recvs, &mut rres);
                }
                for r in sres.into_iter().chain(rres) {
                    assert_eq!(r.unwrap().unwrap(), size);
                }
            };
            // Warmup + timed iterations, then the check, as fxperf does.
            burst(ITERS, false);
            burst(1, true);
            let got = rbuf.read(size);
            let wrong = got.iter().zip(&data).filter(|(a, b)| a != b).count();
            assert_eq!(
                wrong, 0,
                "size {size} (sender ahead: {sender_ahead}): {wrong} bytes wrong after the zero check"
            );
            size *= 2;
            round += 1;
        }
        let (rs, ts) = (rx.stats(), tx.stats());
        assert!(rs.direct_messages > 0 && ts.direct_messages > 0, "{rs:?}");
        tx_p2p.free(tx).unwrap();
        rx_p2p.free(rx).unwrap();
    }
}
