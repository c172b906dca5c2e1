//! The collectives on CUDA device memory: the same cases and checks as on host
//! memory, with every buffer (and its canary tail) copied to the GPU, the collective
//! queued on a stream with the stream-ordered API, and the results copied back.

use super::{ABuf, Prepared};
use ferrocx::{Communicator, Group};
use ferrocx_sdk::cuda::{self, sys, Stream};

/// Device memory for the tests (freed on drop, or handed back to the arena).
pub struct DevMem {
    pub ptr: u64,
    pub len: usize,
    /// Carved from the thread's arena (not freed on drop).
    carved: bool,
}

/// One large allocation per thread that test buffers are carved from while it
/// has room: the transports then see the same allocation case after case (opening
/// a CUDA IPC handle for every new allocation costs milliseconds, and the matrix
/// has thousands of cases). It starts over whenever no carved buffer is alive.
struct Arena {
    base: u64,
    len: usize,
    used: usize,
    live: usize,
}

const ARENA_BYTES: usize = 256 << 20;

thread_local! {
    static ARENA: std::cell::RefCell<Option<Arena>> = const { std::cell::RefCell::new(None) };
}

/// The thread's arena `(base, bytes)`, made now if it is not yet: a window over
/// it holds every buffer carved from it (at the same offset on every rank when
/// the ranks carve the same sizes in the same order).
pub fn arena() -> Result<(u64, usize), String> {
    drop(DevMem::new(1)?);
    ARENA.with(|a| {
        let a = a.borrow();
        let a = a.as_ref().ok_or("no arena")?;
        Ok((a.base, a.len))
    })
}

impl DevMem {
    /// `len` bytes (at least 1), 256-byte aligned: carved from the arena when it has room.
    pub fn new(len: usize) -> Result<Self, String> {
        let want = len.max(1).next_multiple_of(256);
        let carved = ARENA.with(|a| -> Result<Option<u64>, String> {
            let mut a = a.borrow_mut();
            if a.is_none() {
                let mut base = 0;
                // SAFETY: the communicator bound its context on this thread; valid out pointer.
                let r = unsafe { sys::cuMemAlloc_v2(&mut base, ARENA_BYTES) };
                cuda::check(r, "cuMemAlloc").map_err(|e| e.to_string())?;
                *a = Some(Arena {
                    base,
                    len: ARENA_BYTES,
                    used: 0,
                    live: 0,
                });
            }
            let a = a.as_mut().expect("made above");
            if a.live == 0 {
                a.used = 0;
            }
            if a.len - a.used < want {
                return Ok(None);
            }
            let p = a.base + a.used as u64;
            a.used += want;
            a.live += 1;
            Ok(Some(p))
        })?;
        if let Some(ptr) = carved {
            return Ok(DevMem {
                ptr,
                len,
                carved: true,
            });
        }
        let mut ptr = 0;
        cuda::check(
            // SAFETY: the communicator bound its context on this thread; valid out pointer.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) },
            "cuMemAlloc",
        )
        .map_err(|e| e.to_string())?;
        Ok(DevMem {
            ptr,
            len,
            carved: false,
        })
    }

    /// `len` bytes (at least 1) of their own allocation, never from the
    /// arena (outside its window).
    pub fn outside(len: usize) -> Result<Self, String> {
        let mut ptr = 0;
        cuda::check(
            // SAFETY: the communicator bound its context on this thread; valid out pointer.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) },
            "cuMemAlloc",
        )
        .map_err(|e| e.to_string())?;
        Ok(DevMem {
            ptr,
            len,
            carved: false,
        })
    }

