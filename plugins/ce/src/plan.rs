//! What each rank copies (sans-IO): for one collective, one rank, one root,
//! in or out of place, the list of copies from this rank's send buffer into
//! some rank's receive buffer, and how it is split into batches.
//!
//! Every copy is a push: the rank that holds the data writes it into the
//! destination rank's receive window (rank `r`'s byte `o` of the receive
//! buffer is `peer_bases[r] + recv_offset + o`: windows are symmetric, every
//! rank's buffer lies at the same offset of its window).
//!
//! | collective | who copies | copy |
//! |---|---|---|
//! | all_gather | every rank | its block → every rank's recv at `rank*block` |
//! | alltoall | every rank | its block `r` → rank `r`'s recv at `rank*block` |
//! | broadcast | the root | its block → every rank's recv at 0 |
//! | gather | every rank | its block → the root's recv at `rank*block` |
//! | scatter | the root | its block `r` → rank `r`'s recv at 0 |
//!
//! In place (the core's layout, `FX_COLL_IN_PLACE`): send == recv == the
//! start of one buffer; all_gather's input is at `rank*block`; gather's at
//! `root*block` on the root and at 0 elsewhere; scatter's output at
//! `root*block` on the root and at 0 elsewhere; broadcast's buffer is both.
//! A copy whose source already is its destination is left out. alltoall in
//! place is not supported (the core runs it).
//!
//! Destinations are visited starting with this rank and going up (`rank`,
//! `rank+1`, …), so ranks do not all write to rank 0 first.
//!
//! **Batches.** When the busiest rank makes more than `batch` copies and
//! those carry at least `min_bytes`, each rank's copies are issued in
//! batches of `batch` with a barrier between consecutive batches (NCCL's
//! intra-batch sync). The decision and the number of batches depend only on
//! what every rank knows (collective, ranks, block size), never on this
//! rank's own list, so every rank issues the same barriers; a rank with
//! fewer copies (a broadcast's non-roots) has empty batches.

use ferrocx_sdk::collective::Coll;

/// The collectives ce runs.
pub const COLLS: [Coll; 5] = [
    Coll::AllGather,
    Coll::AllToAll,
    Coll::Broadcast,
    Coll::Gather,
    Coll::Scatter,
];

/// One collective call as one rank sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The collective (one of [`COLLS`]).
    pub coll: Coll,
    /// Ranks.
    pub nranks: usize,
    /// This rank.
    pub rank: usize,
    /// Root of rooted collectives (0 otherwise).
    pub root: usize,
    /// Bytes of one block (`count × element size`).
    pub block: usize,
    /// The core's in-place layout.
    pub in_place: bool,
}

/// One copy this rank pushes into a receive buffer (its own or a peer's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Push {
    /// Bytes from the start of this rank's send buffer (the one buffer, in place).
    pub src: usize,
    /// The rank whose receive buffer is written.
    pub dst_rank: usize,
    /// Bytes from the start of that rank's receive buffer.
    pub dst: usize,
    /// Bytes.
    pub bytes: usize,
}

/// When a collective is split into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Copies per batch (≥ 1).
    pub batch: usize,
    /// Bytes the busiest rank must copy for a split.
    pub min_bytes: usize,
}

/// Whether ce runs `coll` in this layout (alltoall in place: no).
pub fn supported(coll: Coll, in_place: bool) -> bool {
    COLLS.contains(&coll) && !(coll == Coll::AllToAll && in_place)
}

/// Bytes the (send, receive) buffer must hold from its offset, the same on
/// every rank: the root's extents (the largest), since other ranks write into
/// the root's buffer at their own offsets; in place, the one buffer holds the
/// larger. `None` when the sizes overflow.
pub fn extents(
    coll: Coll,
    nranks: usize,
    root: usize,
    block: usize,
    in_place: bool,
) -> Option<(usize, usize)> {
    block.checked_mul(nranks)?;
    let (s, r) = coll.buffer_bytes(block, nranks, root, root);
    Some(if in_place {
        (s.max(r), s.max(r))
    } else {
        (s, r)
    })
}

/// This rank's copies, each with its position among the copies the
/// collective could make on this rank (what assigns it to a batch).
pub fn copies(s: &Shape) -> Vec<(usize, Push)> {
    debug_assert!(supported(s.coll, s.in_place));
    let (n, me, root, b) = (s.nranks, s.rank, s.root, s.block);
    let ring = move || (0..n).map(move |i| (i, (me + i) % n));
    let c = |src, dst_rank, dst| Push {
        src,
        dst_rank,
        dst,
        bytes: b,
    };
    let own = |r: usize| s.in_place && r == me;
    match s.coll {
        Coll::AllGather => {
            let src = if s.in_place { me * b } else { 0 };
            ring()
                .filter(|&(_, r)| !own(r))
                .map(|(i, r)| (i, c(src, r, me * b)))
                .collect()
        }
        Coll::AllToAll => ring().map(|(i, r)| (i, c(r * b, r, me * b))).collect(),
        Coll::Broadcast if me == root => ring()
            .filter(|&(_, r)| !own(r))
            .map(|(i, r)| (i, c(0, r, 0)))
            .collect(),
        Coll::Gather if !own(root) => vec![(0, c(0, root, me * b))],
        Coll::Scatter if me == root => ring()
            .filter(|&(_, r)| !own(r))
            .map(|(i, r)| (i, c(r * b, r, 0)))
            .collect(),
        _ => Vec::new(),
    }
}

