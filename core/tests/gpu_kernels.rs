//! The device reduction kernels (`ferrocx::device::kernels`) on a real GPU,
//! checked element by element against the CPU kernels (`ferrocx::reduce`).
//!
//! Every test prints `skipping: <reason>` and passes when there is no CUDA
//! driver, no device, or no NVRTC — unless `FERROCX_REQUIRE_GPU=1`, which
//! turns a skip into a failure (for runs on GPU hosts, where a skip would hide
//! a broken setup).
//!
//! | variable | meaning |
//! |---|---|
//! | `FERROCX_REQUIRE_GPU` | `1`: fail instead of skipping when CUDA or NVRTC is missing (test-only). |
//! | `FERROCX_GPU_TEST_DEVICE` | device ordinal to test (default 0; test-only). |
//!
//! Build here, run on the GPU host:
//! ```text
//! cargo test --release -p ferrocx --test gpu_kernels --no-run   # prints the binary's path
//! FERROCX_REQUIRE_GPU=1 target/release/deps/gpu_kernels-<hash> --test-threads=1 --nocapture
//! ```
//! The GPU tests serialize themselves (one lock), so `--test-threads=1` only
//! keeps the output in order.

use ferrocx::device::kernels::Error;
use ferrocx::device::kernels::{Image, Kernels, BLOCK};
use ferrocx::device::testdata::{compare, gen, Rng};
use ferrocx::{DataType, RedOp};
use ferrocx_sdk::cuda::{self, sys, Context, Stream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Serializes the GPU tests (memory and timings).
static GPU: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|e| e.into_inner())
}

fn skip(why: &str) {
    if std::env::var("FERROCX_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("FERROCX_REQUIRE_GPU=1 but: {why}");
    }
    cuda::skip_notice(why);
}

fn device() -> i32 {
    std::env::var("FERROCX_GPU_TEST_DEVICE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The context (bound on this thread), a stream and the kernels, or `None`
/// (after printing why) when this machine cannot run them.
fn setup() -> Option<(Context, Stream, Kernels)> {
    if let Err(e) = cuda::available() {
        skip(&format!("no CUDA: {e}"));
        return None;
    }
    let ctx = Context::primary(device()).expect("primary context");
    ctx.bind().expect("bind");
    let k = match Kernels::new(&ctx) {
        Ok(k) => k,
        Err(e) => {
            skip(&format!("no device kernels: {e}"));
            return None;
        }
    };
    let s = Stream::new().expect("stream");
    Some((ctx, s, k))
}

fn ck(r: sys::CUresult, what: &str) {
    cuda::check(r, what).unwrap_or_else(|e| panic!("{e}"));
}

/// A device allocation, freed on drop.
struct Dev {
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl Dev {
    fn new(len: usize) -> Dev {
        let mut ptr = 0;
        // SAFETY: a bound context; valid out pointer.
        ck(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(16)) },
            "cuMemAlloc",
        );
        Dev { ptr, len }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

fn sync(s: &Stream) {
    // SAFETY: a live stream.
    ck(
        unsafe { sys::cuStreamSynchronize(s.raw()) },
        "cuStreamSynchronize",
    );
}

fn upload(s: &Stream, dst: sys::CUdeviceptr, src: &[u8]) {
    if src.is_empty() {
        return;
    }
    // SAFETY: `dst` holds at least `src.len()` bytes (callers size it); the
    // stream is synchronized before `src` can go away.
    ck(
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), s.raw()) },
        "cuMemcpyHtoDAsync",
    );
    sync(s);
}

fn download(s: &Stream, src: sys::CUdeviceptr, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    if len == 0 {
        return v;
    }
    // SAFETY: `src` holds `len` bytes; synchronized before `v` is read.
    ck(
        unsafe { sys::cuMemcpyDtoHAsync_v2(v.as_mut_ptr().cast(), src, len, s.raw()) },
        "cuMemcpyDtoHAsync",
    );
    sync(s);
    v
}

