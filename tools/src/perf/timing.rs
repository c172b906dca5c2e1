//! How every benchmark times its calls and agrees on one number across ranks.

use super::args::PerfArgs;
use ferrocx::{Communicator, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the first timed row on device buffers is warmed up at least: idle
/// GPUs take their first milliseconds of work slower (2 × H200: sendrecv 8 B
/// 38 µs per call in a run's first row, 9–13 once warm; 2026-11-27-session11).
pub const DEVICE_WARMUP: Duration = Duration::from_millis(200);

/// Whether this process has warmed its GPU up ([`DEVICE_WARMUP`]).
static WARM: AtomicBool = AtomicBool::new(false);

/// Warm up, then time `iters` calls after a barrier; µs per call, max over ranks.
/// `sync` waits for queued device work (a no-op for host buffers): calls on device
/// buffers are queued on a stream, timed from the first queued call until the stream
/// has run the last one, as nccl-tests does. The first row on device buffers
/// repeats its warm-up until [`DEVICE_WARMUP`] passed on the slowest rank (every
/// rank makes as many calls: they agree after each round), then makes its
/// `-w` calls once more.
pub fn time_calls(
    comm: &Communicator,
    a: &PerfArgs,
    mut call: impl FnMut() -> Result<()>,
    sync: impl Fn() -> Result<()>,
) -> Result<f64> {
    let start = Instant::now();
    for _ in 0..a.warmup {
        call()?;
    }
    sync()?;
    // Rounds that double, so the GPU is kept busy (an agreement per few calls
    // left it idle most of the warm-up: run 4 of 2026-11-27-session12 still
    // had a cold first row) and a slow first row stops within about twice
    // the warm-up.
    let mut batch = a.warmup.max(1);
    let rounds = a.cuda && !WARM.load(Ordering::Relaxed);
    while a.cuda && !WARM.load(Ordering::Relaxed) {
        if max_over_ranks(comm, start.elapsed().as_secs_f64())? >= DEVICE_WARMUP.as_secs_f64() {
            WARM.store(true, Ordering::Relaxed);
            break;
        }
        for _ in 0..batch {
            call()?;
        }
        sync()?;
        batch = batch.saturating_mul(2);
    }
    if rounds {
        // The rounds left thousands of calls queued and then drained, which
        // the next few pay for (ce retires them over its next launches):
        // the row's own warm-up again, so its timed calls start where every
        // later row's do.
        for _ in 0..a.warmup {
            call()?;
        }
        sync()?;
    }
    let detail = show_queue_time();
    // The longest single call and its index (with FXPERF_QUEUE_TIME=1): a
    // stall of one call hides in the mean.
    let mut longest = (0.0f64, 0usize);
    comm.barrier()?;
    let t0 = Instant::now();
    for i in 0..a.iters {
        let c = detail.then(Instant::now);
        call()?;
        if let Some(c) = c {
            let d = c.elapsed().as_secs_f64() * 1e6;
            if d > longest.0 {
                longest = (d, i);
            }
        }
    }
    let queued = t0.elapsed();
    sync()?;
    let per_call = |d: Duration| d.as_secs_f64() * 1e6 / a.iters as f64;
    // In one exchange, whatever the ranks' environments say (a rank that
    // gathered once more than another would pair later rows wrongly).
    let [us, q, l] = max_over_ranks_n(comm, [per_call(t0.elapsed()), per_call(queued), longest.0])?;
    // Where a device call's time goes: queuing it on the host, or the stream
    // running it (calls queue ahead of the stream, as nccl-tests' do).
    if detail && comm.rank() == 0 {
        eprintln!(
            "fxperf: {us:.2} µs per call, {q:.2} of it queuing on the host (slowest rank); longest call {l:.1} µs (rank 0's: {:.1}, call {})",
            longest.0, longest.1
        );
    }
    Ok(us)
}

/// `FXPERF_QUEUE_TIME=1`: print, per timed row, how long the host took to queue
/// the calls beside the time per call.
fn show_queue_time() -> bool {
    std::env::var("FXPERF_QUEUE_TIME").is_ok_and(|v| v == "1")
}

/// The largest of every rank's `v`.
pub fn max_over_ranks(comm: &Communicator, v: f64) -> Result<f64> {
    max_over_ranks_n(comm, [v]).map(|[m]| m)
}

/// The largest of every rank's `v[i]`, for each `i`, in one exchange.
pub fn max_over_ranks_n<const N: usize>(comm: &Communicator, v: [f64; N]) -> Result<[f64; N]> {
    let mine: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = comm.all_gather_oob(&mine)?;
    let mut out = [0.0; N];
    for b in &all {
        for (i, m) in out.iter_mut().enumerate() {
            let x = b
                .get(8 * i..8 * i + 8)
                .and_then(|s| s.try_into().ok())
                .map_or(0.0, f64::from_le_bytes);
            *m = f64::max(*m, x);
        }
    }
    Ok(out)
}

/// The sum of every rank's `v`.
pub fn sum_over_ranks(comm: &Communicator, v: u64) -> Result<u64> {
    let all = comm.all_gather_oob(&v.to_le_bytes())?;
    Ok(all
        .iter()
        .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])))
        .sum())
}
