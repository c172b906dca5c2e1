//! Test harness: p2p contexts on the stand-in backend ("fake") or on CUDA,
//! buffers of either memory kind, posting and waiting.

#![allow(dead_code)]

use crate::backend::fake::{FakeBackend, FakeBuf};
use crate::backend::{cuda::CudaBackend, Backend};
use crate::{Config, P2p, P2pConn, P2pMem, P2pRequest};
use ferrocx_sdk::abi::{FxConnReq, FxHostV1, FxPeerInfo, FX_DIR_RECV, FX_DIR_SEND};
use ferrocx_sdk::cuda::{self, check, sys, Context};
use ferrocx_sdk::{
    Blob, ConnReq, ConnectState, DetachedHost, Host, MemKind, PluginResult, Transport,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Same host hash for every test rank.
pub const HOST_HASH: u64 = 0x5eed_f00d;
/// Any single wait in a test gives up after this.
pub const DEADLINE: Duration = Duration::from_secs(120);
/// One MiB.
pub const MIB: usize = 1 << 20;

static CONN_IDS: AtomicU64 = AtomicU64::new(0x100);

/// Tests that count process-wide CUDA handles or GPU memory, or spawn a peer
/// process, run one at a time even when the test harness runs threads.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh connection id (unique in this process; tests add a per-process base across processes).
pub fn next_conn_id() -> u64 {
    CONN_IDS.fetch_add(1, Ordering::Relaxed)
}

/// Which GPU the protocol runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The host-memory stand-in (always available).
    Fake,
    /// Real CUDA.
    Cuda,
}

impl Mode {
    /// Its name in environment variables and messages.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Fake => "fake",
            Mode::Cuda => "cuda",
        }
    }

    /// Parse [`name`](Self::name).
    pub fn parse(s: &str) -> Mode {
        match s {
            "cuda" => Mode::Cuda,
            _ => Mode::Fake,
        }
    }
}

/// Whether CUDA tests can run here; prints why not (the test then skips).
pub fn cuda_ready(test: &str) -> bool {
    match cuda::available() {
        Ok(_) => true,
        Err(why) => {
            ferrocx_sdk::cuda::skip_notice(&format!("{test} on CUDA: {why}"));
            false
        }
    }
}

/// The modes a test runs in: the stand-in always, CUDA when a driver and a GPU exist.
pub fn modes(test: &str) -> Vec<Mode> {
    let mut v = vec![Mode::Fake];
    if cuda_ready(test) {
        v.push(Mode::Cuda);
    }
    v
}

/// The CUDA devices of this process.
pub fn cuda_devices() -> usize {
    cuda::available().unwrap_or(0)
}

/// Retained primary contexts, by device, kept for the whole test process.
fn contexts() -> &'static Mutex<HashMap<i32, Arc<Context>>> {
    static C: OnceLock<Mutex<HashMap<i32, Arc<Context>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Make `dev`'s primary context current on this thread (CUDA mode).
pub fn bind(dev: i32) {
    let ctx = contexts()
        .lock()
        .unwrap()
        .entry(dev)
        .or_insert_with(|| Arc::new(Context::primary(dev).expect("primary context")))
        .clone();
    ctx.bind().expect("bind");
}

/// Free and total memory of `dev` (CUDA mode).
pub fn mem_info(dev: i32) -> (usize, usize) {
    bind(dev);
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: bound context; valid out pointers.
    check(
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        "cuMemGetInfo",
    )
    .unwrap();
    (free, total)
}

/// A host table that lives for the rest of the test process.
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

/// The backend for `mode`: a new stand-in each time (so a context's handle
/// counts are its own while tests run in parallel), or CUDA.
pub fn backend(mode: Mode) -> Arc<dyn Backend> {
    match mode {
        Mode::Fake => Arc::new(FakeBackend::new()),
        Mode::Cuda => Arc::new(CudaBackend),
    }
}

/// A plugin context with `cfg`.
pub fn context(mode: Mode, cfg: Config) -> P2p {
    P2p::with_backend(host().0, cfg, backend(mode)).expect("p2p context")
}

/// Small FIFOs so that multi-chunk pipelining is exercised with small messages.
pub fn small_fifo() -> Config {
    Config {
        chunk_size: 4096,
        nslots: 4,
        ..Config::default()
    }
}

/// The PCI id a rank on `dev` reports.
pub fn pci(mode: Mode, dev: i32) -> i32 {
    match mode {
        Mode::Fake => 0x100 + dev,
        Mode::Cuda => cuda::pci_id(dev).expect("pci id"),
    }
}

