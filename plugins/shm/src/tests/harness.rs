//! Drives two shm contexts ("rank 0" sends, "rank 1" receives) through the
//! `Transport` trait inside one process. Shared by the unit tests and
//! `tests/cleanup.rs`; the including module provides `shm` (this crate).

#![allow(dead_code)]

use super::shm::{Config, Shm, ShmConn, ShmMem, ShmRequest};
use ferrocx_sdk::abi::{FxConnReq, FxHostV1, FxPeerInfo, FX_DIR_RECV, FX_DIR_SEND};
use ferrocx_sdk::{
    Blob, ConnReq, ConnectState, DetachedHost, Host, MemKind, PluginResult, Transport,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Same host hash for every test rank.
pub const HOST_HASH: u64 = 0x5eed_f00d;
/// Any single wait in a test gives up after this.
pub const DEADLINE: Duration = Duration::from_secs(20);

static CONN_IDS: AtomicU64 = AtomicU64::new(0x100);

/// This process's pid, as the FxPeerInfo field.
pub fn my_pid() -> i32 {
    std::process::id() as i32
}

/// The pid of a process that has exited and been reaped.
pub fn dead_pid() -> i32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let pid = child.id() as i32;
    child.wait().expect("wait");
    pid
}

/// A peer record on the test host.
pub fn peer_info(rank: i32, pid: i32) -> FxPeerInfo {
    let mut p = FxPeerInfo::zeroed();
    p.rank = rank;
    p.nranks = 2;
    p.local_rank = rank;
    p.pid = pid;
    p.host_hash = HOST_HASH;
    p.set_host_name("testhost");
    p
}

/// A host table that lives for the rest of the test process.
pub fn host() -> (Host, &'static FxHostV1) {
    let detached: &'static DetachedHost =
        Box::leak(Box::new(DetachedHost::new(Duration::from_secs(30))));
    // SAFETY: the leaked table lives until the process exits.
    let host = unsafe { Host::from_raw(detached.as_ptr()) };
    // SAFETY: as above.
    (host, unsafe { &*detached.as_ptr() })
}

/// Raise the abort flag of a table made by [`host`].
pub fn abort(table: &FxHostV1) {
    // SAFETY: DetachedHost points abort_flag at an AtomicU32 that lives as long as the table.
    unsafe { (*table.abort_flag).store(1, Ordering::Release) };
}

/// A plugin context with `cfg`.
pub fn context(cfg: Config) -> Shm {
    Shm::with_config(host().0, cfg).expect("shm context")
}

/// Small rings so that multi-chunk pipelining is exercised with small messages.
pub fn small_ring() -> Config {
    Config {
        chunk_size: 4096,
        nslots: 4,
        ..Config::default()
    }
}

/// A connection request between rank `me` and rank `peer`.
pub fn conn_req(dir: i32, me: FxPeerInfo, peer: FxPeerInfo, conn_id: u64) -> ConnReq {
    ConnReq::from_raw(&FxConnReq {
        me,
        peer,
        direction: dir,
        channel: 0,
        conn_id,
    })
}

/// Both ends of one connection rank 0 → rank 1.
pub struct Link {
    /// Rank 0's context.
    pub tx_shm: Shm,
    /// Rank 1's context.
    pub rx_shm: Shm,
    /// Rank 0's sending end.
    pub tx: ShmConn,
    /// Rank 1's receiving end.
    pub rx: ShmConn,
}

/// Set up both ends; the blobs are returned unconnected.
pub fn setup(
    tx_shm: Shm,
    rx_shm: Shm,
    tx_pid: i32,
    rx_pid: i32,
) -> (Shm, Shm, ShmConn, Blob, ShmConn, Blob) {
    let id = CONN_IDS.fetch_add(1, Ordering::Relaxed);
    let (p0, p1) = (peer_info(0, tx_pid), peer_info(1, rx_pid));
    let mut tx_blob = Blob::new();
    let tx = tx_shm
        .setup(&conn_req(FX_DIR_SEND, p0, p1, id), &mut tx_blob)
        .expect("sender setup");
    let mut rx_blob = Blob::new();
    let rx = rx_shm
        .setup(&conn_req(FX_DIR_RECV, p1, p0, id), &mut rx_blob)
        .expect("receiver setup");
    (tx_shm, rx_shm, tx, tx_blob, rx, rx_blob)
}

