//! Device networking through the ibgda plugin's proxy handler: kernels of
//! every rank post puts with signals, fetch-adds and quiets through
//! `ferrocx_ibgda.h` (compiled here with NVRTC), the plugin's host thread
//! carries them, and the host checks every byte, signal and fetched value.
//!
//! * `devnet-ring ROUNDS COUNT CHUNK [--faults]`: each rank puts ROUNDS × COUNT
//!   chunks to the next rank, each with a signal add (round r posts with the
//!   thread, warp and block forms in turn: r mod 3); then waits until its own
//!   signal reached ROUNDS × COUNT (exactly once each: more would show a double
//!   application) and checks the received bytes. Ranks other than 0 then make
//!   16 fetch-adds each on rank 0's signal word 1: the fetched values of all
//!   ranks together must be 0..16 × (n - 1), each once. With `--faults` (the
//!   test sets `FERROCX_IBGDA_FAULT` to drop one primary completion per
//!   round), each round waits until the plugin reports the failover and the
//!   switch back to the primary.
//! * `devnet-killed`: three ranks; rank 2 is killed after setup. Rank 1's puts
//!   to it end in an error completion naming it (and `status` names it);
//!   rank 0's wait for rank 2's signals returns at its timeout. Nobody hangs.

use super::device::{sync, DevMem};
use super::e2s;
use ferrocx::Communicator;
use ferrocx_sdk::cuda::{self, sys, Stream};
use std::ffi::c_void;
use std::time::{Duration, Instant};

pub(super) const HEADER: &str = include_str!("../../../plugins/ibgda/include/ferrocx_ibgda.h");

const KERNELS: &str = r#"
/* mode 0: thread 0 posts alone; 1: warp 0 with the warp forms; 2: the whole
   block with the block forms. Thread 0 owns the completions. */
extern "C" __global__ void fx_devnet_ring(const struct fxg_view* v, unsigned win, unsigned next,
        unsigned long long first, unsigned count, unsigned chunk, unsigned long long half,
        unsigned long long timeout, unsigned mode, unsigned long long* out) {
    if (blockIdx.x != 0 || (mode == 0 && threadIdx.x != 0) || (mode == 1 && threadIdx.x >= 32)) return;
    const struct fxg_queue q = fxg_queue_to(v, next);
    fxg_u8* cq = fxg_cq_to(v, next);
    int worst = 0;
    for (unsigned k = 0; k < count; ++k) {
        const fxg_u64 i = first + k;
        const fxg_u64 dst = i * chunk, src = half + i * chunk;
        const fxg_u64 id =
            mode == 0 ? fxg_put_signal(q, win, dst, src, chunk, 0, 1, FXG_SIGNAL_ADD, timeout)
          : mode == 1 ? fxg_put_signal_warp(q, win, dst, src, chunk, 0, 1, FXG_SIGNAL_ADD, timeout)
                      : fxg_put_signal_block(q, win, dst, src, chunk, 0, 1, FXG_SIGNAL_ADD, timeout);
        if (id == ~0ull) { if (threadIdx.x == 0) out[0] = FXG_STATUS_TIMEOUT; return; }
        /* Read completions now and then: each look is a bus round trip, and
           the proxy carries on while they wait (up to 16 rings' worth). */
        struct fxg_completion c;
        if (threadIdx.x == 0 && (k & 7) == 7)
            while (fxg_cq_poll(cq, &c)) if (c.status != FXG_STATUS_OK && worst == 0) worst = c.status;
    }
    const int s = mode == 0 ? fxg_quiet(q, cq, timeout)
                : mode == 1 ? fxg_quiet_warp(q, cq, timeout)
                            : fxg_quiet_block(q, cq, timeout);
    if (threadIdx.x == 0) out[0] = worst ? worst : s;
}

extern "C" __global__ void fx_devnet_wait(const struct fxg_view* v, unsigned long long value,
        unsigned long long timeout, unsigned long long* out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    out[1] = fxg_signal_wait_until(fxg_signals(v), FXG_CMP_GE, value, timeout);
    out[2] = *(volatile fxg_u64*)fxg_signals(v);
}

extern "C" __global__ void fx_devnet_fetch_add(const struct fxg_view* v, unsigned to, unsigned count,
        unsigned long long timeout, unsigned long long* out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const struct fxg_queue q = fxg_queue_to(v, to);
    fxg_u8* cq = fxg_cq_to(v, to);
    for (unsigned k = 0; k < count; ++k) {
        const fxg_u64 id = fxg_fetch_add(q, FXG_SIGNALS, 8, 1, timeout);
        if (id == ~0ull) { out[0] = FXG_STATUS_TIMEOUT; return; }
        struct fxg_completion c;
        int others = 0;
        const int s = fxg_wait_completion(cq, id, &c, &others, timeout);
        if (s != FXG_STATUS_OK || others != FXG_STATUS_OK) { out[0] = s ? s : others; return; }
        out[3 + k] = c.value;
    }
    out[0] = 0;
}
"#;