    /// A copy from pageable memory may return before the bytes reach the device;
    /// the context synchronization makes them visible to every stream and peer.
    pub fn upload(&self, data: &[u8]) -> Result<(), String> {
        assert!(data.len() <= self.len);
        cuda::check(
            // SAFETY: `data` is readable for its length, the allocation at least as long.
            unsafe { sys::cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), data.len()) },
            "cuMemcpyHtoD",
        )
        .map_err(|e| e.to_string())?;
        // SAFETY: no arguments; the communicator's context is current.
        cuda::check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
            .map_err(|e| e.to_string())
    }

    pub fn download(&self, out: &mut [u8]) -> Result<(), String> {
        assert!(out.len() <= self.len);
        // SAFETY: `out` is writable for its length, the allocation at least as long.
        cuda::check(
            unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, out.len()) },
            "cuMemcpyDtoH",
        )
        .map_err(|e| e.to_string())
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        if self.carved {
            ARENA.with(|a| {
                if let Some(a) = a.borrow_mut().as_mut() {
                    a.live -= 1;
                }
            });
            return;
        }
        // SAFETY: allocated in `new`, freed once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Wait for everything queued on `s`.
pub fn sync(s: &Stream) -> Result<(), String> {
    // SAFETY: a live stream.
    cuda::check(
        unsafe { sys::cuStreamSynchronize(s.raw()) },
        "cuStreamSynchronize",
    )
    .map_err(|e| e.to_string())
}

/// How a test's capture treats potentially unsafe driver calls
/// (`cuStreamBeginCapture`'s mode): `Relaxed` allows them; `Global` (the
/// driver's default, and torch.cuda.graph's) forbids them on every thread
/// whose own mode is global, ferrocx's threads included, while the capture
/// lasts; `Thread` forbids them on the capturing thread only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureMode {
    Relaxed,
    Global,
    Thread,
}

impl std::str::FromStr for CaptureMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "relaxed" => Ok(CaptureMode::Relaxed),
            "global" => Ok(CaptureMode::Global),
            "thread" => Ok(CaptureMode::Thread),
            _ => Err(format!("capture mode {s:?}: relaxed, global or thread")),
        }
    }
}

/// Begin capturing `s` into a graph in `mode`.
pub fn begin_capture(s: &Stream, mode: CaptureMode) -> Result<(), String> {
    use sys::CUstreamCaptureMode as M;
    let mode = match mode {
        CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
        CaptureMode::Thread => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    };
    cuda::check(
        // SAFETY: a live stream of the current context.
        unsafe { sys::cuStreamBeginCapture_v2(s.raw(), mode) },
        "cuStreamBeginCapture",
    )
    .map_err(|e| e.to_string())
}

/// Hold `s`: work queued on it after this waits until [`release`] writes
/// `word` (a zeroed device word) from another stream.
pub fn hold(s: &Stream, word: &DevMem) -> Result<(), String> {
    cuda::check(
        // SAFETY: a live stream; `word` outlives the wait (the caller releases it first).
        unsafe { sys::cuStreamWaitValue32_v2(s.raw(), word.ptr, 1, 0) },
        "cuStreamWaitValue32",
    )
    .map_err(|e| e.to_string())
}

/// Release what [`hold`] held, from stream `by`.
pub fn release(by: &Stream, word: &DevMem) -> Result<(), String> {
    cuda::check(
        // SAFETY: a live stream; `word` is a live device allocation.
        unsafe { sys::cuStreamWriteValue32_v2(by.raw(), word.ptr, 1, 0) },
        "cuStreamWriteValue32",
    )
    .map_err(|e| e.to_string())
}

/// Instantiate the captured graph `g`.
pub fn instantiate(g: sys::CUgraph) -> Result<sys::CUgraphExec, String> {
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    cuda::check(
        // SAFETY: a graph the caller captured; a valid out pointer.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, g, 0) },
        "cuGraphInstantiate",
    )
    .map_err(|e| e.to_string())?;
    Ok(exec)
}

/// Launch the instantiated graph `exec` `n` times back to back on `s`, then
/// wait for the stream: the time it all took.
pub fn replay_back_to_back(
    exec: sys::CUgraphExec,
    s: &Stream,
    n: usize,
) -> Result<std::time::Duration, String> {
    let t = std::time::Instant::now();
    for rep in 0..n {
        cuda::check(
            // SAFETY: an instantiated graph (the caller's); a live stream.
            unsafe { sys::cuGraphLaunch(exec, s.raw()) },
            "cuGraphLaunch",
        )
        .map_err(|e| format!("timed replay {rep}: {e}"))?;
    }
    sync(s)?;
    Ok(t.elapsed())
}

