//! Long-running collective loops for fault tests: every iteration's data is
//! generated from (iteration, source, destination, index) and checked in full, so a
//! chunk lost, duplicated or misplaced during a failover shows up as a named mismatch.

use super::{e2s, hash, mix64, Case, Prepared};
use ferrocx::{CollKind, Communicator, DataType};
use std::io::Write;
use std::time::{Duration, Instant};

/// Write `iters` to `DIR/iter.RANK` (whole, then renamed, so a reader never sees a
/// partial number).
fn record(dir: Option<&std::path::Path>, me: usize, iters: u64) -> Result<(), String> {
    let Some(d) = dir else {
        return Ok(());
    };
    let tmp = d.join(format!("iter.{me}.tmp"));
    std::fs::write(&tmp, iters.to_string())
        .and_then(|_| std::fs::rename(&tmp, d.join(format!("iter.{me}"))))
        .map_err(|e| format!("FXTEST_SOAK_DIR: {e}"))
}

fn word(iter: u64, src: usize, dst: usize, i: usize) -> u64 {
    mix64(hash(&[iter, src as u64, dst as u64]) ^ i as u64)
}

/// Whether every rank runs another iteration: each decides on its own clock and
/// sees the stop file at its own moment, so they agree first (one wanting to stop
/// stops all; otherwise one rank could start an operation its peers never join).
fn go_on(comm: &Communicator, mine: bool) -> Result<bool, String> {
    let mut stop = [u8::from(!mine)];
    comm.all_reduce_in_place(&mut stop, ferrocx::RedOp::Max)
        .map_err(e2s)?;
    Ok(stop[0] == 0)
}

/// All-to-all of `bytes` per rank (an equal block per peer), repeated for `secs`
/// seconds (at least `min_iters` times). Prints one line per iteration,
/// `iter K ok T` with T the seconds since the start, then a summary.
///
/// With `FXTEST_SOAK_DIR` set, the number of verified iterations is written to
/// `DIR/iter.RANK` after each one (so a test can act between iterations), and the
/// loop also ends once `DIR/stop` exists and `min_iters` are done.
pub fn all_to_all(bytes: usize, secs: f64, min_iters: u64) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let words = bytes / 8 / n;
    let mut send = vec![0u64; words * n];
    let mut recv = vec![0u64; words * n];
    let start = Instant::now();
    let mut iter = 0u64;
    let mut out = std::io::stdout();
    let dir = std::env::var_os("FXTEST_SOAK_DIR").map(std::path::PathBuf::from);
    let stopped = || dir.as_ref().is_some_and(|d| d.join("stop").exists());
    while go_on(
        &comm,
        iter < min_iters || (start.elapsed() < Duration::from_secs_f64(secs) && !stopped()),
    )
    .map_err(|e| format!("iteration {iter}: agreeing to go on: {e}"))?
    {
        for (dst, block) in send.chunks_mut(words).enumerate() {
            for (i, w) in block.iter_mut().enumerate() {
                *w = word(iter, me, dst, i);
            }
        }
        recv.fill(0);
        comm.all_to_all(&send, &mut recv).map_err(|e| {
            format!(
                "iteration {iter} after {:.2}s: {}",
                start.elapsed().as_secs_f64(),
                e2s(e)
            )
        })?;
        for (src, block) in recv.chunks(words).enumerate() {
            if let Some(i) = (0..words).find(|&i| block[i] != word(iter, src, me, i)) {
                return Err(format!(
                    "iteration {iter}: word {i} from rank {src} is {:#x}, expected {:#x}",
                    block[i],
                    word(iter, src, me, i)
                ));
            }
        }
        let _ = writeln!(out, "iter {iter} ok {:.2}", start.elapsed().as_secs_f64());
        iter += 1;
        record(dir.as_deref(), me, iter)?;
    }
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "rank {me}: {iter} all-to-alls of {bytes} bytes verified in {:.1}s",
        start.elapsed().as_secs_f64()
    ))
}

