//! Both ends of a connection in one process over loopback, driven through the
//! `Transport` trait: sizes, overflow, ordering, and a peer that goes away.

use ferrocx_net_socket::{Config, IfSpec, NetSocket};
use ferrocx_sdk::abi::{FxConnReq, FxPeerInfo, FX_DIR_RECV, FX_DIR_SEND};

use ferrocx_sdk::{Blob, ConnReq, ConnectState, DetachedHost, Host, Transport};
use std::time::{Duration, Instant};

fn ctx(dh: &DetachedHost) -> NetSocket {
    // SAFETY: `dh` outlives the context in every test.
    let host = unsafe { Host::from_raw(dh.as_ptr()) };
    let cfg = Config {
        ifname: Some(IfSpec::parse("FERROCX_SOCKET_IFNAME", "lo").unwrap()),
        ..Config::default()
    };
    NetSocket::with_config(host, cfg).unwrap()
}

/// Two rails on loopback (127.0.0.1 and 127.0.0.2), two sockets each, small chunks:
/// the acknowledged multi-rail data path.
fn rails_ctx(dh: &DetachedHost) -> NetSocket {
    // SAFETY: `dh` outlives the context in every test.
    let host = unsafe { Host::from_raw(dh.as_ptr()) };
    let cfg = Config {
        nsocks: 2,
        chunk: 4096,
        window: 64 << 10,
        ..Config::default()
    };
    let rails = vec![
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.2:0".parse().unwrap(),
    ];
    NetSocket::with_rails(host, cfg, rails)
}

fn contexts(dh: &DetachedHost) -> [NetSocket; 2] {
    [ctx(dh), rails_ctx(dh)]
}

fn req(me: i32, peer: i32, dir: i32) -> ConnReq {
    let mut a = FxPeerInfo::zeroed();
    a.rank = me;
    let mut b = FxPeerInfo::zeroed();
    b.rank = peer;
    ConnReq::from_raw(&FxConnReq {
        me: a,
        peer: b,
        direction: dir,
        channel: 0,
        conn_id: 7,
    })
}

type Conn = <NetSocket as Transport>::Conn;

fn pair(t: &NetSocket) -> (Conn, Conn) {
    let (mut sb, mut rb) = (Blob::new(), Blob::new());
    let mut s = t.setup(&req(0, 1, FX_DIR_SEND), &mut sb).unwrap();
    let mut r = t.setup(&req(1, 0, FX_DIR_RECV), &mut rb).unwrap();
    let start = Instant::now();
    let (mut sd, mut rd) = (false, false);
    while !(sd && rd) {
        assert!(start.elapsed() < Duration::from_secs(10), "connect hangs");
        sd = sd || t.connect(&mut s, &rb).unwrap() == ConnectState::Done;
        rd = rd || t.connect(&mut r, &sb).unwrap() == ConnectState::Done;
    }
    (s, r)
}

fn wait(
    t: &NetSocket,
    reqs: &mut [&mut <NetSocket as Transport>::Request],
) -> Vec<Result<usize, String>> {
    let mut out: Vec<Option<Result<usize, String>>> = vec![None; reqs.len()];
    let start = Instant::now();
    while out.iter().any(Option::is_none) {
        assert!(start.elapsed() < Duration::from_secs(20), "requests hang");
        for (i, r) in reqs.iter_mut().enumerate() {
            if out[i].is_none() {
                match t.test(r) {
                    Ok(Some(n)) => out[i] = Some(Ok(n)),
                    Ok(None) => {}
                    Err(e) => out[i] = Some(Err(e.to_string())),
                }
            }
        }
    }
    out.into_iter().flatten().collect()
}

#[test]
fn sizes_overflow_and_short_receives() {
    let dh = DetachedHost::new(Duration::from_secs(10));
    for t in contexts(&dh) {
        sizes_overflow_and_short_receives_on(&t);
    }
}