const PINGPONG: &str = r#"
/* Two ranks: the first puts `size` bytes with a signal add, the other waits
   for the signal and puts back; `iters` round trips timed on the GPU. */
extern "C" __global__ void fx_devnet_pingpong(const struct fxg_view* v, unsigned win, unsigned peer,
        unsigned first, unsigned size, unsigned long long base, unsigned iters,
        unsigned long long timeout, unsigned long long* out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const struct fxg_queue q = fxg_queue_to(v, peer);
    fxg_u8* cq = fxg_cq_to(v, peer);
    volatile fxg_u64* sig = fxg_signals(v);
    const fxg_u64 t0 = fxg_now();
    int worst = 0;
    for (unsigned i = 0; i < iters && worst == 0; ++i) {
        if (!first && fxg_signal_wait_until(sig, FXG_CMP_GE, base + i + 1, timeout)) worst = FXG_STATUS_TIMEOUT;
        if (worst == 0 && fxg_put_signal(q, win, 0, size, size, 0, 1, FXG_SIGNAL_ADD, timeout) == ~0ull)
            worst = FXG_STATUS_TIMEOUT;
        if (worst == 0 && first && fxg_signal_wait_until(sig, FXG_CMP_GE, base + i + 1, timeout))
            worst = FXG_STATUS_TIMEOUT;
        struct fxg_completion c;
        while (fxg_cq_poll(cq, &c)) if (c.status != FXG_STATUS_OK && worst == 0) worst = c.status;
    }
    const fxg_u64 t1 = fxg_now();
    if (worst == 0) worst = fxg_quiet(q, cq, timeout);
    out[0] = t1 - t0;
    out[1] = worst;
}
"#;

const FETCH_ADDS: usize = 16;
const TIMEOUT_NS: u64 = 10_000_000_000;

/// Byte `i` of what rank `from` sends.
fn byte(from: usize, i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (from * 29 + 7)) as u8
}

struct Kernels {
    ring: sys::CUfunction,
    wait: sys::CUfunction,
    fetch_add: sys::CUfunction,
}

fn kernels(device: i32) -> Result<Kernels, String> {
    let src = format!("{HEADER}\n{KERNELS}");
    let get = |name| ferrocx_sdk::kernels::load_source(device, &src, "devnet_test.cu", name);
    Ok(Kernels {
        ring: get("fx_devnet_ring")?,
        wait: get("fx_devnet_wait")?,
        fetch_add: get("fx_devnet_fetch_add")?,
    })
}

/// Queue `f` on `s`, `grid` blocks of `block` threads, with `params` (each a
/// pointer to a value of the kernel parameter's type: `kernel_params!`).
pub(super) fn start(
    f: sys::CUfunction,
    grid: u32,
    block: u32,
    s: &Stream,
    params: &mut [*mut c_void],
) -> Result<(), String> {
    // SAFETY: a function of the current context; the parameters point to live
    // values of the kernel's types; the memory it touches lives until the
    // caller synchronizes the stream.
    let r = unsafe { ferrocx_sdk::kernels::launch(f, grid, block, s.raw(), params) };
    cuda::check(r, "cuLaunchKernel").map_err(|e| e.to_string())
}

/// Run `f` as one block of 64 threads and wait for it.
fn launch(f: sys::CUfunction, s: &Stream, params: &mut [*mut c_void]) -> Result<(), String> {
    start(f, 1, 64, s, params)?;
    sync(s)
}

