//! CUDA tests in one process (each prints `SKIPPED` and passes without a
//! driver or a GPU): peer reachability, every size and many messages in
//! flight through streams and events (both ends in this process use each
//! other's addresses: CUDA IPC refuses a process's own handles), registration
//! cycles that must leak nothing, and the caller's CUDA context left as it was.
//! The two-process IPC tests are in `two_process.rs`.

use crate::common::*;
use ferrocx_p2p::{Config, Direct, SAME_HOST_SCORE};
use ferrocx_sdk::cuda::{sys, Context};
use ferrocx_sdk::device::pci_name;
use ferrocx_sdk::{Blob, MemKind, Transport};
use std::time::Instant;

const C: Mode = Mode::Cuda;

#[test]
fn gpus_on_this_host_reach_each_other() {
    if !cuda_ready("reach") {
        return;
    }
    let n = cuda_devices() as i32;
    let p = context(C, Config::default());
    for a in 0..n {
        for b in 0..n {
            let (pa, pb) = (peer_info(C, 0, 1, a), peer_info(C, 1, 2, b));
            let score = p.can_connect(&pa, &pb);
            let mut ok = 0;
            // SAFETY: valid ordinals; valid out pointer.
            unsafe { sys::cuDeviceCanAccessPeer(&mut ok, a, b) };
            eprintln!(
                "GPU {a} ({}) → GPU {b} ({}): cuDeviceCanAccessPeer {ok}, p2p score {score}",
                pci_name(pa.cuda_pci),
                pci_name(pb.cuda_pci)
            );
            let want = if a == b || ok != 0 {
                SAME_HOST_SCORE
            } else {
                0
            };
            assert_eq!(score, want);
        }
    }
    // A GPU this process cannot see (CUDA_VISIBLE_DEVICES): assumed reachable by default.
    let (pa, mut hidden) = (peer_info(C, 0, 1, 0), peer_info(C, 1, 2, 0));
    hidden.cuda_pci = 0x7ffe_0000;
    assert_eq!(p.can_connect(&pa, &hidden), SAME_HOST_SCORE);
    let strict = context(
        C,
        Config {
            invisible_peers: false,
            ..Config::default()
        },
    );
    assert_eq!(strict.can_connect(&pa, &hidden), 0);
}

fn sizes() -> Vec<usize> {
    vec![
        0,
        1,
        7,
        4097,
        16_383,
        16_384,
        65_541,
        MIB,
        MIB + 3,
        256 * MIB,
    ]
}

#[test]
fn every_size_through_fifo_and_direct_on_streams() {
    if !cuda_ready("sizes") {
        return;
    }
    let fifo = ring(Config::default(), |r| r.direct = Direct::Off);
    for (name, cfg, src, dst) in [
        ("fifo d→d", fifo.clone(), Mem::Device, Mem::Device),
        ("direct d→d", Config::default(), Mem::Device, Mem::Device),
        ("fifo h→d", fifo.clone(), Mem::Host, Mem::Device),
        ("fifo d→h", fifo, Mem::Device, Mem::Host),
        ("default h→h", Config::default(), Mem::Host, Mem::Host),
    ] {
        let msgs: Vec<Msg> = sizes()
            .into_iter()
            .map(|n| Msg {
                src,
                dst,
                ..Msg::dev(n)
            })
            .collect();
        let mut l = link(C, cfg);
        let t0 = Instant::now();
        let (sent, received) = exchange(&mut l, &msgs, 1);
        eprintln!(
            "{name}: GPU {} → GPU {} in {:.3} s; {:?}",
            l.tx_dev,
            l.rx_dev,
            t0.elapsed().as_secs_f64(),
            l.rx.stats()
        );
        assert_all_ok(&msgs, &sent, &received);
    }
}

