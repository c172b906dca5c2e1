//! `shrink`: 4 ranks; rank 3 dies (SIGKILL) after the first all-reduce; the
//! survivors' next call fails naming it, `shrink` gives them a communicator of 3,
//! and every collective (each root, both placements, small to large) is checked
//! on it.

use super::{e2s, matrix, Prepared};
use ferrocx::{Communicator, DataType, Error, RedOp};

pub fn run() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    if n != 4 {
        return Err(format!("shrink runs on 4 ranks, not {n}"));
    }
    let mut x = [1u32; 64];
    comm.all_reduce(&[1u32; 64], &mut x, RedOp::Sum)
        .map_err(e2s)?;
    // Rank 3 may finish that all-reduce before the others received all of its data:
    // it dies only once everyone has.
    comm.barrier_oob().map_err(e2s)?;
    if me == 3 {
        super::kill_self_after(0);
        std::thread::sleep(std::time::Duration::from_secs(60));
        return Err("still alive after SIGKILL".into());
    }
    match comm.all_reduce(&[1u32; 64], &mut x, RedOp::Sum) {
        Err(Error::PeerFailed { rank: 3, .. }) => {}
        other => return Err(format!("rank {me}: the call after rank 3 died: {other:?}")),
    }
    let small = comm
        .shrink()
        .map_err(|e| format!("rank {me}: shrink: {e}"))?;
    if (small.rank(), small.nranks()) != (me, 3) {
        return Err(format!(
            "rank {me}: rank {} of {} after shrink",
            small.rank(),
            small.nranks()
        ));
    }
    let cases: Vec<_> = matrix::cases(3)
        .into_iter()
        .filter(|c| c.dtype == DataType::F32 && c.op == RedOp::Sum && c.algo.is_none())
        .collect();
    for (i, case) in cases.iter().enumerate() {
        let mut p = Prepared::new(case, me, 3);
        p.run(&small)
            .map_err(|e| format!("case {i} {}: {e}", case.describe(3)))?;
        p.verify().map_err(|e| format!("case {i}: {e}"))?;
    }
    small.destroy().map_err(e2s)?;
    // The old communicator stays broken; destroying it must not hang.
    let _ = comm.destroy();
    Ok(format!(
        "{} collectives checked on the 3 survivors",
        cases.len()
    ))
}
