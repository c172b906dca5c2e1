//! Local copies a device plan can leave to the user's stream.
//!
//! A copy that reads memory nothing else in the operation writes, into memory
//! nothing else in the operation touches (a rank's own block in all-gather and
//! all-to-all, the broadcast root's copy to its output), may run at any moment
//! between the operation's start and end. Queued on the user's stream between the
//! start gate and the stream wait, it runs the moment the stream reaches the
//! operation, beside the transfers, and the engine never waits for it: the
//! stream wait orders it before the user's later work. Judged by address, so an
//! in-place call's aliasing counts; regions in scratch are never moved (scratch
//! is assigned when the plan runs).

use super::local::{overlap, Bases};
use crate::algo::{Buf, Local, Schedule};

/// `(dst, src, bytes)` of a copy to queue on the user's stream.
pub(crate) type Copy = (usize, usize, usize);

/// Split `sched` into what the runner still does and the copies that can go to
/// the user's stream; `None` when nothing can be moved (the schedule is then
/// used as it is).
pub(crate) fn split(sched: &Schedule, b: &Bases) -> Option<(Schedule, Vec<Copy>)> {
    // Every range each stage's transfers and locals read and write, with its
    // owner: (stage, local index), or (stage, MAX) for a transfer.
    let mut reads: Vec<((usize, usize), (usize, usize))> = Vec::new();
    let mut writes: Vec<((usize, usize), (usize, usize))> = Vec::new();
    for (s, st) in sched.stages.iter().enumerate() {
        let xfer = (s, usize::MAX);
        reads.extend(st.sends.iter().map(|x| (b.span(&x.region), xfer)));
        writes.extend(st.recvs.iter().map(|x| (b.span(&x.region), xfer)));
        for (i, l) in st.locals.iter().enumerate() {
            let (r, w) = l.regions();
            reads.extend(r.iter().flatten().map(|r| (b.span(r), (s, i))));
            writes.push((b.span(w), (s, i)));
        }
    }
    let mut moved = Vec::new();
    let mut keep = sched.clone();
    for (s, st) in sched.stages.iter().enumerate() {
        for (i, l) in st.locals.iter().enumerate() {
            let Local::Copy { dst, src } = l else {
                continue;
            };
            if dst.buf == Buf::Scratch || src.buf == Buf::Scratch {
                continue;
            }
            let (d, n) = b.addr(dst);
            let (sa, _) = b.addr(src);
            if n == 0 || d == sa {
                continue;
            }
            let (ds, ss) = (b.span(dst), b.span(src));
            let me = (s, i);
            // Nothing else writes its source or touches its target.
            let free = writes
                .iter()
                .filter(|(_, o)| *o != me)
                .all(|&(w, _)| !overlap(w, ds) && !overlap(w, ss))
                && reads
                    .iter()
                    .filter(|(_, o)| *o != me)
                    .all(|&(r, _)| !overlap(r, ds))
                && !overlap(ds, ss);
            if free {
                moved.push((s, i, (d, sa, n)));
            }
        }
    }
    if moved.is_empty() {
        return None;
    }
    // Remove from the back so earlier indices stay valid.
    for &(s, i, _) in moved.iter().rev() {
        keep.stages[s].locals.remove(i);
    }
    keep.stages
        .retain(|st| !(st.sends.is_empty() && st.recvs.is_empty() && st.locals.is_empty()));
    Some((keep, moved.into_iter().map(|(_, _, c)| c).collect()))
}

#[cfg(test)]
mod tests {
    use super::split;
    use crate::algo::{self, Buf, CollArgs, CollKind, Local, Part, Region, Stage, Xfer};
    use crate::plan::local::Bases;

    fn bases(in_place: bool) -> Bases {
        Bases {
            send: 0x10000,
            recv: if in_place { 0x10000 } else { 0x40000 },
            scratch: 0,
            esize: 4,
        }
    }

    fn sched(kind: CollKind, rank: usize, count: usize) -> algo::Schedule {
        algo::schedule(&CollArgs {
            kind,
            algo: algo::choose(kind, 2, count * 4),
            rank,
            nranks: 2,
            count,
            root: 0,
            part: Part { index: 0, of: 1 },
            chunk: 1 << 20,
            v: None,
        })
    }

    #[test]
    fn own_blocks_and_the_roots_copy_move_out_of_place() {
        for (kind, rank) in [
            (CollKind::AllGather, 0),
            (CollKind::AllGather, 1),
            (CollKind::AllToAll, 1),
            (CollKind::Broadcast, 0),
        ] {
            let s = sched(kind, rank, 1000);
            let (keep, moved) = split(&s, &bases(false)).unwrap_or_else(|| panic!("{kind:?}"));
            assert_eq!(moved.len(), 1, "{kind:?}");
            let (d, src, n) = moved[0];
            assert_eq!(n, 4000, "{kind:?}");
            assert!(d >= 0x40000 && src < 0x40000, "{kind:?}: recv <- send");
            let copies = |s: &algo::Schedule| {
                s.stages
                    .iter()
                    .flat_map(|st| st.locals.iter())
                    .filter(|l| matches!(l, Local::Copy { .. }))
                    .count()
            };
            assert_eq!(copies(&keep) + 1, copies(&s), "{kind:?}");
            assert!(!keep.stages.is_empty(), "{kind:?}: the transfers stay");
        }
        // The broadcast receiver has no local copy.
        assert!(split(&sched(CollKind::Broadcast, 1, 1000), &bases(false)).is_none());
    }

    #[test]
    fn in_place_copies_onto_themselves_and_reductions_stay() {
        for kind in [CollKind::AllGather, CollKind::Broadcast] {
            assert!(
                split(&sched(kind, 0, 1000), &bases(true)).is_none(),
                "{kind:?}"
            );
        }
        // All-reduce copies through scratch or reduces: nothing moves.
        let s = sched(CollKind::AllReduce, 0, 1000);
        if let Some((_, moved)) = split(&s, &bases(false)) {
            panic!("moved {moved:?}");
        }
    }

    #[test]
    fn a_copy_whose_target_a_transfer_reads_stays() {
        let r = |buf, off, len| Region::new(buf, off, len);
        let s = algo::Schedule {
            stages: vec![
                Stage {
                    locals: vec![Local::Copy {
                        dst: r(Buf::Recv, 0, 10),
                        src: r(Buf::Send, 0, 10),
                    }],
                    ..Stage::default()
                },
                Stage {
                    sends: vec![Xfer {
                        peer: 1,
                        region: r(Buf::Recv, 5, 10),
                    }],
                    ..Stage::default()
                },
            ],
            scratch: 0,
        };
        assert!(split(&s, &bases(false)).is_none());
        // Nor one whose source a receive writes.
        let s = algo::Schedule {
            stages: vec![Stage {
                recvs: vec![Xfer {
                    peer: 1,
                    region: r(Buf::Send, 0, 10),
                }],
                locals: vec![Local::Copy {
                    dst: r(Buf::Recv, 0, 10),
                    src: r(Buf::Send, 0, 10),
                }],
                ..Stage::default()
            }],
            scratch: 0,
        };
        assert!(split(&s, &bases(false)).is_none());
    }
}