fn fill(s: &Stream, dst: &Dev, byte: u8) {
    // SAFETY: `dst.len` bytes of a live allocation.
    ck(
        unsafe { sys::cuMemsetD8Async(dst.ptr, byte, dst.len, s.raw()) },
        "cuMemsetD8Async",
    );
    sync(s);
}

/// Outcomes of the runs of one type and operator.
#[derive(Default)]
struct Tally {
    runs: usize,
    nan_diff: usize,
    fails: Vec<String>,
}

impl Tally {
    fn check(
        &mut self,
        dtype: DataType,
        op: RedOp,
        n: usize,
        label: &str,
        want: &[u8],
        got: &[u8],
    ) {
        self.runs += 1;
        let c = compare(dtype, op, want, got);
        self.nan_diff += c.nan_diff;
        if c.bad > 0 {
            self.fails.push(format!(
                "n={n} {label}: {} of {n} differ:{}",
                c.bad, c.first
            ));
        }
    }

    fn fail(&mut self, n: usize, what: &str) {
        self.fails.push(format!("n={n} {what}"));
    }
}

/// CPU `a op b` over `n` elements.
fn cpu_reduce(dtype: DataType, op: RedOp, a: &[u8], b: &[u8], n: usize) -> Vec<u8> {
    let bytes = n * dtype.size();
    // Copies: aligned for the type (Vec<u64> backing), as the CPU kernels need.
    let words = bytes.div_ceil(8).max(1);
    let (mut x, mut y, mut d) = (vec![0u64; words], vec![0u64; words], vec![0u64; words]);
    // SAFETY: each Vec<u64> holds at least `bytes` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(a.as_ptr(), x.as_mut_ptr().cast::<u8>(), bytes);
        std::ptr::copy_nonoverlapping(b.as_ptr(), y.as_mut_ptr().cast::<u8>(), bytes);
        ferrocx::reduce::reduce(
            dtype,
            op,
            d.as_mut_ptr().cast(),
            x.as_ptr().cast(),
            y.as_ptr().cast(),
            n,
        );
        std::slice::from_raw_parts(d.as_ptr().cast::<u8>(), bytes).to_vec()
    }
}

