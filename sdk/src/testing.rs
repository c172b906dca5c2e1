//! Helpers for testing a transport through its [`Transport`] trait, without
//! the core (feature `testing`): a host table, peer records, connecting two
//! ends, posting and testing requests until they finish, message patterns,
//! blobs as text for tests that run the peer in another process. Every wait
//! gives up (panics) after [`DEADLINE`].

use crate::abi::{FxCommOob, FxConnReq, FxHostV1, FxPeerInfo, FX_DIR_RECV, FX_DIR_SEND, FX_OK};
use crate::{Blob, ConnReq, ConnectState, DetachedHost, Host, PluginResult, Transport};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// Same host hash for every test rank.
pub const HOST_HASH: u64 = 0x5eed_f00d;
/// Any single wait in a test gives up after this.
pub const DEADLINE: Duration = Duration::from_secs(120);

static CONN_IDS: AtomicU64 = AtomicU64::new(0x100);

/// A fresh connection id (unique in this process; tests that cross processes
/// add a per-process base).
pub fn next_conn_id() -> u64 {
    CONN_IDS.fetch_add(1, Ordering::Relaxed)
}

/// A host table (timeout 60 s) that lives for the rest of the test process.
pub fn host() -> (Host, &'static FxHostV1) {
    host_with_timeout(Duration::from_secs(60))
}

