//! `cuda-latency`: how long small copy-engine copies take from `cuMemcpyAsync` to
//! their event reading complete, alone and while another stream of the same
//! context waits on a host flag (a polling kernel, or `cuStreamWaitValue32`), as the
//! user's stream does during every stream-ordered operation. A diagnostic for
//! GPU hosts: it prints percentiles and checks nothing but the CUDA calls.

use super::device::DevMem;
use ferrocx_sdk::cuda::{self, sys, Context, Event, PinnedHost, Stream};
use std::time::Instant;

const SPIN: &str = r#"
extern "C" __global__ void fx_probe_spin(const volatile unsigned int* flag) {
    while (*flag == 0) { __nanosleep(256); }
}
"#;

fn ck(r: sys::CUresult, what: &str) -> Result<(), String> {
    cuda::check(r, what).map_err(|e| e.to_string())
}

/// Percentiles (µs) of `reps` runs of `f`.
fn stats(reps: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<String, String> {
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    let p = |q: f64| t[((t.len() - 1) as f64 * q) as usize];
    Ok(format!(
        "p50 {:8.1}  p90 {:8.1}  p99 {:8.1}  max {:8.1} µs",
        p(0.5),
        p(0.9),
        p(0.99),
        p(1.0)
    ))
}

pub fn run(reps: usize) -> Result<String, String> {
    cuda::available()?;
    let ctx = Context::primary(0).map_err(|e| e.to_string())?;
    ctx.bind().map_err(|e| e.to_string())?;
    let s = Stream::new().map_err(|e| e.to_string())?;
    let w = Stream::new().map_err(|e| e.to_string())?;
    let ev = Event::new().map_err(|e| e.to_string())?;
    let (a, b) = (DevMem::new(1 << 20)?, DevMem::new(1 << 20)?);
    let pin = PinnedHost::new(1 << 20).map_err(|e| e.to_string())?;
    let flag = PinnedHost::new(4096).map_err(|e| e.to_string())?;
    let spin = ferrocx::device::kernels::load_source(0, SPIN, "probe.cu", "fx_probe_spin")?;
    // One copy and its event, polled to completion.
    let copy = |dst: u64, src: u64, n: usize| -> Result<(), String> {
        ck(
            // SAFETY: both ranges lie in live allocations of at least `n` bytes.
            unsafe { sys::cuMemcpyAsync(dst, src, n, s.raw()) },
            "cuMemcpyAsync",
        )?;
        ev.record_on(&s).map_err(|e| e.to_string())?;
        while !ev.done().map_err(|e| e.to_string())? {
            std::hint::spin_loop();
        }
        Ok(())
    };
    // As the executor does per stage: a new event each time, destroyed after.
    let copy_new_event = |dst: u64, src: u64, n: usize| -> Result<(), String> {
        ck(
            // SAFETY: both ranges lie in live allocations of at least `n` bytes.
            unsafe { sys::cuMemcpyAsync(dst, src, n, s.raw()) },
            "cuMemcpyAsync",
        )?;
        let e = Event::new().map_err(|e| e.to_string())?;
        e.record_on(&s).map_err(|e| e.to_string())?;
        while !e.done().map_err(|e| e.to_string())? {
            std::hint::spin_loop();
        }
        Ok(())
    };
    let set_flag = |v: u32| {
        // SAFETY: the pinned page is live and 4-byte aligned.
        unsafe { std::ptr::write_volatile(flag.host() as *mut u32, v) };
    };
    // SAFETY: a live stream.
    let sync = |st: &Stream| ck(unsafe { sys::cuStreamSynchronize(st.raw()) }, "sync");
    // A buffer on GPU 1 (when there is one), written over NVLink from GPU 0's
    // context with peer access, as p2p's copies into the receiver's FIFO are.
    let peer = match cuda::available()? {
        n if n >= 2 => {
            let c1 = Context::primary(1).map_err(|e| e.to_string())?;
            c1.bind().map_err(|e| e.to_string())?;
            // Not a DevMem: those are carved from this thread's arena on GPU 0.
            let mut m = 0;
            // SAFETY: GPU 1's context is current; valid out pointer (leaked: a diagnostic).
            ck(unsafe { sys::cuMemAlloc_v2(&mut m, 1 << 20) }, "cuMemAlloc")?;
            ctx.bind().map_err(|e| e.to_string())?;
            // SAFETY: both contexts are live; enabling twice is reported, not undefined.
            let r = unsafe { sys::cuCtxEnablePeerAccess(c1.raw(), 0) };
            if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                ck(r, "cuCtxEnablePeerAccess")?;
            }
            Some((c1, m))
        }
        _ => None,
    };
    let mut modes = vec![
        ("DtoD", b.ptr, a.ptr),
        ("DtoH", pin.device(), a.ptr),
        ("HtoD", a.ptr, pin.device()),
    ];
    if let Some((_, m)) = &peer {
        modes.push(("DtoPeer", *m, a.ptr));
        modes.push(("PeerToD", a.ptr, *m));
    }
    // The polling kernel on stream `w`, until the flag is raised.
    let start_spin = || {
        let mut fp = flag.device();
        let mut args = [&mut fp as *mut u64 as *mut std::ffi::c_void];
        // SAFETY: a loaded kernel taking one pointer; `fp` lives for the call.
        ck(
            unsafe { ferrocx::device::kernels::launch(spin, 1, 1, w.raw(), &mut args) },
            "cuLaunchKernel",
        )
    };
    let mut out = String::new();
    for (what, n) in [("8 B", 8usize), ("64 KiB", 64 << 10), ("1 MiB", 1 << 20)] {
        for &(mode, dst, src) in &modes {
            let alone = stats(reps, || copy(dst, src, n))?;
            // A polling kernel on another stream, as the user's stream holds during an op.
            set_flag(0);
            start_spin()?;
            let kernel = stats(reps, || copy(dst, src, n))?;
            set_flag(1);
            sync(&w)?;
            // cuStreamWaitValue32 on another stream.
            set_flag(0);
            ck(
                // SAFETY: mapped pinned flag; live stream.
                unsafe { sys::cuStreamWaitValue32_v2(w.raw(), flag.device(), 1, 0) },
                "cuStreamWaitValue32",
            )?;
            let memop = stats(reps, || copy(dst, src, n))?;
            set_flag(1);
            sync(&w)?;
            // Another thread in cuStreamSynchronize on a stream held by the polling
            // kernel: what an application does while its operation is in flight.
            set_flag(0);
            start_spin()?;
            let synced = std::thread::scope(|sc| {
                let wraw = w.raw() as usize;
                let ctx = &ctx;
                let h = sc.spawn(move || {
                    ctx.bind().map_err(|e| e.to_string())?;
                    // SAFETY: a live stream (joined before it is destroyed).
                    ck(
                        unsafe { sys::cuStreamSynchronize(wraw as sys::CUstream) },
                        "cuStreamSynchronize",
                    )
                });
                std::thread::sleep(std::time::Duration::from_millis(5));
                let r = stats(reps, || copy(dst, src, n))
                    .and_then(|a| Ok((a, stats(reps, || copy_new_event(dst, src, n))?)));
                set_flag(1);
                let j = h.join().map_err(|_| "sync thread panicked".to_string())?;
                j.and(r)
            })?;
            out += &format!(
                "{what:>7} {mode}: alone {alone}\n{:>12} with a polling kernel {kernel}\n{:>12} with a memop wait    {memop}\n{:>12} with a thread in sync {}\n{:>12} and new events    {}\n",
                "", "", "", synced.0, "", synced.1
            );
        }
    }
    println!("{out}");
    Ok("cuda latency probe done".into())
}