/// The collectives of [`mixed`], and the point-to-point exchange (`None`).
const MIXED: [Option<CollKind>; 9] = [
    Some(CollKind::AllReduce),
    Some(CollKind::AllGather),
    Some(CollKind::Broadcast),
    Some(CollKind::AllToAll),
    Some(CollKind::ReduceScatter),
    Some(CollKind::Reduce),
    Some(CollKind::Gather),
    Some(CollKind::Scatter),
    None,
];
const MIXED_TYPES: [DataType; 4] = [DataType::F32, DataType::I32, DataType::U8, DataType::F64];

/// Random collectives and point-to-point exchanges of up to `max_bytes` per rank
/// (log-uniform sizes), every element checked, for `secs` seconds (at least
/// `min_iters` iterations). Progress files and the stop file as in [`all_to_all`];
/// the summary counts the payload bytes moved.
pub fn mixed(max_bytes: usize, secs: f64, min_iters: u64) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let start = Instant::now();
    let dir = std::env::var_os("FXTEST_SOAK_DIR").map(std::path::PathBuf::from);
    let stopped = || dir.as_ref().is_some_and(|d| d.join("stop").exists());
    let (mut iter, mut moved) = (0u64, 0u64);
    let mut longest = Duration::ZERO;
    let bits = usize::BITS - max_bytes.max(1).leading_zeros();
    while go_on(
        &comm,
        iter < min_iters || (start.elapsed() < Duration::from_secs_f64(secs) && !stopped()),
    )
    .map_err(|e| format!("iteration {iter}: agreeing to go on: {e}"))?
    {
        let h = hash(&[0xF1A9, iter]);
        let bytes = ((1usize << (h % u64::from(bits))) + (h >> 8) as usize % 4096).min(max_bytes);
        let fail = |e: ferrocx::Error, what: &str| {
            format!(
                "iteration {iter} after {:.2}s: {what}: {}",
                start.elapsed().as_secs_f64(),
                e2s(e)
            )
        };
        let op_start = Instant::now();
        match MIXED[(h >> 32) as usize % MIXED.len()] {
            Some(kind) => {
                let dtype = MIXED_TYPES[(h >> 40) as usize % MIXED_TYPES.len()];
                let mut c = Case::new(kind, dtype, bytes / dtype.size(), hash(&[h, 1]));
                c.root = (h >> 48) as usize % n;
                let mut p = Prepared::new(&c, me, n);
                p.run(&comm).map_err(|e| fail(e, &c.describe(n)))?;
                p.verify().map_err(|m| format!("iteration {iter}: {m}"))?;
                moved += (c.count * dtype.size()) as u64;
            }
            None => {
                let msg = |src: usize, dst: usize| -> Vec<u8> {
                    let k = hash(&[h, src as u64, dst as u64]);
                    (0..bytes)
                        .map(|i| (mix64(k ^ (i / 8) as u64) >> (i % 8 * 8)) as u8)
                        .collect()
                };
                let sends: Vec<Vec<u8>> = (0..n).map(|d| msg(me, d)).collect();
                let mut recvs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; bytes]).collect();
                let mut g = comm.group_start();
                for (p, (s, r)) in sends.iter().zip(recvs.iter_mut()).enumerate() {
                    if p != me {
                        g.send(s, p).map_err(|e| fail(e, "send"))?;
                        g.recv(r, p).map_err(|e| fail(e, "recv"))?;
                    }
                }
                g.group_end().map_err(|e| fail(e, "send/recv group"))?;
                for (src, r) in recvs.iter().enumerate().filter(|&(s, _)| s != me) {
                    let want = msg(src, me);
                    if let Some(i) = (0..bytes).find(|&i| r[i] != want[i]) {
                        return Err(format!(
                            "iteration {iter}: byte {i} of {bytes} from rank {src} is wrong"
                        ));
                    }
                }
                moved += (bytes * (n - 1)) as u64;
            }
        }
        longest = longest.max(op_start.elapsed());
        iter += 1;
        record(dir.as_deref(), me, iter)?;
    }
    comm.destroy().map_err(e2s)?;
    let secs = start.elapsed().as_secs_f64();
    Ok(format!(
        "rank {me}: {iter} mixed operations verified in {secs:.1}s, {moved} bytes ({:.1} MB/s), longest {:.3}s",
        moved as f64 / secs / 1e6,
        longest.as_secs_f64()
    ))
}