#[test]
fn many_messages_in_flight_on_streams() {
    if !cuda_ready("in flight") {
        return;
    }
    let msgs: Vec<Msg> = (0..1000)
        .map(|i| Msg {
            src: if i % 7 == 0 { Mem::Host } else { Mem::Device },
            ..Msg::dev((i * 7919) % 100_000)
        })
        .collect();
    for cfg in [small_fifo(), Config::default()] {
        let mut l = link(C, cfg);
        let (sent, received) = exchange(&mut l, &msgs, 5);
        assert_all_ok(&msgs, &sent, &received);
        eprintln!("1000 in flight: {:?}", l.rx.stats());
    }
}

#[test]
fn register_deregister_cycles_leak_nothing() {
    if !cuda_ready("register cycles") {
        return;
    }
    let _one_at_a_time = serial();
    bind(0);
    let p = context(C, Config::default());
    let one = Buf::new(C, Mem::Device, 0, 4 * MIB);
    let reg_cycle = |b: &Buf, off: usize, len: usize| {
        // SAFETY: the buffer outlives the registration, released right away.
        let h = unsafe {
            p.register(
                (b.addr() as usize + off) as *mut u8,
                len,
                MemKind::Cuda,
                &mut Blob::new(),
            )
        }
        .expect("register");
        p.deregister(h).expect("deregister");
    };
    for i in 0..100 {
        reg_cycle(&one, i * 4096, 8192); // warm-up
    }
    let (free0, _) = mem_info(0);
    let t0 = Instant::now();
    for i in 0..10_000 {
        reg_cycle(&one, (i % 512) * 4096, 4096 + i % 1000);
    }
    // Fresh allocations, registered and freed: a new handle every time.
    for _ in 0..1_000 {
        let b = Buf::new(C, Mem::Device, 0, 2 * MIB);
        reg_cycle(&b, 0, b.len());
    }
    let (free1, _) = mem_info(0);
    let st = p.stats();
    eprintln!(
        "11000 register/deregister cycles in {:.2} s; free memory {free0} → {free1}; {st:?}",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(st.exports, 0, "every export released");
    assert_eq!(st.open_handles, 0);
    assert!(
        free1 + 4 * MIB >= free0,
        "GPU memory leaked: {}",
        free0 - free1
    );
}

#[test]
fn the_callers_context_is_left_alone() {
    if !cuda_ready("context") {
        return;
    }
    if cuda_devices() < 2 {
        ferrocx_sdk::cuda::skip_notice("context test: needs two GPUs");
        return;
    }
    // The caller works on GPU 1; the connection is on GPU 0.
    let other = Context::primary(1).unwrap();
    let mut l = link(C, Config::default());
    other.bind().unwrap();
    let current = || {
        let mut c: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        unsafe { sys::cuCtxGetCurrent(&mut c) };
        c
    };
    assert_eq!(current(), other.raw());
    let v = vec![3u8; 100_000];
    // SAFETY: `v` outlives the request (completed below).
    let mut req = unsafe { l.tx_p2p.isend(&mut l.tx, v.as_ptr(), v.len(), None) }
        .unwrap()
        .unwrap();
    assert_eq!(
        current(),
        other.raw(),
        "isend restored the caller's context"
    );
    let _ = l.tx_p2p.test(&mut req);
    assert_eq!(current(), other.raw(), "test restored the caller's context");
    let mut out = vec![0u8; 100_000];
    // SAFETY: `out` outlives the request.
    let mut r = unsafe { l.rx_p2p.irecv(&mut l.rx, out.as_mut_ptr(), out.len(), None) }
        .unwrap()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let _ = l.tx_p2p.test(&mut req);
        if let Some(n) = l.rx_p2p.test(&mut r).unwrap() {
            assert_eq!(n, v.len());
            break;
        }
        assert!(t0.elapsed() < DEADLINE);
    }
    assert_eq!(current(), other.raw());
    assert!(out == v);
    drop(ferrocx_p2p::with_config(host().0, Config::default()).unwrap());
}