fn sizes_overflow_and_short_receives_on(t: &NetSocket) {
    let (mut s, mut r) = pair(t);
    for size in [0usize, 1, 7, 65537, 8 << 20] {
        let data: Vec<u8> = (0..size).map(|i| (i * 31 + size) as u8).collect();
        let mut buf = vec![0u8; size];
        // SAFETY: both buffers outlive the requests (waited for below).
        let (mut a, mut b) = unsafe {
            (
                t.isend(&mut s, data.as_ptr(), size, None).unwrap().unwrap(),
                t.irecv(&mut r, buf.as_mut_ptr(), size, None)
                    .unwrap()
                    .unwrap(),
            )
        };
        assert_eq!(wait(t, &mut [&mut a, &mut b]), vec![Ok(size), Ok(size)]);
        assert!(buf == data, "size {size}");
    }
    // Too long for the receive: that receive fails naming both sizes; the next one works.
    let big = vec![3u8; 100_000];
    let small_msg = [9u8; 5];
    let mut small = vec![0u8; 10];
    let mut next = vec![0u8; 10];
    // SAFETY: the buffers outlive the requests.
    let (mut a, mut b, mut c, mut d) = unsafe {
        (
            t.isend(&mut s, big.as_ptr(), big.len(), None)
                .unwrap()
                .unwrap(),
            t.isend(&mut s, small_msg.as_ptr(), 5, None)
                .unwrap()
                .unwrap(),
            t.irecv(&mut r, small.as_mut_ptr(), 10, None)
                .unwrap()
                .unwrap(),
            t.irecv(&mut r, next.as_mut_ptr(), 10, None)
                .unwrap()
                .unwrap(),
        )
    };
    let res = wait(t, &mut [&mut a, &mut b, &mut c, &mut d]);
    assert_eq!(res[0], Ok(100_000));
    let e = res[2].clone().unwrap_err();
    assert!(
        e.contains("100000") && e.contains("10") && e.contains("INVALID"),
        "{e}"
    );
    // Shorter than the receive: completes with the actual length.
    assert_eq!(res[3], Ok(5));
    assert_eq!(&next[..5], &small_msg);
    t.free(s).unwrap();
    t.free(r).unwrap();
}

#[test]
fn a_peer_that_goes_away_fails_pending_requests_naming_it() {
    let dh = DetachedHost::new(Duration::from_secs(10));
    for t in contexts(&dh) {
        a_peer_that_goes_away_on(&t);
    }
}

fn a_peer_that_goes_away_on(t: &NetSocket) {
    let (s, mut r) = pair(t);
    let mut buf = vec![0u8; 1000];
    // SAFETY: `buf` outlives the request.
    let mut q = unsafe {
        t.irecv(&mut r, buf.as_mut_ptr(), 1000, None)
            .unwrap()
            .unwrap()
    };
    t.free(s).unwrap();
    let res = wait(t, &mut [&mut q]);
    let e = res[0].clone().unwrap_err();
    assert!(e.contains("peer rank 0"), "{e}");

    // The other way round: the receiver leaves while a large send is in flight.
    let (mut s, r) = pair(t);
    let data = vec![1u8; 64 << 20];
    // SAFETY: `data` outlives the request.
    let mut q = unsafe {
        t.isend(&mut s, data.as_ptr(), data.len(), None)
            .unwrap()
            .unwrap()
    };
    t.free(r).unwrap();
    let res = wait(t, &mut [&mut q]);
    let e = res[0].clone().unwrap_err();
    assert!(e.contains("peer rank 1"), "{e}");
}

/// Sends posted long before their receives, every size around the chunk boundaries,
/// in both modes: chunks that arrive early wait in memory (multi-rail) or in the
/// kernel (one rail) and land in the right receive, byte for byte.
#[test]
fn early_sends_land_in_order_on_every_rail() {
    let dh = DetachedHost::new(Duration::from_secs(20));
    for t in contexts(&dh) {
        let (mut s, mut r) = pair(&t);
        let sizes: Vec<usize> = (0..40)
            .map(|i| [0, 1, 4095, 4096, 4097, 3 * 4096, 200_000, 1 << 20][i % 8] + i)
            .collect();
        let datas: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (i * 7 + k * 13) as u8).collect())
            .collect();
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xee; n]).collect();
        // SAFETY: every buffer outlives its request (all waited for below).
        let mut sends: Vec<_> = datas
            .iter()
            .map(|d| unsafe { t.isend(&mut s, d.as_ptr(), d.len(), None).unwrap().unwrap() })
            .collect();
        // Posting moved what the kernel took; give it time before any receive exists.
        std::thread::sleep(Duration::from_millis(50));
        let mut recvs: Vec<_> = bufs
            .iter_mut()
            // SAFETY: as above.
            .map(|b| unsafe {
                t.irecv(&mut r, b.as_mut_ptr(), b.len(), None)
                    .unwrap()
                    .unwrap()
            })
            .collect();
        let mut all: Vec<&mut _> = sends.iter_mut().chain(recvs.iter_mut()).collect();
        let res = wait(&t, &mut all);
        for (k, &n) in sizes.iter().enumerate() {
            assert_eq!(res[k], Ok(n));
            assert_eq!(res[sizes.len() + k], Ok(n));
            assert!(bufs[k] == datas[k], "message {k} ({n} bytes) differs");
        }
        t.free(s).unwrap();
        t.free(r).unwrap();
    }
}