/// As [`host`] with another `FERROCX_TIMEOUT`.
pub fn host_with_timeout(t: Duration) -> (Host, &'static FxHostV1) {
    let detached: &'static DetachedHost = Box::leak(Box::new(DetachedHost::new(t)));
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

/// This process's pid, as the `FxPeerInfo` field.
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

/// Rank `rank` of 2 on the test host, process `pid`, no GPU.
pub fn peer(rank: i32, pid: i32) -> FxPeerInfo {
    let mut p = FxPeerInfo::zeroed();
    p.rank = rank;
    p.nranks = 2;
    p.local_rank = rank;
    p.pid = pid;
    p.host_hash = HOST_HASH;
    p.cuda_device = -1;
    p.cuda_pci = -1;
    p.set_host_name("testhost");
    p
}

/// A connection request between `me` and `peer` (`FX_DIR_SEND` or `FX_DIR_RECV`).
pub fn conn_req(dir: i32, me: FxPeerInfo, peer: FxPeerInfo, conn_id: u64) -> ConnReq {
    ConnReq::from_raw(&FxConnReq {
        me,
        peer,
        direction: dir,
        channel: 0,
        conn_id,
    })
}

/// Both ends of connection `id` set up, not connected: (sender, its blob,
/// receiver, its blob); `p0` sends to `p1`.
pub fn setup_pair<T: Transport>(
    tx: &T,
    rx: &T,
    p0: FxPeerInfo,
    p1: FxPeerInfo,
    id: u64,
) -> (T::Conn, Blob, T::Conn, Blob) {
    let mut tx_blob = Blob::new();
    let txc = tx
        .setup(&conn_req(FX_DIR_SEND, p0, p1, id), &mut tx_blob)
        .expect("sender setup");
    let mut rx_blob = Blob::new();
    let rxc = rx
        .setup(&conn_req(FX_DIR_RECV, p1, p0, id), &mut rx_blob)
        .expect("receiver setup");
    (txc, tx_blob, rxc, rx_blob)
}

/// Set up and connect both ends in this process, checking the handshake's
/// order (the receiver waits until the sender attached): (sender, receiver).
pub fn connect_pair<T: Transport>(
    tx: &T,
    rx: &T,
    p0: FxPeerInfo,
    p1: FxPeerInfo,
) -> (T::Conn, T::Conn) {
    let (mut txc, tx_blob, mut rxc, rx_blob) = setup_pair(tx, rx, p0, p1, next_conn_id());
    assert_eq!(
        rx.connect(&mut rxc, &tx_blob).unwrap(),
        ConnectState::InProgress,
        "the receiver waits for the sender"
    );
    assert_eq!(tx.connect(&mut txc, &rx_blob).unwrap(), ConnectState::Done);
    connect_until_done(rx, &mut rxc, &tx_blob);
    (txc, rxc)
}

/// Free both ends of a connection, each on its own context.
pub fn free_pair<T: Transport>(tx_ctx: &T, tx: T::Conn, rx_ctx: &T, rx: T::Conn) {
    tx_ctx.free(tx).expect("free the sending end");
    rx_ctx.free(rx).expect("free the receiving end");
}

/// Call `connect` until done.
pub fn connect_until_done<T: Transport>(t: &T, c: &mut T::Conn, blob: &Blob) {
    let start = Instant::now();
    while t.connect(c, blob).expect("connect") == ConnectState::InProgress {
        assert!(start.elapsed() < DEADLINE, "the peer never attached");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Test every pending request once (later ones first); true if any finished.
pub fn sweep<T: Transport>(
    t: &T,
    pending: &mut [Option<T::Request>],
    results: &mut [Option<PluginResult<usize>>],
) -> bool {
    let mut any = false;
    for i in (0..pending.len()).rev() {
        let Some(req) = pending[i].as_mut() else {
            continue;
        };
        match t.test(req) {
            Ok(None) => {}
            done => {
                results[i] = Some(done.map(|n| n.expect("some")));
                pending[i] = None;
                any = true;
            }
        }
    }
    any
}

/// Post `f` until the transport takes it (testing `pending` meanwhile so
/// that a full request table drains).
pub fn post<T: Transport>(
    t: &T,
    pending: &mut [Option<T::Request>],
    results: &mut [Option<PluginResult<usize>>],
    mut f: impl FnMut() -> PluginResult<Option<T::Request>>,
) -> T::Request {
    let start = Instant::now();
    loop {
        if let Some(r) = f().expect("post") {
            return r;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "post was refused for {DEADLINE:?}"
        );
        sweep(t, pending, results);
        std::thread::yield_now();
    }
}

/// Post `f` until the transport takes it (when nothing else is pending).
pub fn post_until<R>(mut f: impl FnMut() -> PluginResult<Option<R>>) -> R {
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

/// Test every request until all are finished (later ones before earlier
/// ones); the results in the order given.
pub fn wait_all<T: Transport>(t: &T, reqs: Vec<T::Request>) -> Vec<PluginResult<usize>> {
    let n = reqs.len();
    let mut reqs = reqs.into_iter();
    run_all(t, n, |_| Ok(reqs.next()))
}

/// Post one request per item with `f(i)` (all before waiting), then test
/// until every one finished; the results in post order.
pub fn run_all<T: Transport>(
    t: &T,
    n: usize,
    mut f: impl FnMut(usize) -> PluginResult<Option<T::Request>>,
) -> Vec<PluginResult<usize>> {
    let mut pending: Vec<Option<T::Request>> = (0..n).map(|_| None).collect();
    let mut results: Vec<Option<PluginResult<usize>>> = (0..n).map(|_| None).collect();
    for i in 0..n {
        let r = post(t, &mut pending, &mut results, || f(i));
        pending[i] = Some(r);
    }
    let start = Instant::now();
    while results.iter().any(Option::is_none) {
        assert!(
            start.elapsed() < DEADLINE,
            "requests did not finish in {DEADLINE:?}"
        );
        if !sweep(t, &mut pending, &mut results) {
            std::thread::yield_now();
        }
    }
    results.into_iter().map(Option::unwrap).collect()
}

/// Test one request until it finishes; its result.
pub fn wait<T: Transport>(t: &T, req: &mut T::Request) -> PluginResult<usize> {
    wait_within(t, req, DEADLINE)
}

/// As [`wait`], giving up (panicking) after `within`.
pub fn wait_within<T: Transport>(
    t: &T,
    req: &mut T::Request,
    within: Duration,
) -> PluginResult<usize> {
    let start = Instant::now();
    loop {
        if let Some(n) = t.test(req).transpose() {
            return n;
        }
        assert!(start.elapsed() < within, "no result within {within:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A message of `len` bytes whose content depends on `tag` (fast even unoptimized).
pub fn pattern(len: usize, tag: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let seed = tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for (i, c) in v.chunks_mut(8).enumerate() {
        let x = (i as u64 ^ seed).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let x = x ^ (x >> 31);
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    v
}

/// Where two byte strings first differ (for messages).
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Names in /dev/shm of `transport`'s segments made by this process.
pub fn our_segments(transport: &str) -> Vec<String> {
    let prefix = format!("ferrocx-{transport}-{}-", std::process::id());
    std::fs::read_dir(crate::sweep::SHM_DIR)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// An environment of `(name, value)` pairs for the settings parsers
/// (`lookup` arguments): unlisted names are unset.
pub fn vars(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |n| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
}

/// Check that each `(name, value)` setting alone makes `parse` fail with an
/// error that names the variable.
pub fn assert_rejected<T: std::fmt::Debug>(
    parse: impl Fn(&dyn Fn(&str) -> Option<String>) -> PluginResult<T>,
    bad: &[(&str, &str)],
) {
    for &(k, v) in bad {
        let err = parse(&vars(&[(k, v)])).expect_err(&format!("{k}={v} must be refused"));
        assert!(err.message().contains(k), "{k}={v}: {err}");
    }
}

/// Hex of a blob's bytes (to pass it between processes as text).
pub fn hex(b: &Blob) -> String {
    b.as_bytes().iter().map(|x| format!("{x:02x}")).collect()
}

/// Inverse of [`hex`].
pub fn unhex(s: &str) -> Blob {
    let bytes: Vec<u8> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect();
    let mut b = Blob::new();
    b.set_bytes(&bytes).expect("blob");
    b
}

/// A small deterministic generator (xorshift64*) for random schedules in tests and
/// simulations: the same seed replays the same schedule.
pub struct Rng(u64);

impl Rng {
    /// A generator from any seed (0 included).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// In-memory out-of-band collectives (`fx_comm_oob_t`) for `n` ranks that are
/// threads of this process: a collective plugin's `comm_init` in tests.
pub struct ThreadOob {
    n: usize,
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
}

/// One rank's view of a [`ThreadOob`]; keep it alive while its table is in use.
pub struct OobMember {
    rank: usize,
    group: Arc<ThreadOob>,
}

impl ThreadOob {
    /// For `n` ranks.
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(ThreadOob {
            n,
            slots: Mutex::new(vec![Vec::new(); n]),
            barrier: Barrier::new(n),
        })
    }

    /// Rank `rank`'s member.
    pub fn member(self: &Arc<Self>, rank: usize) -> Box<OobMember> {
        assert!(rank < self.n);
        Box::new(OobMember {
            rank,
            group: self.clone(),
        })
    }
}

impl OobMember {
    /// The C table, valid while `self` lives.
    pub fn table(&self) -> FxCommOob {
        FxCommOob {
            oob_ctx: self as *const OobMember as *mut c_void,
            all_gather: Some(oob_all_gather),
            barrier: Some(oob_barrier),
        }
    }
}

unsafe extern "C" fn oob_all_gather(
    ctx: *mut c_void,
    mine: *const c_void,
    len: usize,
    all: *mut c_void,
) -> i32 {
    // SAFETY: `ctx` is a live OobMember (`OobMember::table`'s contract).
    let m = unsafe { &*(ctx as *const OobMember) };
    // SAFETY: the plugin passes `len` readable bytes.
    let mine = unsafe { std::slice::from_raw_parts(mine as *const u8, len) }.to_vec();
    m.group.slots.lock().unwrap()[m.rank] = mine;
    m.group.barrier.wait();
    {
        let slots = m.group.slots.lock().unwrap();
        for (r, s) in slots.iter().enumerate() {
            assert_eq!(s.len(), len, "every rank gathers the same length");
            // SAFETY: `all` holds n × len writable bytes (the ABI's contract).
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), (all as *mut u8).add(r * len), len)
            };
        }
    }
    m.group.barrier.wait();
    FX_OK
}

unsafe extern "C" fn oob_barrier(ctx: *mut c_void) -> i32 {
    // SAFETY: as above.
    let m = unsafe { &*(ctx as *const OobMember) };
    m.group.barrier.wait();
    FX_OK
}
