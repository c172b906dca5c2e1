//! In-place all-to-all without setting aside this rank's own block.
//!
//! An in-place all-to-all must set its input aside: every other block is sent
//! from the same memory a peer's block is received into. This rank's own block
//! is different: in NCCL's layout it already lies where the result wants it
//! (`send` = `recv`, block `rank` of both), the schedule's only use of it is the
//! copy onto itself, and no receive writes it. So it is neither set aside nor
//! copied: 1/n of the input less to copy (half of it at two ranks).

use crate::algo::{Buf, Local, Schedule};

/// The parts of an in-place all-to-all's input that must be set aside, as
/// `(first element, elements)`: all `send_elems` but the own block
/// `[rank * count, (rank + 1) * count)`.
pub(crate) fn staged_ranges(send_elems: usize, rank: usize, count: usize) -> Vec<(usize, usize)> {
    let (a, b) = (rank * count, (rank + 1) * count);
    [(0, a), (b, send_elems.saturating_sub(b))]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// `sched` without its copies of the own block onto itself (the block
/// `[rank * count, (rank + 1) * count)`, same offset in `Send` and `Recv`):
/// with the staged input as `Send`, those copies would read the part that was
/// not set aside. `None` when there is none to drop.
pub(crate) fn drop_own_copies(sched: &Schedule, rank: usize, count: usize) -> Option<Schedule> {
    let (a, b) = (rank * count, (rank + 1) * count);
    let own = |l: &Local| {
        matches!(l, Local::Copy { dst, src }
            if src.buf == Buf::Send && dst.buf == Buf::Recv
                && src.off == dst.off && src.len == dst.len
                && src.off >= a && src.end() <= b)
    };
    if !sched.stages.iter().any(|st| st.locals.iter().any(own)) {
        return None;
    }
    let mut keep = sched.clone();
    for st in &mut keep.stages {
        st.locals.retain(|l| !own(l));
    }
    keep.stages
        .retain(|st| !(st.sends.is_empty() && st.recvs.is_empty() && st.locals.is_empty()));
    // Nothing else may read the part that is not set aside.
    debug_assert!(keep.stages.iter().all(|st| {
        let outside = |r: &crate::algo::Region| r.buf != Buf::Send || r.end() <= a || r.off >= b;
        st.sends.iter().all(|x| outside(&x.region))
            && st
                .locals
                .iter()
                .all(|l| l.regions().0.iter().flatten().all(|r| outside(r)))
    }));
    Some(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{self, Algo, CollArgs, CollKind, Part};

    fn sched(algo: Algo, rank: usize, n: usize, count: usize, part: Part) -> Schedule {
        algo::schedule(&CollArgs {
            kind: CollKind::AllToAll,
            algo,
            rank,
            nranks: n,
            count,
            root: 0,
            part,
            chunk: 3,
            v: None,
        })
    }

    #[test]
    fn staged_ranges_leave_out_the_own_block() {
        assert_eq!(staged_ranges(8, 0, 4), vec![(4, 4)]);
        assert_eq!(staged_ranges(8, 1, 4), vec![(0, 4)]);
        assert_eq!(staged_ranges(15, 1, 5), vec![(0, 5), (10, 5)]);
        assert_eq!(staged_ranges(0, 2, 0), vec![]);
    }

    /// Every algorithm, rank count and channel part: the only reads of the own
    /// block are the dropped copies, and everything else is kept as it was.
    #[test]
    fn drops_exactly_the_own_copies() {
        for algo in [Algo::Pairwise, Algo::Direct] {
            for n in 1..6 {
                for rank in 0..n {
                    for of in 1..3 {
                        for index in 0..of {
                            let s = sched(algo, rank, n, 7, Part { index, of });
                            let k = drop_own_copies(&s, rank, 7).expect("an own copy");
                            let count = |s: &Schedule| -> (usize, usize, usize) {
                                s.stages.iter().fold((0, 0, 0), |(a, b, c), st| {
                                    (a + st.sends.len(), b + st.recvs.len(), c + st.locals.len())
                                })
                            };
                            let (s0, r0, l0) = count(&s);
                            assert_eq!(count(&k), (s0, r0, l0 - 1), "{algo:?} n {n} rank {rank}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn another_ranks_block_is_not_touched() {
        let other = sched(Algo::Pairwise, 1, 3, 4, Part { index: 0, of: 1 });
        // Rank 1's schedule, asked about rank 0's block: nothing to drop.
        assert!(drop_own_copies(&other, 0, 4).is_none());
    }
}