/// A connected link with the given configurations and pids.
pub fn link_with(tx_cfg: Config, rx_cfg: Config, tx_pid: i32, rx_pid: i32) -> Link {
    let (tx_shm, rx_shm, mut tx, tx_blob, mut rx, rx_blob) =
        setup(context(tx_cfg), context(rx_cfg), tx_pid, rx_pid);
    assert_eq!(
        rx_shm.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::InProgress,
        "receiver waits for the sender"
    );
    assert_eq!(
        tx_shm.connect(&mut tx, &rx_blob).unwrap(),
        ConnectState::Done
    );
    assert_eq!(
        rx_shm.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::Done
    );
    Link {
        tx_shm,
        rx_shm,
        tx,
        rx,
    }
}

/// A connected link, both ends in this process.
pub fn link(cfg: Config) -> Link {
    link_with(cfg.clone(), cfg, my_pid(), my_pid())
}

/// Test every request until all are finished, in reverse post order (so
/// later requests are tested before earlier ones).
pub fn wait_all(shm: &Shm, reqs: Vec<ShmRequest>) -> Vec<PluginResult<usize>> {
    let mut slots: Vec<Option<ShmRequest>> = reqs.into_iter().map(Some).collect();
    let mut results: Vec<Option<PluginResult<usize>>> = slots.iter().map(|_| None).collect();
    let start = Instant::now();
    while results.iter().any(Option::is_none) {
        assert!(
            start.elapsed() < DEADLINE,
            "requests did not finish in {DEADLINE:?}"
        );
        let mut any = false;
        for i in (0..slots.len()).rev() {
            let Some(req) = slots[i].as_mut() else {
                continue;
            };
            match shm.test(req) {
                Ok(None) => {}
                done => {
                    results[i] = Some(done.map(|n| n.expect("some")));
                    slots[i] = None;
                    any = true;
                }
            }
        }
        if !any {
            std::thread::yield_now();
        }
    }
    results.into_iter().map(Option::unwrap).collect()
}

/// Post `f` until the plugin takes it.
pub fn post(mut f: impl FnMut() -> PluginResult<Option<ShmRequest>>) -> ShmRequest {
    let start = Instant::now();
    loop {
        if let Some(r) = f().expect("post") {
            return r;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "post was refused for {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

/// A message of `len` bytes whose content depends on `tag`.
pub fn pattern(len: usize, tag: u64) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Result of one receive.
#[derive(Debug)]
pub struct Received {
    /// nbytes or the error.
    pub result: PluginResult<usize>,
    /// The whole posted buffer after completion.
    pub buf: Vec<u8>,
}

/// Send `msgs` and receive into buffers of `recv_sizes` concurrently (two
/// threads, everything posted up front), registering the receive buffers when
/// `register` is set. Returns the send results and the receives.
pub fn exchange(
    l: &mut Link,
    msgs: &[Vec<u8>],
    recv_sizes: &[usize],
    register: bool,
) -> (Vec<PluginResult<usize>>, Vec<Received>) {
    let Link {
        tx_shm,
        rx_shm,
        tx,
        rx,
    } = l;
    let (tx_shm, rx_shm) = (&*tx_shm, &*rx_shm);
    std::thread::scope(|s| {
        let sender = s.spawn(move || {
            let reqs: Vec<ShmRequest> = msgs
                .iter()
                // SAFETY: `msgs` outlives the requests, which all finish before this closure returns.
                .map(|m| post(|| unsafe { tx_shm.isend(tx, m.as_ptr(), m.len(), None) }))
                .collect();
            wait_all(tx_shm, reqs)
        });
        let mut bufs: Vec<Vec<u8>> = recv_sizes.iter().map(|&n| vec![0xEEu8; n]).collect();
        let mut handles: Vec<Option<ShmMem>> = Vec::new();
        for b in bufs.iter_mut() {
            handles.push(if register {
                // SAFETY: the buffer lives until after deregistration below.
                Some(
                    unsafe {
                        rx_shm.register(b.as_mut_ptr(), b.len(), MemKind::Host, &mut Blob::new())
                    }
                    .unwrap(),
                )
            } else {
                None
            });
        }
        let reqs: Vec<ShmRequest> = bufs
            .iter_mut()
            .zip(&handles)
            // SAFETY: the buffers are neither moved nor touched until every request finished.
            .map(|(b, h)| post(|| unsafe { rx_shm.irecv(rx, b.as_mut_ptr(), b.len(), h.as_ref()) }))
            .collect();
        let results = wait_all(rx_shm, reqs);
        for h in handles.into_iter().flatten() {
            rx_shm.deregister(h).unwrap();
        }
        let received = results
            .into_iter()
            .zip(bufs)
            .map(|(result, buf)| Received { result, buf })
            .collect();
        (sender.join().expect("sender thread"), received)
    })
}

/// Names in /dev/shm made by this process's shm segments.
pub fn our_segments() -> Vec<String> {
    let prefix = format!("ferrocx-{}-", std::process::id());
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}
