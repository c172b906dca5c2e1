//! Test harness: p2p contexts on the SDK's stand-in driver ("fake") or on
//! CUDA, buffers of either memory kind, exchanges checked byte for byte; on
//! the SDK's transport test helpers.

#![allow(dead_code)]

use ferrocx_p2p::{Config, P2p, P2pConn, P2pMem};
use ferrocx_sdk::abi::FxPeerInfo;
use ferrocx_sdk::cuda::{self, check, sys, Context};
use ferrocx_sdk::device::cuda::CudaDriver;
use ferrocx_sdk::device::fake::{FakeBuf, FakeDriver};
use ferrocx_sdk::device::Driver;
pub use ferrocx_sdk::testing::*;
use ferrocx_sdk::{Blob, MemKind, PluginResult, Transport};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// One MiB.
pub const MIB: usize = 1 << 20;

/// Tests that count process-wide CUDA handles or GPU memory, or spawn a peer
/// process, run one at a time even when the test harness runs threads.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
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

/// The driver for `mode`: a new stand-in each time (so a context's handle
/// counts are its own while tests run in parallel), or CUDA.
pub fn driver(mode: Mode) -> Arc<dyn Driver> {
    match mode {
        Mode::Fake => Arc::new(FakeDriver::new()),
        Mode::Cuda => Arc::new(CudaDriver),
    }
}

/// A plugin context with `cfg`.
pub fn context(mode: Mode, cfg: Config) -> P2p {
    ferrocx_p2p::with_driver(host().0, cfg, driver(mode)).expect("p2p context")
}

/// `cfg` with its ring settings changed by `f`.
pub fn ring(mut cfg: Config, f: impl FnOnce(&mut ferrocx_sdk::same_host::RingConfig)) -> Config {
    f(&mut cfg.ring);
    cfg
}

/// Small FIFOs so that multi-chunk pipelining is exercised with small messages.
pub fn small_fifo() -> Config {
    ring(Config::default(), |r| {
        r.chunk_size = 4096;
        r.nslots = 4;
    })
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
    let mut p = peer(rank, pid);
    p.cuda_device = dev;
    p.cuda_pci = pci(mode, dev);
    p
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
    let (p0, p1) = (
        peer_info(mode, 0, my_pid(), tx_dev),
        peer_info(mode, 1, my_pid(), rx_dev),
    );
    let (tx, rx) = connect_pair(&tx_p2p, &rx_p2p, p0, p1);
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

impl Link {
    /// Free both connection ends; the two contexts (for their stats).
    pub fn free_conns(self) -> (P2p, P2p) {
        free_pair(&self.tx_p2p, self.tx, &self.rx_p2p, self.rx);
        (self.tx_p2p, self.rx_p2p)
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