/// An ABuf mirrored on the device, tail included.
fn mirror(b: &ABuf) -> Result<Option<DevMem>, String> {
    if b.len() == 0 {
        return Ok(None);
    }
    let d = DevMem::new(b.all().len())?;
    d.upload(b.all())?;
    Ok(Some(d))
}

/// Device copies of a case's buffers (send, receive or in-place buffer).
pub struct Mirrors {
    send: Option<DevMem>,
    buf: Option<DevMem>,
}

impl Prepared {
    /// Copy its buffers (tails included) to the device.
    pub fn mirrors(&self) -> Result<Mirrors, String> {
        Ok(Mirrors {
            send: mirror(&self.send)?,
            buf: mirror(&self.buf)?,
        })
    }

    /// Add it to a device group, ordered on `stream`.
    ///
    /// # Safety
    /// `m` and `stream` must outlive the group's completion on the stream.
    pub unsafe fn post_device(
        &self,
        g: &mut Group<'_>,
        m: &Mirrors,
        stream: &Stream,
    ) -> ferrocx::Result<()> {
        let p = |d: &Option<DevMem>| d.as_ref().map_or(0, |d| d.ptr);
        // SAFETY: as the caller promised.
        unsafe {
            if self.case.in_place {
                g.collective_in_place_on(&self.spec, p(&m.buf), stream.raw())
            } else {
                g.collective_on(&self.spec, p(&m.send), p(&m.buf), stream.raw())
            }
        }
    }

    /// Copy the results back for [`verify`](Self::verify) (after the streams synchronized).
    pub fn download(&mut self, m: &Mirrors) -> Result<(), String> {
        if let Some(d) = &m.send {
            d.download(self.send.all_mut())?;
        }
        if let Some(d) = &m.buf {
            d.download(self.buf.all_mut())?;
        }
        Ok(())
    }

    /// [`run_device`](Self::run_device), after checking that the communicator
    /// chooses `want` for the call.
    pub fn run_device_expecting(
        &mut self,
        comm: &Communicator,
        stream: &Stream,
        want: &str,
    ) -> Result<(), String> {
        self.run_device_on(comm, stream, Some(want))
    }

    /// Run it on device copies of its buffers, ordered on `stream`, and copy the
    /// results (tails included) back for [`verify`](Self::verify).
    pub fn run_device(&mut self, comm: &Communicator, stream: &Stream) -> Result<(), String> {
        self.run_device_on(comm, stream, None)
    }

    fn run_device_on(
        &mut self,
        comm: &Communicator,
        stream: &Stream,
        want: Option<&str>,
    ) -> Result<(), String> {
        let m = self.mirrors()?;
        let p = |d: &Option<DevMem>| d.as_ref().map_or(0, |d| d.ptr);
        // `RUNNER:bounded`: the call must also queue only self-timed work (no
        // host thread to wait for); `RUNNER:host-bound`: work that may wait for one.
        // `…@PATH`: a call with data must also take that path (the winner's
        // own words, e.g. ce's "LL128").
        let (want, path) = match want.map(|w| w.split_once('@')) {
            Some(Some((w, p))) => (Some(w), Some(p)),
            _ => (want, None),
        };
        let (want, bound) = match want.map(|w| w.split_once(':')) {
            Some(Some((w, b))) => (Some(w), Some(b)),
            _ => (want, None),
        };
        if let Some(b) = bound {
            if b != "bounded" && b != "host-bound" {
                return Err(format!(
                    "--expect RUNNER[:bounded|:host-bound][@PATH], not :{b}"
                ));
            }
        }
        let before = comm.host_bound_calls();
        if let Some(want) = want {
            let r = p(&m.buf);
            let s = if self.case.in_place { r } else { p(&m.send) };
            let c = comm
                .collective_choice(&self.spec, s, r, self.case.in_place, true)
                .map_err(|e| e.to_string())?;
            if c.winner() != want {
                return Err(format!(
                    "ran on {} ({}), expected {want}",
                    c.winner(),
                    c.explain()
                ));
            }
            if let Some(path) = path.filter(|_| self.spec.count > 0) {
                if c.path.as_deref() != Some(path) {
                    return Err(format!(
                        "{want} took the path {:?}, expected {path}",
                        c.path
                    ));
                }
            }
        }
        // SAFETY: a live stream of the communicator's device; the mirrors outlive the
        // stream synchronization below.
        let r = unsafe {
            if self.case.in_place {
                comm.collective_in_place_on(&self.spec, p(&m.buf), stream.raw())
            } else {
                comm.collective_on(&self.spec, p(&m.send), p(&m.buf), stream.raw())
            }
        };
        r.map_err(|e| e.to_string())?;
        let after = comm.host_bound_calls();
        sync(stream)?;
        comm.device_error().map_err(|e| e.to_string())?;
        match (bound, after != before) {
            (Some("bounded"), true) => {
                return Err(format!(
                    "queued work that may wait for a host thread (host_bound_calls {before} -> {after}), expected self-timed kernels only"
                ))
            }
            (Some("host-bound"), false) => {
                return Err(format!(
                    "did not count as host-bound (host_bound_calls stayed {before})"
                ))
            }
            _ => {}
        }
        self.download(&m)
    }
}