/// CPU finish (avg's division) of `v`.
fn cpu_finish(dtype: DataType, op: RedOp, v: &[u8], nranks: usize) -> Vec<u8> {
    let n = v.len() / dtype.size();
    let mut d = vec![0u64; v.len().div_ceil(8).max(1)];
    // SAFETY: `d` holds at least `v.len()` bytes, aligned for every type.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr(), d.as_mut_ptr().cast::<u8>(), v.len());
        ferrocx::reduce::finish(dtype, op, d.as_mut_ptr().cast(), n, nranks);
        std::slice::from_raw_parts(d.as_ptr().cast::<u8>(), v.len()).to_vec()
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// Counts tried for every type and operator.
const COUNTS: [usize; 5] = [0, 1, 7, 1_000_003, 1 << 24];

/// Every type × operator × count × pointer arrangement, against the CPU.
/// Arrangements: out of place; dst == a; dst == b; dst == a == b; all three
/// offset by one element (same misalignment: scalar head, vector body); a
/// offset by one element only (different alignments: scalar path). Counts of
/// 2^24 run the first two only. Out-of-place runs also check that nothing
/// outside `dst[..count]` is written. Avg also runs the finish step (by 3, 7
/// and 1000 ranks). One line per type and operator, then an assertion.
#[test]
fn reduce_matches_cpu_for_every_type_and_op() {
    let _g = lock();
    let Some((_ctx, s, k)) = setup() else { return };
    println!("{k:?}; counts {COUNTS:?}");
    let mut failures = Vec::new();
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let t0 = Instant::now();
    for dtype in DataType::ALL {
        let size = dtype.size();
        let max_n = *COUNTS.iter().max().unwrap();
        let cap = (max_n + 2) * size + 16;
        let (da, db, dd) = (Dev::new(cap), Dev::new(cap), Dev::new(cap));
        // Inputs per count, shared by the operators.
        let inputs: Vec<(Vec<u8>, Vec<u8>)> = COUNTS
            .iter()
            .map(|&n| (gen(dtype, n + 1, &mut rng), gen(dtype, n + 1, &mut rng)))
            .collect();
        for op in RedOp::ALL {
            let t = Instant::now();
            let mut tally = Tally::default();
            for (ci, &n) in COUNTS.iter().enumerate() {
                let (a, b) = &inputs[ci];
                let bytes = n * size;
                let want = cpu_reduce(dtype, op, a, b, n);
                let run = |dst: sys::CUdeviceptr, x: sys::CUdeviceptr, y: sys::CUdeviceptr| {
                    // SAFETY: device buffers of `cap` bytes; offsets and counts
                    // stay inside; the stream is synchronized after.
                    unsafe { k.reduce(dtype, op, dst, x, y, n, s.raw()) }
                        .unwrap_or_else(|e| panic!("{dtype} {op} n={n}: {e}"));
                    sync(&s);
                };
                // Whether dst's bytes before `off` and up to 4 KiB after its
                // end still hold the 0xa5 fill.
                let sentinel_ok = |off: usize| -> bool {
                    let all = download(&s, dd.ptr, (off + bytes + 4096).min(dd.len));
                    all[..off].iter().all(|&x| x == 0xa5)
                        && all[off + bytes..].iter().all(|&x| x == 0xa5)
                };
                upload(&s, da.ptr, a);
                upload(&s, db.ptr, b);
                // Out of place, with sentinels around dst.
                fill(&s, &dd, 0xa5);
                run(dd.ptr, da.ptr, db.ptr);
                let got = download(&s, dd.ptr, bytes);
                tally.check(dtype, op, n, "out-of-place", &want, &got);
                if !sentinel_ok(0) {
                    tally.fail(n, "out-of-place: wrote outside dst[..n]");
                }
                if op == RedOp::Avg {
                    for nranks in [3usize, 7, 1000] {
                        upload(&s, dd.ptr, &want);
                        // SAFETY: as `run`.
                        unsafe { k.finish(dtype, op, dd.ptr, n, nranks, s.raw()) }
                            .unwrap_or_else(|e| panic!("{dtype} finish n={n}: {e}"));
                        let got = download(&s, dd.ptr, bytes);
                        let want_fin = cpu_finish(dtype, op, &want, nranks);
                        tally.check(dtype, op, n, &format!("finish /{nranks}"), &want_fin, &got);
                    }
                }
                // dst == a.
                run(da.ptr, da.ptr, db.ptr);
                tally.check(dtype, op, n, "dst==a", &want, &download(&s, da.ptr, bytes));
                upload(&s, da.ptr, a);
                if n == 1 << 24 {
                    continue;
                }
                // dst == b.
                run(db.ptr, da.ptr, db.ptr);
                tally.check(dtype, op, n, "dst==b", &want, &download(&s, db.ptr, bytes));
                upload(&s, db.ptr, b);
                // dst == a == b.
                run(da.ptr, da.ptr, da.ptr);
                let want_self = cpu_reduce(dtype, op, a, a, n);
                tally.check(
                    dtype,
                    op,
                    n,
                    "dst==a==b",
                    &want_self,
                    &download(&s, da.ptr, bytes),
                );
                upload(&s, da.ptr, a);
                // All offset by one element.
                let o = size as u64;
                let want_off = cpu_reduce(dtype, op, &a[size..], &b[size..], n);
                fill(&s, &dd, 0xa5);
                run(dd.ptr + o, da.ptr + o, db.ptr + o);
                let got = download(&s, dd.ptr + o, bytes);
                tally.check(dtype, op, n, "offset +1", &want_off, &got);
                if !sentinel_ok(size) {
                    tally.fail(n, "offset +1: wrote outside dst[..n]");
                }
                if op == RedOp::Avg {
                    // SAFETY: as `run`.
                    unsafe { k.finish(dtype, op, dd.ptr + o, n, 7, s.raw()) }.unwrap();
                    let want_fin = cpu_finish(dtype, op, &want_off, 7);
                    let got = download(&s, dd.ptr + o, bytes);
                    tally.check(dtype, op, n, "offset +1 finish /7", &want_fin, &got);
                }
                // Different alignments (a offset, b and dst not): scalar path.
                let want_mix = cpu_reduce(dtype, op, &a[size..], b, n);
                fill(&s, &dd, 0xa5);
                run(dd.ptr, da.ptr + o, db.ptr);
                let got = download(&s, dd.ptr, bytes);
                tally.check(dtype, op, n, "mixed alignment", &want_mix, &got);
                if !sentinel_ok(0) {
                    tally.fail(n, "mixed alignment: wrote outside dst[..n]");
                }
            }
            let Tally {
                runs,
                nan_diff,
                fails,
            } = tally;
            let info = k.reduce_info(dtype, op).unwrap();
            let status = if fails.is_empty() { "ok  " } else { "FAIL" };
            println!(
                "{status} {:>8} {:<4} {runs:>3} runs, arithmetic NaNs with other bits {nan_diff:>7}, {} regs {} local {} blocks/SM {}, {:.1}s",
                dtype.name(),
                op.name(),
                info.image,
                info.registers,
                info.local_bytes,
                info.blocks_per_sm,
                t.elapsed().as_secs_f64()
            );
            for f in &fails {
                println!("     {} {}: {f}", dtype.name(), op.name());
            }
            failures.extend(fails.into_iter().map(|f| format!("{dtype} {op} {f}")));
        }
    }
    println!(
        "all types × ops: {} failures, {:.1}s",
        failures.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Argument checks, no-ops, the PTX image, sharing between `Kernels`, and
/// several threads on their own streams.
#[test]
fn api_edges_ptx_and_threads() {
    let _g = lock();
    let Some((ctx, s, k)) = setup() else { return };
    let n = 1000;
    let buf = Dev::new(n * 8 + 16);
    fill(&s, &buf, 0x11);
    // count 0: nothing, whatever the pointers.
    // SAFETY: count 0 touches no memory.
    unsafe {
        k.reduce(DataType::F32, RedOp::Sum, 0, 0, 0, 0, s.raw())
            .unwrap();
        k.finish(DataType::F32, RedOp::Avg, 0, 0, 3, s.raw())
            .unwrap();
    }
    // Null and misaligned pointers: InvalidArgument, nothing launched.
    // SAFETY: rejected before any launch.
    let e = unsafe { k.reduce(DataType::F32, RedOp::Sum, 0, buf.ptr, buf.ptr, 4, s.raw()) };
    assert!(matches!(e, Err(Error::InvalidArgument(_))), "{e:?}");
    // SAFETY: as above.
    let e = unsafe {
        k.reduce(
            DataType::F32,
            RedOp::Sum,
            buf.ptr + 2,
            buf.ptr,
            buf.ptr,
            4,
            s.raw(),
        )
    };
    assert!(
        matches!(&e, Err(Error::InvalidArgument(m)) if m.contains("aligned")),
        "{e:?}"
    );
    // Finish is a no-op for other operators and for one rank.
    // SAFETY: `n` f32 of `buf`.
    unsafe {
        k.finish(DataType::F32, RedOp::Sum, buf.ptr, n, 4, s.raw())
            .unwrap();
        k.finish(DataType::F32, RedOp::Avg, buf.ptr, n, 1, s.raw())
            .unwrap();
        k.finish(DataType::F32, RedOp::Avg, buf.ptr, n, 0, s.raw())
            .unwrap();
    }
    sync(&s);
    assert!(download(&s, buf.ptr, buf.len).iter().all(|&x| x == 0x11));
    println!("ok   count 0, null, misaligned, finish no-ops");

    // The PTX image (driver JIT) gives the same results as the default one
    // (unless this driver is older than NVRTC and rejects its PTX: said, and
    // skipped; the default image is a CUBIN, which has no such limit).
    let kp = Kernels::with_image(&ctx, Image::Ptx).unwrap();
    let mut rng = Rng(7);
    let n = 1_000_003;
    match kp.prepare(DataType::F32, RedOp::Sum) {
        Err(e) if e.to_string().contains("UNSUPPORTED_PTX_VERSION") => {
            println!("note: PTX image not tested: the driver rejects this NVRTC's PTX: {e}");
        }
        r => r.unwrap(),
    }
    for dtype in DataType::ALL {
        if kp.prepare(DataType::F32, RedOp::Sum).is_err() {
            break;
        }
        let size = dtype.size();
        let (a, b) = (gen(dtype, n, &mut rng), gen(dtype, n, &mut rng));
        let (da, db, dd) = (Dev::new(n * size), Dev::new(n * size), Dev::new(n * size));
        upload(&s, da.ptr, &a);
        upload(&s, db.ptr, &b);
        for op in [RedOp::Prod, RedOp::Avg] {
            // SAFETY: `n` elements each.
            unsafe {
                kp.reduce(dtype, op, dd.ptr, da.ptr, db.ptr, n, s.raw())
                    .unwrap();
                kp.finish(dtype, op, dd.ptr, n, 5, s.raw()).unwrap();
            }
            let want = cpu_finish(dtype, op, &cpu_reduce(dtype, op, &a, &b, n), 5);
            let c = compare(dtype, op, &want, &download(&s, dd.ptr, n * size));
            assert_eq!(c.bad, 0, "PTX {dtype} {op}:{}", c.first);
        }
        let info = kp.reduce_info(dtype, RedOp::Prod).unwrap();
        assert!(info.image.starts_with("PTX"), "{info:?}");
        println!("ok   PTX image {:>8} prod, avg: {info:?}", dtype.name());
    }
    drop(kp);

    // Kernels of one context share their modules; dropping all unloads them
    // and new ones load again.
    let k2 = Kernels::new(&ctx).unwrap();
    assert_eq!(
        k.reduce_info(DataType::F32, RedOp::Sum).unwrap(),
        k2.reduce_info(DataType::F32, RedOp::Sum).unwrap()
    );
    drop(k2);
    drop(k);
    let k = Arc::new(Kernels::new(&ctx).unwrap());
    k.prepare(DataType::F32, RedOp::Avg).unwrap();
    println!("ok   shared modules, reload after drop");

    // Four threads, each with its own stream and buffers, one Kernels.
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let k = Arc::clone(&k);
            let dev = ctx.device();
            std::thread::spawn(move || {
                let ctx = Context::primary(dev).unwrap();
                ctx.bind().unwrap();
                let s = Stream::new().unwrap();
                let n = (1 << 20) + t as usize;
                let a: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 + t as f32).collect();
                let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
                let as_bytes =
                    |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
                let (da, db) = (Dev::new(n * 4), Dev::new(n * 4));
                upload(&s, da.ptr, &as_bytes(&a));
                upload(&s, db.ptr, &as_bytes(&b));
                for _ in 0..10 {
                    // SAFETY: `n` f32 each; the stream orders the iterations.
                    unsafe {
                        k.reduce(
                            DataType::F32,
                            RedOp::Sum,
                            da.ptr,
                            da.ptr,
                            db.ptr,
                            n,
                            s.raw(),
                        )
                    }
                    .unwrap();
                }
                let got = download(&s, da.ptr, n * 4);
                for i in 0..n {
                    let g = f32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
                    assert_eq!(g, a[i] + 10.0 * b[i], "thread {t} [{i}]");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    println!("ok   4 threads × 10 in-place f32 sums on their own streams");
}

/// Indices past 2^32 elements (int8 sum, count 2^32 + 21, offset by 3
/// bytes: scalar head, vector body, scalar tail), when the device has 16 GiB
/// free; checked at both ends and around 2^32, plus the bytes past the end.
#[test]
fn beyond_four_billion_elements() {
    let _g = lock();
    let Some((_ctx, s, k)) = setup() else { return };
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: bound context; valid out pointers.
    ck(
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        "cuMemGetInfo",
    );
    let n = (1usize << 32) + 21;
    let len = n + 64;
    if free < 3 * len + (1 << 30) {
        println!("skipping 2^32 elements: {} GiB free", free >> 30);
        return;
    }
    let (da, db, dd) = (Dev::new(len), Dev::new(len), Dev::new(len));
    fill(&s, &da, 100);
    fill(&s, &db, 27);
    fill(&s, &dd, 0xa5);
    let t = Instant::now();
    // SAFETY: `n` bytes from offset 3 fit in `len`.
    unsafe {
        k.reduce(
            DataType::I8,
            RedOp::Sum,
            dd.ptr + 3,
            da.ptr + 3,
            db.ptr + 3,
            n,
            s.raw(),
        )
    }
    .unwrap();
    sync(&s);
    let secs = t.elapsed().as_secs_f64();
    // Probes read the result back with the copy API, across and past offset 2^32
    // too, through pinned memory, one synchronous copy each, naming what failed.
    // (Run 14's "copies past 2^32 fail" was a probe reaching past the
    // allocation's end: the allocation ends 85 bytes after 2^32.)
    let pin = cuda::PinnedHost::new(1 << 20).expect("pinned probe buffer");
    let probe = |at: usize, len: usize| {
        assert!(
            len <= pin.len() && at + len <= dd.len,
            "probe inside the allocation"
        );
        // SAFETY: `at + len` lies inside `dd` and `len` inside `pin` (asserted);
        // `pin` is not used concurrently.
        let r = unsafe { sys::cuMemcpyDtoH_v2(pin.host().cast(), dd.ptr + at as u64, len) };
        cuda::check(r, "cuMemcpyDtoH")
            .unwrap_or_else(|e| panic!("probe of {len} bytes at offset {at:#x}: {e}"));
        // SAFETY: `len` bytes just written by the synchronous copy.
        unsafe { std::slice::from_raw_parts(pin.host(), len) }.to_vec()
    };
    let end = 3 + n;
    assert!(probe(0, 3).iter().all(|&x| x == 0xa5), "before the start");
    assert!(probe(3, 1 << 20).iter().all(|&x| x == 127), "start");
    let across = (1usize << 32) - (1 << 19);
    assert!(
        probe(across, end - across).iter().all(|&x| x == 127),
        "across 2^32 to the end"
    );
    assert!(
        probe(end, len - end).iter().all(|&x| x == 0xa5),
        "past the end"
    );
    println!(
        "ok   int8 sum of 2^32+21 elements: {:.1} ms, {:.0} GB/s of traffic",
        secs * 1e3,
        3.0 * n as f64 / secs / 1e9
    );
}

/// Throughput (printed, not asserted): f32 sum on 256 MiB arrays, out of
/// place and in place, other types, a device-to-device copy for scale, and
/// the time of a small reduction (launch cost).
#[test]
fn throughput() {
    let _g = lock();
    let Some((_ctx, s, k)) = setup() else { return };
    let bytes = 256usize << 20;
    let (da, db, dd) = (Dev::new(bytes), Dev::new(bytes), Dev::new(bytes));
    fill(&s, &da, 0x3f);
    fill(&s, &db, 0x3f);
    let mk = || {
        let mut e = std::ptr::null_mut();
        // SAFETY: bound context; default flags (timing on).
        ck(unsafe { sys::cuEventCreate(&mut e, 0) }, "cuEventCreate");
        e
    };
    let (e0, e1) = (mk(), mk());
    let iters = 20;
    // Seconds per call of `f`, after 3 warm-up calls.
    let time = |f: &dyn Fn()| -> f64 {
        for _ in 0..3 {
            f();
        }
        sync(&s);
        // SAFETY: live events and stream.
        unsafe {
            ck(sys::cuEventRecord(e0, s.raw()), "cuEventRecord");
            for _ in 0..iters {
                f();
            }
            ck(sys::cuEventRecord(e1, s.raw()), "cuEventRecord");
            ck(sys::cuEventSynchronize(e1), "cuEventSynchronize");
            let mut ms = 0f32;
            ck(
                sys::cuEventElapsedTime(&mut ms, e0, e1),
                "cuEventElapsedTime",
            );
            ms as f64 / 1e3 / iters as f64
        }
    };
    println!(
        "{k:?}, blocks of {BLOCK}; GB/s = bytes of the three arrays (or copy read + write) / time"
    );
    let copy = time(&|| {
        // SAFETY: two 256 MiB buffers.
        ck(
            unsafe { sys::cuMemcpyDtoDAsync_v2(dd.ptr, da.ptr, bytes, s.raw()) },
            "cuMemcpyDtoDAsync",
        )
    });
    println!(
        "     cuMemcpyDtoD 256 MiB       {:8.1} us  {:7.1} GB/s",
        copy * 1e6,
        2.0 * bytes as f64 / copy / 1e9
    );
    let cases: [(DataType, RedOp, bool); 9] = [
        (DataType::F32, RedOp::Sum, false),
        (DataType::F32, RedOp::Sum, true),
        (DataType::Bf16, RedOp::Sum, false),
        (DataType::F16, RedOp::Sum, false),
        (DataType::F64, RedOp::Sum, false),
        (DataType::I8, RedOp::Sum, false),
        (DataType::I32, RedOp::Max, false),
        (DataType::F16, RedOp::Prod, true),
        (DataType::I64, RedOp::Prod, false),
    ];
    for (dtype, op, in_place) in cases {
        let n = bytes / dtype.size();
        let dst = if in_place { da.ptr } else { dd.ptr };
        let t = time(&|| {
            // SAFETY: 256 MiB buffers; the stream orders the calls.
            unsafe { k.reduce(dtype, op, dst, da.ptr, db.ptr, n, s.raw()) }.unwrap()
        });
        println!(
            "     {:>8} {:<4} 256 MiB {}  {:8.1} us  {:7.1} GB/s{}",
            dtype.name(),
            op.name(),
            if in_place { "a+=b" } else { "d=ab" },
            t * 1e6,
            3.0 * bytes as f64 / t / 1e9,
            if dtype == DataType::F32 && op == RedOp::Sum && !in_place {
                "   <- f32 sum"
            } else {
                ""
            }
        );
    }
    for dtype in [DataType::F32, DataType::I64] {
        let n = bytes / dtype.size();
        let t = time(&|| {
            // SAFETY: as above.
            unsafe { k.finish(dtype, RedOp::Avg, dd.ptr, n, 3, s.raw()) }.unwrap()
        });
        println!(
            "     {:>8} avg finish 256 MiB  {:8.1} us  {:7.1} GB/s (read + write)",
            dtype.name(),
            t * 1e6,
            2.0 * bytes as f64 / t / 1e9
        );
    }
    let t = time(&|| {
        // SAFETY: 256 elements of the buffers.
        unsafe {
            k.reduce(
                DataType::F32,
                RedOp::Sum,
                dd.ptr,
                da.ptr,
                db.ptr,
                256,
                s.raw(),
            )
        }
        .unwrap()
    });
    println!(
        "     f32 sum of 1 KiB (launch)     {:8.2} us per call",
        t * 1e6
    );
    // SAFETY: created above, destroyed once.
    unsafe {
        sys::cuEventDestroy_v2(e0);
        sys::cuEventDestroy_v2(e1);
    }
}