/// A peer record on the test host, rank `rank` with GPU `dev`.
pub fn peer_info(mode: Mode, rank: i32, pid: i32, dev: i32) -> FxPeerInfo {
    let mut p = FxPeerInfo::zeroed();
    p.rank = rank;
    p.nranks = 2;
    p.local_rank = rank;
    p.pid = pid;
    p.host_hash = HOST_HASH;
    p.cuda_device = dev;
    p.cuda_pci = pci(mode, dev);
    p.set_host_name("testhost");
    p
}

/// This process's pid.
pub fn my_pid() -> i32 {
    std::process::id() as i32
}

/// A connection request between `me` and `peer`.
pub fn conn_req(dir: i32, me: FxPeerInfo, peer: FxPeerInfo, conn_id: u64) -> ConnReq {
    ConnReq::from_raw(&FxConnReq {
        me,
        peer,
        direction: dir,
        channel: 0,
        conn_id,
    })
}

/// Call `connect` until done.
pub fn connect_until_done(p: &P2p, c: &mut P2pConn, blob: &Blob) {
    let start = Instant::now();
    while p.connect(c, blob).expect("connect") == ConnectState::InProgress {
        assert!(start.elapsed() < DEADLINE, "the peer never attached");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Both ends of one connection rank 0 → rank 1 in this process.
pub struct Link {
    /// Rank 0's context.
    pub tx_p2p: P2p,
    /// Rank 1's context.
    pub rx_p2p: P2p,
    /// Rank 0's sending end.
    pub tx: P2pConn,
    /// Rank 1's receiving end.
    pub rx: P2pConn,
    /// Rank 0's device.
    pub tx_dev: i32,
    /// Rank 1's device.
    pub rx_dev: i32,
    /// The mode.
    pub mode: Mode,
}

/// A connected link; in CUDA mode rank 1 uses GPU 1 when there are two.
pub fn link_with(mode: Mode, tx_cfg: Config, rx_cfg: Config) -> Link {
    let (tx_dev, rx_dev) = match mode {
        Mode::Cuda if cuda_devices() >= 2 => (0, 1),
        _ => (0, 0),
    };
    let tx_p2p = context(mode, tx_cfg);
    let rx_p2p = context(mode, rx_cfg);
    let id = next_conn_id();
    let (p0, p1) = (
        peer_info(mode, 0, my_pid(), tx_dev),
        peer_info(mode, 1, my_pid(), rx_dev),
    );
    let mut tx_blob = Blob::new();
    let mut tx = tx_p2p
        .setup(&conn_req(FX_DIR_SEND, p0, p1, id), &mut tx_blob)
        .expect("sender setup");
    let mut rx_blob = Blob::new();
    let mut rx = rx_p2p
        .setup(&conn_req(FX_DIR_RECV, p1, p0, id), &mut rx_blob)
        .expect("receiver setup");
    assert_eq!(
        rx_p2p.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::InProgress,
        "the receiver waits for the sender"
    );
    assert_eq!(
        tx_p2p.connect(&mut tx, &rx_blob).unwrap(),
        ConnectState::Done
    );
    connect_until_done(&rx_p2p, &mut rx, &tx_blob);
    Link {
        tx_p2p,
        rx_p2p,
        tx,
        rx,
        tx_dev,
        rx_dev,
        mode,
    }
}

/// A connected link with one configuration on both ends.
pub fn link(mode: Mode, cfg: Config) -> Link {
    link_with(mode, cfg.clone(), cfg)
}

/// Where a buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mem {
    /// Pageable host memory.
    Host,
    /// Device memory (`cuMemAlloc`, or a stand-in buffer).
    Device,
}

/// A test buffer of either kind.
pub enum Buf {
    /// Host memory.
    Host(Vec<u8>),
    /// Stand-in device memory (at least one byte is allocated) and the length asked for.
    Fake(FakeBuf, usize),
    /// CUDA device memory on `dev`.
    Cuda {
        /// Device address.
        ptr: u64,
        /// Bytes.
        len: usize,
        /// Device.
        dev: i32,
    },
}

impl Buf {
    /// `len` bytes of `mem` in `mode` on `dev`, filled with 0xEE.
    pub fn new(mode: Mode, mem: Mem, dev: i32, len: usize) -> Buf {
        let b = match (mem, mode) {
            (Mem::Host, _) => Buf::Host(vec![0; len]),
            (Mem::Device, Mode::Fake) => {
                Buf::Fake(FakeBuf::new(len).expect("stand-in buffer"), len)
            }
            (Mem::Device, Mode::Cuda) => {
                bind(dev);
                let mut ptr = 0;
                // SAFETY: bound context; valid out pointer.
                check(
                    unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) },
                    "cuMemAlloc",
                )
                .unwrap();
                Buf::Cuda { ptr, len, dev }
            }
        };
        b.fill_byte(0xEE);
        b
    }

    /// Its address.
    pub fn addr(&self) -> u64 {
        match self {
            Buf::Host(v) => v.as_ptr() as u64,
            Buf::Fake(f, _) => f.addr(),
            Buf::Cuda { ptr, .. } => *ptr,
        }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        match self {
            Buf::Host(v) => v.len(),
            Buf::Fake(_, len) => *len,
            Buf::Cuda { len, .. } => *len,
        }
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is device memory.
    pub fn kind(&self) -> MemKind {
        match self {
            Buf::Host(_) => MemKind::Host,
            _ => MemKind::Cuda,
        }
    }

    fn fill_byte(&self, b: u8) {
        match self {
            Buf::Host(_) => {}
            Buf::Fake(f, _) => f.write(&vec![b; f.len()]),
            Buf::Cuda { ptr, len, dev } => {
                bind(*dev);
                // SAFETY: `len` bytes allocated at `ptr`.
                check(unsafe { sys::cuMemsetD8_v2(*ptr, b, *len) }, "cuMemsetD8").unwrap();
            }
        }
    }

    /// Copy `data` in at offset 0 (nothing else may use the buffer).
    pub fn write(&mut self, data: &[u8]) {
        assert!(data.len() <= self.len());
        match self {
            Buf::Host(v) => v[..data.len()].copy_from_slice(data),
            Buf::Fake(f, _) => f.write(data),
            Buf::Cuda { ptr, dev, .. } => {
                if data.is_empty() {
                    return;
                }
                bind(*dev);
                // SAFETY: in bounds (checked); synchronous copy from a live slice.
                check(
                    unsafe { sys::cuMemcpyHtoD_v2(*ptr, data.as_ptr() as *const _, data.len()) },
                    "cuMemcpyHtoD",
                )
                .unwrap();
            }
        }
    }

    /// The first `n` bytes.
    pub fn read(&self, n: usize) -> Vec<u8> {
        assert!(n <= self.len());
        match self {
            Buf::Host(v) => v[..n].to_vec(),
            Buf::Fake(f, _) => f.read(n),
            Buf::Cuda { ptr, dev, .. } => {
                let mut out = vec![0u8; n];
                if n > 0 {
                    bind(*dev);
                    // SAFETY: in bounds (checked); synchronous copy into a live vector.
                    check(
                        unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut _, *ptr, n) },
                        "cuMemcpyDtoH",
                    )
                    .unwrap();
                }
                out
            }
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Buf::Cuda { ptr, dev, .. } = self {
            bind(*dev);
            // SAFETY: allocated in `new`, freed once; no request uses it any more.
            unsafe { sys::cuMemFree_v2(*ptr) };
        }
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

/// Post `f` until the plugin takes it (testing `pending` meanwhile so that
/// a full request table drains).
pub fn post(
    p: &P2p,
    pending: &mut [Option<P2pRequest>],
    results: &mut [Option<PluginResult<usize>>],
    mut f: impl FnMut() -> PluginResult<Option<P2pRequest>>,
) -> P2pRequest {
    let start = Instant::now();
    loop {
        if let Some(r) = f().expect("post") {
            return r;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "post was refused for {DEADLINE:?}"
        );
        sweep(p, pending, results);
        std::thread::yield_now();
    }
}

/// Test every pending request once (later ones first); true if any finished.
pub fn sweep(
    p: &P2p,
    pending: &mut [Option<P2pRequest>],
    results: &mut [Option<PluginResult<usize>>],
) -> bool {
    let mut any = false;
    for i in (0..pending.len()).rev() {
        let Some(req) = pending[i].as_mut() else {
            continue;
        };
        match p.test(req) {
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

/// Post one request per item with `f(i)` (all before waiting), then test
/// until every one finished; the results in post order.
pub fn run_all(
    p: &P2p,
    n: usize,
    mut f: impl FnMut(usize) -> PluginResult<Option<P2pRequest>>,
) -> Vec<PluginResult<usize>> {
    let mut pending: Vec<Option<P2pRequest>> = (0..n).map(|_| None).collect();
    let mut results: Vec<Option<PluginResult<usize>>> = (0..n).map(|_| None).collect();
    for i in 0..n {
        let r = post(p, &mut pending, &mut results, || f(i));
        pending[i] = Some(r);
    }
    let start = Instant::now();
    while results.iter().any(Option::is_none) {
        assert!(
            start.elapsed() < DEADLINE,
            "requests did not finish in {DEADLINE:?}"
        );
        if !sweep(p, &mut pending, &mut results) {
            std::thread::yield_now();
        }
    }
    results.into_iter().map(Option::unwrap).collect()
}

/// One message of a test exchange.
#[derive(Debug, Clone, Copy)]
pub struct Msg {
    /// Bytes sent.
    pub len: usize,
    /// Bytes posted for the receive (≥ len unless testing overflow).
    pub cap: usize,
    /// Memory of the send buffer.
    pub src: Mem,
    /// Memory of the receive buffer.
    pub dst: Mem,
    /// Register the receive buffer.
    pub register: bool,
}

impl Msg {
    /// `len` bytes device to device, receive posted at exactly `len`.
    pub fn dev(len: usize) -> Msg {
        Msg {
            len,
            cap: len,
            src: Mem::Device,
            dst: Mem::Device,
            register: false,
        }
    }
}

/// Send every message's pattern (tag `tag0 + i`) on `tx` (one thread).
pub fn send_all(
    p: &P2p,
    c: &mut P2pConn,
    mode: Mode,
    dev: i32,
    msgs: &[Msg],
    tag0: u64,
) -> Vec<PluginResult<usize>> {
    if mode == Mode::Cuda {
        bind(dev);
    }
    let bufs: Vec<Buf> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut b = Buf::new(mode, m.src, dev, m.len);
            b.write(&pattern(m.len, tag0 + i as u64));
            b
        })
        .collect();
    // SAFETY: the buffers outlive every request (run_all waits for all of them).
    run_all(p, msgs.len(), |i| unsafe {
        p.isend(c, bufs[i].addr() as *const u8, bufs[i].len(), None)
    })
}

/// Receive every message on `rx` (one thread) and check its bytes against
/// the pattern of tag `tag0 + i`; returns per message the result (nbytes or
/// error) and, for completed ones, whether the bytes were right.
pub fn recv_all(
    p: &P2p,
    c: &mut P2pConn,
    mode: Mode,
    dev: i32,
    msgs: &[Msg],
    tag0: u64,
) -> Vec<Result<usize, String>> {
    if mode == Mode::Cuda {
        bind(dev);
    }
    let bufs: Vec<Buf> = msgs
        .iter()
        .map(|m| Buf::new(mode, m.dst, dev, m.cap))
        .collect();
    let regs: Vec<Option<P2pMem>> = msgs
        .iter()
        .zip(&bufs)
        .map(|(m, b)| {
            (m.register && !b.is_empty()).then(|| {
                // SAFETY: the buffer outlives its registration (deregistered below).
                unsafe { p.register(b.addr() as *mut u8, b.len(), b.kind(), &mut Blob::new()) }
                    .expect("register")
            })
        })
        .collect();
    // SAFETY: the buffers are neither moved nor touched until every request finished.
    let results = run_all(p, msgs.len(), |i| unsafe {
        p.irecv(
            c,
            bufs[i].addr() as *mut u8,
            bufs[i].len(),
            regs[i].as_ref(),
        )
    });
    for r in regs.into_iter().flatten() {
        p.deregister(r).unwrap();
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Err(e) => Err(format!("error: {e}")),
            Ok(n) => {
                let want = pattern(msgs[i].len, tag0 + i as u64);
                let got = bufs[i].read(n);
                match first_difference(&got, &want) {
                    None => Ok(n),
                    Some(at) => Err(format!(
                        "message {i} ({} B, received {n}) differs at byte {at}",
                        msgs[i].len
                    )),
                }
            }
        })
        .collect()
}

/// Exchange `msgs` over a link (sender and receiver on two threads).
pub fn exchange(
    l: &mut Link,
    msgs: &[Msg],
    tag0: u64,
) -> (Vec<PluginResult<usize>>, Vec<Result<usize, String>>) {
    let Link {
        tx_p2p,
        rx_p2p,
        tx,
        rx,
        tx_dev,
        rx_dev,
        mode,
    } = l;
    let (tx_p2p, rx_p2p, mode, tx_dev, rx_dev) = (&*tx_p2p, &*rx_p2p, *mode, *tx_dev, *rx_dev);
    std::thread::scope(|s| {
        let sender = s.spawn(move || send_all(tx_p2p, tx, mode, tx_dev, msgs, tag0));
        let received = recv_all(rx_p2p, rx, mode, rx_dev, msgs, tag0);
        (sender.join().expect("sender thread"), received)
    })
}

/// Assert that every message of an exchange arrived intact.
pub fn assert_all_ok(
    msgs: &[Msg],
    sent: &[PluginResult<usize>],
    received: &[Result<usize, String>],
) {
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(sent[i].as_ref().unwrap(), &m.len, "send {i}");
        assert_eq!(received[i].as_ref().unwrap(), &m.len, "receive {i}");
    }
}

/// Names in /dev/shm made by this process's p2p segments.
pub fn our_segments() -> Vec<String> {
    let prefix = format!("ferrocx-p2p-{}-", std::process::id());
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
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