/// Copies the busiest rank could make (before in-place omissions).
pub fn max_copies(coll: Coll, nranks: usize) -> usize {
    if coll == Coll::Gather {
        1
    } else {
        nranks
    }
}

/// Batches every rank issues for this collective.
pub fn rounds(s: &Shape, how: &Batching) -> usize {
    let most = max_copies(s.coll, s.nranks);
    let bytes = most.saturating_mul(s.block);
    if most > how.batch && bytes >= how.min_bytes {
        most.div_ceil(how.batch)
    } else {
        1
    }
}

/// This rank's copies in [`rounds`] batches (some possibly empty).
pub fn batches(s: &Shape, how: &Batching) -> Vec<Vec<Push>> {
    let n = rounds(s, how);
    let mut out = vec![Vec::new(); n];
    for (pos, c) in copies(s) {
        let i = if n == 1 { 0 } else { pos / how.batch };
        out[i].push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(coll: Coll, nranks: usize, rank: usize, root: usize, in_place: bool) -> Shape {
        Shape {
            coll,
            nranks,
            rank,
            root,
            block: 10,
            in_place,
        }
    }

    fn list(s: &Shape) -> Vec<(usize, usize, usize)> {
        copies(s)
            .into_iter()
            .map(|(_, c)| (c.src, c.dst_rank, c.dst))
            .collect()
    }

    #[test]
    fn each_collective_pushes_where_nccl_puts_the_data() {
        let ag = shape(Coll::AllGather, 3, 1, 0, false);
        assert_eq!(list(&ag), [(0, 1, 10), (0, 2, 10), (0, 0, 10)]);
        let ag = Shape {
            in_place: true,
            ..ag
        };
        assert_eq!(list(&ag), [(10, 2, 10), (10, 0, 10)]);
        let a2a = shape(Coll::AllToAll, 3, 2, 0, false);
        assert_eq!(list(&a2a), [(20, 2, 20), (0, 0, 20), (10, 1, 20)]);
        let bc = shape(Coll::Broadcast, 3, 2, 2, false);
        assert_eq!(list(&bc), [(0, 2, 0), (0, 0, 0), (0, 1, 0)]);
        assert_eq!(
            list(&Shape {
                in_place: true,
                ..bc
            }),
            [(0, 0, 0), (0, 1, 0)]
        );
        assert!(list(&shape(Coll::Broadcast, 3, 1, 2, false)).is_empty());
        assert_eq!(list(&shape(Coll::Gather, 3, 1, 2, false)), [(0, 2, 10)]);
        assert_eq!(list(&shape(Coll::Gather, 3, 1, 2, true)), [(0, 2, 10)]);
        assert!(list(&shape(Coll::Gather, 3, 2, 2, true)).is_empty());
        assert_eq!(list(&shape(Coll::Gather, 3, 2, 2, false)), [(0, 2, 20)]);
        let sc = shape(Coll::Scatter, 3, 0, 0, false);
        assert_eq!(list(&sc), [(0, 0, 0), (10, 1, 0), (20, 2, 0)]);
        assert_eq!(
            list(&Shape {
                in_place: true,
                ..sc
            }),
            [(10, 1, 0), (20, 2, 0)]
        );
        assert!(list(&shape(Coll::Scatter, 3, 1, 0, true)).is_empty());
    }

    #[test]
    fn support_and_extents() {
        for c in Coll::ALL {
            assert_eq!(supported(c, false), COLLS.contains(&c));
        }
        assert!(!supported(Coll::AllToAll, true));
        assert!(supported(Coll::Scatter, true));
        assert_eq!(extents(Coll::Gather, 4, 1, 8, false), Some((8, 32)));
        assert_eq!(extents(Coll::Scatter, 4, 3, 8, false), Some((32, 8)));
        assert_eq!(extents(Coll::Broadcast, 4, 0, 8, true), Some((8, 8)));
        assert_eq!(extents(Coll::AllGather, 4, 0, 8, true), Some((32, 32)));
        assert_eq!(extents(Coll::AllToAll, 2, 0, usize::MAX, false), None);
    }

    #[test]
    fn batches_split_alike_on_every_rank() {
        let how = Batching {
            batch: 2,
            min_bytes: 0,
        };
        for coll in COLLS {
            for n in 1..=7 {
                for root in 0..n {
                    for in_place in [false, true] {
                        if !supported(coll, in_place) {
                            continue;
                        }
                        let r0 = rounds(&shape(coll, n, 0, root, in_place), &how);
                        for me in 0..n {
                            let s = shape(coll, n, me, root, in_place);
                            assert_eq!(rounds(&s, &how), r0);
                            let b = batches(&s, &how);
                            assert_eq!(b.len(), r0);
                            assert!(b.iter().all(|x| x.len() <= 2));
                            let flat: Vec<Push> = b.into_iter().flatten().collect();
                            let all: Vec<Push> = copies(&s).into_iter().map(|x| x.1).collect();
                            assert_eq!(flat, all, "batches keep the order");
                        }
                    }
                }
            }
        }
        let s = shape(Coll::AllToAll, 8, 0, 0, false);
        assert_eq!(rounds(&s, &how), 4);
        let big = Batching {
            batch: 2,
            min_bytes: 81,
        };
        assert_eq!(rounds(&s, &big), 1, "80 bytes stay below the threshold");
        assert_eq!(
            rounds(
                &s,
                &Batching {
                    batch: 8,
                    min_bytes: 0
                }
            ),
            1,
            "not more copies than a batch"
        );
        assert_eq!(rounds(&shape(Coll::Gather, 8, 0, 0, false), &how), 1);
    }
}