/// A device buffer of little-endian u64 words, read back.
pub(super) fn read_out(out: &DevMem) -> Result<Vec<u64>, String> {
    let mut b = vec![0u8; out.len];
    out.download(&mut b)?;
    Ok(b.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

/// See the module documentation.
pub fn ring(rounds: usize, count: usize, chunk: usize, faults: bool) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let dev = comm.device().ok_or("no GPU for this rank")?;
    let total = rounds * count;
    let half = total * chunk;
    let buf = DevMem::new(2 * half)?;
    let mut init = vec![0u8; half];
    init.extend((0..half).map(|i| byte(me, i)));
    buf.upload(&init)?;
    // SAFETY: `buf` stays allocated until after the window is deregistered below.
    let w = unsafe { comm.window_register_device(buf.ptr, 2 * half) }.map_err(e2s)?;
    let dn = comm.devnet_open().map_err(e2s)?;
    let win = comm.devnet_window_register(&dn, &w).map_err(e2s)?;
    let view = dn.device_view().map_err(e2s)?;
    println!("DESCRIBE {}", dn.describe());
    let k = kernels(dev)?;
    let out = DevMem::new(8 * (3 + FETCH_ADDS))?;
    out.upload(&vec![0u8; out.len])?;
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut round_us = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let r0 = Instant::now();
        let (first, cnt, ch, hf, to) = (
            (round * count) as u64,
            count as u32,
            chunk as u32,
            half as u64,
            TIMEOUT_NS,
        );
        // Thread, warp and block forms in turn.
        let (nx, mode, o) = (next as u32, (round % 3) as u32, out.ptr);
        launch(
            k.ring,
            &stream,
            &mut kernel_params!(view, win, nx, first, cnt, ch, hf, to, mode, o),
        )?;
        round_us.push(r0.elapsed().as_secs_f64() * 1e6);
        let status = read_out(&out)?[0];
        if status != 0 {
            return Err(format!(
                "rank {me} round {round}: the puts to rank {next} ended with status {status} ({:?})",
                dn.status()
            ));
        }
        if faults {
            // The round's dropped completion: failed over, then the primary back.
            let t = Instant::now();
            loop {
                let s = dn.stats().map_err(e2s)?;
                if s.paths_restored > round as u64 {
                    break;
                }
                if t.elapsed() > Duration::from_secs(10) {
                    return Err(format!(
                        "rank {me} round {round}: no switch back within 10 s: {s:?}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let put_secs = t.elapsed().as_secs_f64();
    let (value, to, o) = (total as u64, TIMEOUT_NS, out.ptr);
    launch(k.wait, &stream, &mut kernel_params!(view, value, to, o))?;
    let o = read_out(&out)?;
    if o[1] != 0 || o[2] != total as u64 {
        return Err(format!(
            "rank {me}: signal from rank {prev} is {} (wait result {}), expected exactly {total}",
            o[2], o[1]
        ));
    }
    let mut got = vec![0u8; half];
    buf.download(&mut got)?;
    if let Some(i) = (0..half).find(|&i| got[i] != byte(prev, i)) {
        return Err(format!(
            "rank {me}: byte {i} from rank {prev} is {:#x}, expected {:#x}",
            got[i],
            byte(prev, i)
        ));
    }
    // Fetch-adds on rank 0's signal word 1 from every other rank.
    comm.barrier().map_err(e2s)?;
    let mut mine = vec![u64::MAX; FETCH_ADDS];
    if me != 0 {
        let (zero, cnt, to, o) = (0u32, FETCH_ADDS as u32, TIMEOUT_NS, out.ptr);
        launch(
            k.fetch_add,
            &stream,
            &mut kernel_params!(view, zero, cnt, to, o),
        )?;
        let o = read_out(&out)?;
        if o[0] != 0 {
            return Err(format!(
                "rank {me}: fetch-add to rank 0 ended with status {}",
                o[0]
            ));
        }
        mine.copy_from_slice(&o[3..3 + FETCH_ADDS]);
    }
    let mut all = vec![0u64; FETCH_ADDS * n];
    comm.all_gather(&mine, &mut all).map_err(e2s)?;
    let mut fetched: Vec<u64> = all.into_iter().filter(|&v| v != u64::MAX).collect();
    fetched.sort_unstable();
    let expect: Vec<u64> = (0..(FETCH_ADDS * (n - 1)) as u64).collect();
    if fetched != expect {
        return Err(format!(
            "rank {me}: fetched values {fetched:?}, expected each of 0..{} once",
            expect.len()
        ));
    }
    let s = dn.stats().map_err(e2s)?;
    dn.status().map_err(e2s)?;
    if faults && (s.failovers < rounds as u64 || s.paths_down < rounds as u64) {
        return Err(format!(
            "rank {me}: expected {rounds} failovers and paths down: {s:?}"
        ));
    }
    dn.window_deregister(win).map_err(e2s)?;
    dn.close().map_err(e2s)?;
    comm.window_deregister(w).map_err(e2s)?;
    round_us.sort_by(f64::total_cmp);
    Ok(format!(
        "rank {me}: {total} puts of {chunk} B to rank {next} in {put_secs:.3} s (a round of {count} puts and a quiet: median {:.1} us, max {:.1} us), signal {total}, {} fetch-adds; requests {} completed {} failovers {} paths down {} restored {}",
        round_us[round_us.len() / 2],
        round_us[round_us.len() - 1],
        FETCH_ADDS * (n - 1),
        s.requests, s.completed, s.failovers, s.paths_down, s.paths_restored
    ))
}

/// `devnet-pingpong ITERS SIZE...` (two ranks): the one-way time of a put
/// with a signal, half a round trip timed on the GPU, per size.
pub fn pingpong(iters: usize, sizes: &[usize]) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    if n != 2 {
        return Err(format!("devnet-pingpong runs on 2 ranks, not {n}"));
    }
    let dev = comm.device().ok_or("no GPU for this rank")?;
    let most = sizes.iter().copied().max().unwrap_or(8).max(8);
    let buf = DevMem::new(2 * most)?;
    buf.upload(&vec![me as u8; 2 * most])?;
    // SAFETY: `buf` outlives the window (deregistered below).
    let w = unsafe { comm.window_register_device(buf.ptr, 2 * most) }.map_err(e2s)?;
    let dn = comm.devnet_open().map_err(e2s)?;
    let win = comm.devnet_window_register(&dn, &w).map_err(e2s)?;
    let view = dn.device_view().map_err(e2s)?;
    let src = format!("{HEADER}\n{PINGPONG}");
    let f = ferrocx_sdk::kernels::load_source(dev, &src, "pingpong.cu", "fx_devnet_pingpong")?;
    let out = DevMem::new(16)?;
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let mut base = 0u64;
    let mut rows = Vec::new();
    for &size in sizes {
        for (its, keep) in [(10usize, false), (iters, true)] {
            comm.barrier().map_err(e2s)?;
            let (peer, first, sz, b, it, to, o) = (
                1 - me as u32,
                (me == 0) as u32,
                size as u32,
                base,
                its as u32,
                TIMEOUT_NS,
                out.ptr,
            );
            launch(
                f,
                &stream,
                &mut kernel_params!(view, win, peer, first, sz, b, it, to, o),
            )?;
            base += its as u64;
            let o = read_out(&out)?;
            if o[1] != 0 {
                return Err(format!(
                    "rank {me}: ping-pong of {size} B ended with status {}",
                    o[1]
                ));
            }
            if keep {
                rows.push(format!(
                    "{size} B {:.2} us",
                    o[0] as f64 / 1e3 / its as f64 / 2.0
                ));
            }
        }
    }
    dn.window_deregister(win).map_err(e2s)?;
    dn.close().map_err(e2s)?;
    comm.window_deregister(w).map_err(e2s)?;
    Ok(format!(
        "rank {me}: put+signal one-way ({iters} round trips): {}",
        rows.join(", ")
    ))
}

/// See the module documentation.
pub fn killed() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let me = comm.rank();
    let n = comm.nranks();
    let dev = comm.device().ok_or("no GPU for this rank")?;
    let (count, chunk) = (8usize, 4096usize);
    let half = count * chunk;
    let buf = DevMem::new(2 * half)?;
    buf.upload(&vec![1u8; 2 * half])?;
    // SAFETY: `buf` outlives the window (the process ends with it).
    let w = unsafe { comm.window_register_device(buf.ptr, 2 * half) }.map_err(e2s)?;
    let dn = comm.devnet_open().map_err(e2s)?;
    let win = comm.devnet_window_register(&dn, &w).map_err(e2s)?;
    let view = dn.device_view().map_err(e2s)?;
    let k = kernels(dev)?;
    comm.barrier().map_err(e2s)?;
    if me == 2 {
        // SAFETY: signalling this very process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    std::thread::sleep(Duration::from_millis(300));
    let out = DevMem::new(8 * (3 + FETCH_ADDS))?;
    out.upload(&vec![0u8; out.len])?;
    let stream = Stream::new().map_err(|e| e.to_string())?;
    let next = ((me + 1) % n) as u32;
    let t = Instant::now();
    let (first, cnt, ch, hf, to, mode, o) = (
        0u64,
        count as u32,
        chunk as u32,
        half as u64,
        3_000_000_000u64,
        0u32,
        out.ptr,
    );
    launch(
        k.ring,
        &stream,
        &mut kernel_params!(view, win, next, first, cnt, ch, hf, to, mode, o),
    )?;
    let value = count as u64;
    launch(k.wait, &stream, &mut kernel_params!(view, value, to, o))?;
    let o = read_out(&out)?;
    let secs = t.elapsed().as_secs_f64();
    let status = dn.status();
    let msg = match me {
        1 if o[0] == 1 => match status {
            Err(e) if e.to_string().contains("peer 2") => {
                format!("UNREACHABLE in {secs:.2} s: {e}")
            }
            other => {
                return Err(format!(
                    "rank 1: expected a status naming peer 2, got {other:?}"
                ))
            }
        },
        1 => {
            return Err(format!(
            "rank 1: puts to the killed rank 2 ended with status {}, expected 1 (peer unreachable)",
            o[0]
        ))
        }
        0 if o[0] == 0 && o[1] == 1 => format!(
            "WAIT-TIMEOUT in {secs:.2} s: rank 2's signals never came ({} of {count})",
            o[2]
        ),
        _ => return Err(format!("rank {me}: unexpected results {:?}", &o[..3])),
    };
    dn.close().map_err(e2s)?;
    Ok(msg)
}