/// `dev-smoke`: one small device all-reduce and send/recv pair, each step logged
/// to stderr with its time (to locate a hang on a GPU host).
pub fn smoke() -> Result<String, String> {
    let t0 = std::time::Instant::now();
    let log = |what: &str| eprintln!("[{:8.3}s] {what}", t0.elapsed().as_secs_f64());
    log("creating the communicator");
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let (me, n) = (comm.rank(), comm.nranks());
    log(&format!("rank {me}/{n} on device {:?}", comm.device()));
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let count = 1024usize;
    let input: Vec<u8> = (0..count)
        .flat_map(|i| ((i + me) as f32).to_le_bytes())
        .collect();
    let send = DevMem::new(count * 4)?;
    let recv = DevMem::new(count * 4)?;
    send.upload(&input)?;
    log("buffers ready; all_reduce");
    let spec = ferrocx::CollSpec::new(ferrocx::CollKind::AllReduce, ferrocx::DataType::F32, count);
    // SAFETY: live stream and buffers, synchronized below.
    unsafe { comm.collective_on(&spec, send.ptr, recv.ptr, stream.raw()) }
        .map_err(|e| e.to_string())?;
    log("queued; synchronizing");
    sync(&stream)?;
    comm.device_error().map_err(|e| e.to_string())?;
    let mut out = vec![0u8; count * 4];
    recv.download(&mut out)?;
    for i in 0..count {
        let got = f32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
        let want: f32 = (0..n).map(|r| (i + r) as f32).sum();
        if got != want {
            return Err(format!("all_reduce element {i}: {got} != {want}"));
        }
    }
    log("all_reduce verified; send/recv ring");
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let mut g = comm.group_start();
    // SAFETY: as above.
    unsafe {
        g.send_on(send.ptr, count * 4, right, stream.raw())
            .map_err(|e| e.to_string())?;
        g.recv_on(recv.ptr, count * 4, left, stream.raw())
            .map_err(|e| e.to_string())?;
    }
    g.group_end().map_err(|e| e.to_string())?;
    sync(&stream)?;
    comm.device_error().map_err(|e| e.to_string())?;
    recv.download(&mut out)?;
    let want: Vec<u8> = (0..count)
        .flat_map(|i| ((i + left) as f32).to_le_bytes())
        .collect();
    if out != want {
        return Err("send/recv: wrong bytes".into());
    }
    log("send/recv verified");
    comm.destroy().map_err(|e| e.to_string())?;
    Ok(format!(
        "rank {me}: device smoke passed in {:.2}s",
        t0.elapsed().as_secs_f64()
    ))
}

