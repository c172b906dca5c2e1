//! Long-running collective loops for fault tests: every iteration's data is
//! generated from (iteration, source, destination, index) and checked in full, so a
//! chunk lost, duplicated or misplaced during a failover shows up as a named mismatch.

use super::{e2s, hash, mix64};
use ferrocx::Communicator;
use std::io::Write;
use std::time::{Duration, Instant};

fn word(iter: u64, src: usize, dst: usize, i: usize) -> u64 {
    mix64(hash(&[iter, src as u64, dst as u64]) ^ i as u64)
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
    while iter < min_iters || (start.elapsed() < Duration::from_secs_f64(secs) && !stopped()) {
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
        if let Some(d) = &dir {
            // Written whole then renamed, so a reader never sees a partial number.
            let tmp = d.join(format!("iter.{me}.tmp"));
            std::fs::write(&tmp, iter.to_string())
                .and_then(|_| std::fs::rename(&tmp, d.join(format!("iter.{me}"))))
                .map_err(|e| format!("FXTEST_SOAK_DIR: {e}"))?;
        }
    }
    comm.destroy().map_err(e2s)?;
    Ok(format!(
        "rank {me}: {iter} all-to-alls of {bytes} bytes verified in {:.1}s",
        start.elapsed().as_secs_f64()
    ))
}