/// `dev-lazy` (4 ranks, device memory): `host-p2p-lazy`'s program with
/// every rank's host waiting on its stream after each call, as the NCCL
/// drop-in waits for calls on the core's path. Messages of 1 MiB, each the
/// first on its connection: m1 = 2 → 0, m2 = 0 → 1, m3 = 1 → 2; ranks 0
/// and 1 make one call at a time (receive, then send), rank 2 posts m1 and
/// m3 in one group. m1 must leave before m3's connection can exist (rank 1
/// sends m3 only once m2, which waits for m1, arrived): when device plans
/// waited for all their connections before being queued, rank 2's group
/// never queued m1 and the ranks hung until the timeout.
pub fn lazy() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let me = comm.rank();
    if comm.nranks() != 4 {
        return Err("needs 4 ranks".into());
    }
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let size = 1 << 20;
    let send = DevMem::new(size)?;
    let recv = DevMem::new(size)?;
    // What rank `me` sends: its message's number in every byte.
    let mine = match me {
        0 => 2u8,
        1 => 3,
        _ => 1,
    };
    send.upload(&vec![mine; size])?;
    // One group on the stream, then the host waits for it.
    let call = |ops: &[(bool, usize)]| -> Result<(), String> {
        let mut g = comm.group_start();
        for &(is_send, peer) in ops {
            // SAFETY: live buffers and stream, synchronized below.
            unsafe {
                if is_send {
                    g.send_on(send.ptr, size, peer, stream.raw())
                } else {
                    g.recv_on(recv.ptr, size, peer, stream.raw())
                }
            }
            .map_err(|e| e.to_string())?;
        }
        g.group_end().map_err(|e| e.to_string())?;
        sync(&stream)?;
        comm.device_error().map_err(|e| e.to_string())
    };
    match me {
        0 => {
            call(&[(false, 2)])?;
            call(&[(true, 1)])?;
        }
        1 => {
            call(&[(false, 0)])?;
            call(&[(true, 2)])?;
        }
        2 => call(&[(true, 0), (false, 1)])?,
        _ => {}
    }
    if me < 3 {
        let mut got = vec![0u8; size];
        recv.download(&mut got)?;
        if got.iter().any(|&b| b != me as u8 + 1) {
            return Err(format!("rank {me} received wrong bytes"));
        }
    }
    comm.barrier().map_err(|e| e.to_string())?;
    comm.destroy().map_err(|e| e.to_string())?;
    Ok(format!("rank {me}: PASS dev-lazy"))
}

/// `ring-loop-dev SIZE --victim V --kill-after-ms MS`: device send/recv around the
/// ring until an error; the victim kills itself mid-transfer. Survivors must fail
/// with an error naming the victim (no hang: `FERROCX_TIMEOUT` bounds every wait).
pub fn ring_loop(size: usize, victim: Option<usize>, kill_after_ms: u64) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let (me, n) = (comm.rank(), comm.nranks());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    if victim == Some(me) {
        super::kill_self_after(kill_after_ms);
    }
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let send = DevMem::new(size)?;
    let recv = DevMem::new(size)?;
    send.upload(&vec![me as u8; size])?;
    let start = std::time::Instant::now();
    let mut iters = 0u64;
    while start.elapsed() < std::time::Duration::from_secs(60) {
        let mut g = comm.group_start();
        // SAFETY: live stream and buffers; synchronized below before reuse.
        let r = unsafe {
            g.send_on(send.ptr, size, right, stream.raw())
                .and_then(|_| g.recv_on(recv.ptr, size, left, stream.raw()))
                .and_then(|_| g.group_end())
        };
        let r = r
            .map_err(|e| e.to_string())
            .and_then(|_| sync(&stream))
            .and_then(|_| comm.device_error().map_err(|e| e.to_string()));
        match r {
            Ok(()) => iters += 1,
            Err(e) => {
                println!(
                    "ERROR after {iters} iterations, {:.2}s: {e}",
                    start.elapsed().as_secs_f64()
                );
                return match victim {
                    Some(v) if e.contains(&format!("rank {v}")) => Ok(format!("rank {me}: {e}")),
                    _ => Err(format!("unexpected error: {e}")),
                };
            }
        }
    }
    Err(format!("no error after {iters} iterations"))
}
