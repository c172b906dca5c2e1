//! What each rank copies (sans-IO): for one collective, one rank, one root,
//! in or out of place, the list of copies from some rank's send buffer into
//! some rank's receive buffer, and how it is split into batches.
//!
//! **On windows** (rank `r`'s byte `o` of a buffer is `peer_bases[r] +
//! offset + o`: windows are symmetric) the copies are pushes into the peers'
//! receive windows, or for gather pulls from the peers' send windows: in a
//! rooted collective only the root copies, through its own windows, so a
//! non-root's unused buffer (NULL, in no window) never matters.
//!
//! | collective | who copies | copy |
//! |---|---|---|
//! | all_gather | every rank | its block → every rank's recv at `rank*block` |
//! | alltoall | every rank | its block `r` → rank `r`'s recv at `rank*block` |
//! | broadcast | the root | its block → every rank's recv at 0 |
//! | gather | the root | every rank's block → its recv at `rank*block` |
//! | scatter | the root | its block `r` → rank `r`'s recv at 0 |
//!
//! **Staged** ([`stage`], [`Shape::staged`]: buffers outside windows, and
//! every call that fits the scratch except all_gather and reduce_scatter on
//! windows) each rank first copies its input into its own scratch, then
//! every copy is a pull into this rank's own buffer.
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

/// The copy collectives ce runs.
pub const COLLS: [Coll; 5] = [
    Coll::AllGather,
    Coll::AllToAll,
    Coll::Broadcast,
    Coll::Gather,
    Coll::Scatter,
];

/// The reductions ce runs: the device's reduction kernels fold the ranks'
/// inputs, read straight through the peers' windows, and copy engines spread
/// the results (see [`fold`]).
pub const REDUCE_COLLS: [Coll; 2] = [Coll::AllReduce, Coll::ReduceScatter];

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
    /// Bytes of one element (reductions slice at element boundaries).
    pub elem: usize,
    /// Staged through the scratch buffers: each rank first copies its input
    /// into its own scratch (before the ready barrier); the copies pull from
    /// the scratches into this rank's own buffer, the folds read the
    /// scratches. A staged all_reduce is one-shot.
    pub staged: bool,
    /// all_reduce on windows, one-shot: every rank folds every rank's input
    /// read through the send windows. A rank in place folds into its
    /// scratch and copies the result back after the complete barrier
    /// ([`post`]), since the peers read its buffer until then; so ranks may
    /// differ in whether they run in place (NCCL allows it).
    pub one_shot: bool,
}

/// Which of a rank's buffers a copy or fold touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The send buffer (the one buffer, in place).
    Send,
    /// The receive buffer (the one buffer, in place).
    Recv,
    /// ce's own scratch buffer, allocated with the flags (staged reductions).
    Scratch,
}

/// A reduction this rank queues with the reduction kernels: its receive
/// buffer at `dst` becomes `srcs[0] op srcs[1] op …` (in that order), each
/// source `(rank, offset)` a range of that rank's send buffer (the one
/// buffer, in place), read through its window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fold {
    /// Bytes from the start of this rank's receive buffer.
    pub dst: usize,
    /// Sources, in the order they are combined.
    pub srcs: Vec<(usize, usize)>,
    /// The sources' buffer (send, or scratch when staged).
    pub src_buf: Buf,
    /// The destination's buffer: receive, or the scratch (one-shot in place).
    pub dst_buf: Buf,
    /// Bytes (a whole number of elements).
    pub bytes: usize,
}

/// One copy this rank issues, from a send buffer into a receive buffer
/// (its own or a peer's: a push, or for out-of-place broadcast a pull).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Push {
    /// The rank whose buffer is read (this rank, except in a pull).
    pub src_rank: usize,
    /// The buffer read: send (usually), receive (a two-shot all_reduce
    /// spreads the slice it folded there).
    pub src_buf: Buf,
    /// The buffer written: receive (usually), scratch (staging).
    pub dst_buf: Buf,
    /// Bytes from the start of that send buffer (the one buffer, in place).
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

/// Whether ce runs `coll` (alltoall in place only staged: see [`needs_staging`]).
pub fn supported(coll: Coll, _in_place: bool) -> bool {
    COLLS.contains(&coll) || REDUCE_COLLS.contains(&coll)
}

/// Layouts that run only staged: alltoall in place (each block is both an
/// input some peer reads and the output another peer's block replaces).
pub fn needs_staging(coll: Coll, in_place: bool) -> bool {
    coll == Coll::AllToAll && in_place
}

/// Elements of rank `r`'s slice of a two-shot all_reduce over `count`
/// elements: `(first, len)`. Slices are a whole number of 16-byte vectors
/// (as long as the count allows), so every rank's kernel runs vectorized;
/// the last ranks' slices may be short or empty.
pub fn slice(count: usize, elem: usize, nranks: usize, r: usize) -> (usize, usize) {
    let v = (16 / elem.max(1)).max(1);
    let q = count.div_ceil(nranks.max(1)).div_ceil(v) * v;
    let first = (r * q).min(count);
    (first, ((r + 1) * q).min(count) - first)
}

/// This rank's reduction, if the collective is one ([`REDUCE_COLLS`]):
///
/// * **all_reduce, one-shot** (staged): the whole vector from the scratches,
///   the sources in rank order on every rank, so every rank computes the
///   same bits; no copies follow.
/// * **all_reduce, two-shot**: rank `r` folds its slice ([`slice()`]) of every
///   rank's input into its own receive buffer, starting with its own (in
///   place, its own slice is the destination: it must be read first), then
///   pushes the result into every peer's receive buffer ([`copies`]). Each
///   slice is folded by one rank, so all ranks hold the same bits.
/// * **reduce_scatter**: rank `r` folds block `r` of every rank's input,
///   its own first.
///
/// No rank writes anything another rank reads during the collective: a
/// fold reads only slice/block `r` and writes only this rank's own slice;
/// the pushes write slice `r` of the peers, which only rank `r` reads (in
/// its own fold, earlier on its stream). So ready and complete barriers
/// suffice, as for the copy collectives.
///
/// Staged ([`Shape::staged`]), the folds read the scratch buffers (the
/// inputs as [`stage`] copied them there) and all_reduce is one-shot.
pub fn fold(s: &Shape) -> Option<Fold> {
    let (n, me) = (s.nranks, s.rank);
    let ring = |off: usize| (0..n).map(move |i| ((me + i) % n, off)).collect();
    let src_buf = if s.staged { Buf::Scratch } else { Buf::Send };
    match s.coll {
        Coll::AllReduce if s.staged || s.one_shot => Some(Fold {
            dst: 0,
            srcs: (0..n).map(|r| (r, 0)).collect(),
            src_buf,
            dst_buf: if !s.staged && s.in_place {
                Buf::Scratch
            } else {
                Buf::Recv
            },
            bytes: s.block,
        }),
        Coll::AllReduce => {
            let count = s.block / s.elem.max(1);
            let (first, len) = slice(count, s.elem, n, me);
            (len > 0).then(|| Fold {
                dst: first * s.elem,
                srcs: ring(first * s.elem),
                src_buf,
                dst_buf: Buf::Recv,
                bytes: len * s.elem,
            })
        }
        Coll::ReduceScatter => Some(Fold {
            dst: if s.in_place { me * s.block } else { 0 },
            srcs: ring(me * s.block),
            src_buf,
            dst_buf: Buf::Recv,
            bytes: s.block,
        }),
        _ => None,
    }
}

/// The copy after the complete barrier: a one-shot all_reduce on windows
/// run in place folded into the scratch; the result goes home once no peer
/// reads this rank's buffer any more.
pub fn post(s: &Shape) -> Vec<Push> {
    if s.coll != Coll::AllReduce || s.staged || !s.one_shot || !s.in_place || s.block == 0 {
        return Vec::new();
    }
    vec![Push {
        src_rank: s.rank,
        src_buf: Buf::Scratch,
        dst_buf: Buf::Recv,
        src: 0,
        dst_rank: s.rank,
        dst: 0,
        bytes: s.block,
    }]
}

/// Everything one rank issues for one collective, in order: `stage` (before
/// the ready barrier), `fold`, the `batches` of copies (barriers between),
/// `post` (after the complete barrier).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parts {
    /// Copies into this rank's scratch, before the ready barrier.
    pub stage: Vec<Push>,
    /// The reduction, right after the ready barrier.
    pub fold: Option<Fold>,
    /// The copies, in batches with a barrier between consecutive ones.
    pub batches: Vec<Vec<Push>>,
    /// Copies within this rank, after the complete barrier.
    pub post: Vec<Push>,
    /// The call's note `(seq, value)` for the peers (`crate::notes`), written
    /// with the ready barrier; `None`: the call is not checked.
    pub note: Option<(u64, crate::notes::Call)>,
}

/// This rank's [`Parts`] of the collective.
pub fn parts(s: &Shape, how: &Batching) -> Parts {
    Parts {
        stage: stage(s),
        fold: fold(s),
        batches: batches(s, how),
        post: post(s),
        note: None,
    }
}

/// Scratch bytes a staged collective needs on the busiest rank (what every
/// rank checks, so all decide alike): the whole input (n blocks for
/// reduce_scatter, alltoall and scatter's root, one block otherwise).
pub fn staged_bytes(coll: Coll, nranks: usize, block: usize) -> Option<usize> {
    match coll {
        Coll::ReduceScatter | Coll::AllToAll | Coll::Scatter => block.checked_mul(nranks),
        _ => Some(block),
    }
}

/// The copy a staged collective makes before its ready barrier: what this
/// rank's peers will read of its input, into its own scratch at 0 (nothing
/// when not staged, or when no peer reads this rank's input). The previous
/// collective's complete barrier guarantees that no peer still reads the
/// scratch; the ready barrier, that every rank's copy landed before anyone
/// reads it.
pub fn stage(s: &Shape) -> Vec<Push> {
    let (n, me, root, b) = (s.nranks, s.rank, s.root, s.block);
    let from = |src: usize, bytes: usize| {
        (s.staged && bytes > 0).then_some(Push {
            src_rank: me,
            src_buf: Buf::Send,
            dst_buf: Buf::Scratch,
            src,
            dst_rank: me,
            dst: 0,
            bytes,
        })
    };
    let copy = match s.coll {
        Coll::AllReduce => from(0, b),
        Coll::ReduceScatter | Coll::AllToAll => from(0, n * b),
        Coll::AllGather => from(if s.in_place { me * b } else { 0 }, b),
        Coll::Broadcast if me == root => from(0, b),
        Coll::Gather if me != root => from(0, b),
        Coll::Scatter if me == root => from(0, n * b),
        _ => None,
    };
    copy.into_iter().collect()
}

/// A staged copy collective's copies: every one a pull into this rank's own
/// receive buffer, from a peer's scratch (or this rank's own send buffer), so
/// no rank writes another's memory at all.
fn pulls(s: &Shape) -> Vec<(usize, Push)> {
    let (n, me, root, b) = (s.nranks, s.rank, s.root, s.block);
    let ring = move || (0..n).map(move |i| (i, (me + i) % n));
    let pull = |src_rank: usize, src: usize, dst: usize| Push {
        src_rank,
        src_buf: if src_rank == me {
            Buf::Send
        } else {
            Buf::Scratch
        },
        dst_buf: Buf::Recv,
        src,
        dst_rank: me,
        dst,
        bytes: b,
    };
    // This rank's own part: a local copy out of place, already there in place.
    let own = s.in_place;
    match s.coll {
        Coll::AllGather => ring()
            .filter(|&(_, r)| !(own && r == me))
            .map(|(i, r)| (i, pull(r, 0, r * b)))
            .collect(),
        Coll::AllToAll => ring()
            .filter(|&(_, r)| !(own && r == me))
            .map(|(i, r)| (i, pull(r, me * b, r * b)))
            .collect(),
        Coll::Broadcast if me != root => vec![(0, pull(root, 0, 0))],
        Coll::Broadcast if !own => vec![(0, pull(me, 0, 0))],
        Coll::Gather if me == root => ring()
            .filter(|&(_, r)| !(own && r == me))
            .map(|(i, r)| (i, pull(r, 0, r * b)))
            .collect(),
        Coll::Scatter if me != root => vec![(0, pull(root, me * b, 0))],
        Coll::Scatter if !own => vec![(0, pull(me, me * b, 0))],
        _ => Vec::new(),
    }
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
    debug_assert!(s.staged || !needs_staging(s.coll, s.in_place));
    if s.staged && COLLS.contains(&s.coll) {
        return pulls(s);
    }
    let (n, me, root, b) = (s.nranks, s.rank, s.root, s.block);
    let ring = move || (0..n).map(move |i| (i, (me + i) % n));
    let c = |src, dst_rank, dst| Push {
        src_rank: me,
        src_buf: Buf::Send,
        dst_buf: Buf::Recv,
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
        // The root pulls every block through its send window (peers' send
        // buffers at its own offset), its own locally.
        Coll::Gather if me == root => ring()
            .filter(|&(_, r)| !own(r))
            .map(|(i, r)| {
                let p = Push {
                    src_rank: r,
                    dst_rank: me,
                    ..c(0, me, r * b)
                };
                (i, p)
            })
            .collect(),
        Coll::Scatter if me == root => ring()
            .filter(|&(_, r)| !own(r))
            .map(|(i, r)| (i, c(r * b, r, 0)))
            .collect(),
        Coll::AllReduce if !s.staged && !s.one_shot => {
            let (first, len) = slice(b / s.elem.max(1), s.elem, n, me);
            let off = first * s.elem;
            let spread = |(i, r)| {
                let p = Push {
                    src_buf: Buf::Recv,
                    bytes: len * s.elem,
                    ..c(off, r, off)
                };
                (i, p)
            };
            if len == 0 {
                Vec::new()
            } else {
                ring().filter(|&(_, r)| r != me).map(spread).collect()
            }
        }
        _ => Vec::new(),
    }
}

/// Batches every rank issues for this collective. The busiest rank makes
/// one copy per rank (before in-place omissions).
pub fn rounds(s: &Shape, how: &Batching) -> usize {
    let most = s.nranks;
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
            elem: 1,
            staged: false,
            one_shot: false,
        }
    }

    /// (source rank, source offset, destination rank, destination offset).
    fn list(s: &Shape) -> Vec<(usize, usize, usize, usize)> {
        copies(s)
            .into_iter()
            .map(|(_, c)| (c.src_rank, c.src, c.dst_rank, c.dst))
            .collect()
    }

    #[test]
    fn each_collective_copies_where_nccl_puts_the_data() {
        let ag = shape(Coll::AllGather, 3, 1, 0, false);
        assert_eq!(list(&ag), [(1, 0, 1, 10), (1, 0, 2, 10), (1, 0, 0, 10)]);
        let ag = Shape {
            in_place: true,
            ..ag
        };
        assert_eq!(list(&ag), [(1, 10, 2, 10), (1, 10, 0, 10)]);
        let a2a = shape(Coll::AllToAll, 3, 2, 0, false);
        assert_eq!(list(&a2a), [(2, 20, 2, 20), (2, 0, 0, 20), (2, 10, 1, 20)]);
        // Rooted: only the root copies, through its own windows.
        let bc = shape(Coll::Broadcast, 3, 2, 2, false);
        assert_eq!(list(&bc), [(2, 0, 2, 0), (2, 0, 0, 0), (2, 0, 1, 0)]);
        let bc_in = Shape {
            in_place: true,
            ..bc
        };
        assert_eq!(list(&bc_in), [(2, 0, 0, 0), (2, 0, 1, 0)]);
        assert!(list(&shape(Coll::Broadcast, 3, 1, 2, false)).is_empty());
        assert!(list(&shape(Coll::Broadcast, 3, 1, 2, true)).is_empty());
        let g = shape(Coll::Gather, 3, 2, 2, false);
        assert_eq!(list(&g), [(2, 0, 2, 20), (0, 0, 2, 0), (1, 0, 2, 10)]);
        let g_in = Shape {
            in_place: true,
            ..g
        };
        assert_eq!(
            list(&g_in),
            [(0, 0, 2, 0), (1, 0, 2, 10)],
            "the root's own block stays"
        );
        assert!(list(&shape(Coll::Gather, 3, 1, 2, false)).is_empty());
        assert!(list(&shape(Coll::Gather, 3, 1, 2, true)).is_empty());
        let sc = shape(Coll::Scatter, 3, 0, 0, false);
        assert_eq!(list(&sc), [(0, 0, 0, 0), (0, 10, 1, 0), (0, 20, 2, 0)]);
        assert_eq!(
            list(&Shape {
                in_place: true,
                ..sc
            }),
            [(0, 10, 1, 0), (0, 20, 2, 0)]
        );
        assert!(list(&shape(Coll::Scatter, 3, 1, 0, true)).is_empty());
        // Staged: every copy lands in this rank's own buffer.
        for coll in COLLS {
            for n in 1..=5 {
                for me in 0..n {
                    for in_place in [false, true] {
                        let st = Shape {
                            staged: true,
                            ..shape(coll, n, me, n - 1, in_place)
                        };
                        for (_, p) in copies(&st) {
                            assert_eq!((p.dst_rank, p.dst_buf), (me, Buf::Recv), "{st:?}");
                            assert!(p.src_rank == me || p.src_buf == Buf::Scratch, "{st:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn support_and_extents() {
        for c in Coll::ALL {
            assert_eq!(
                supported(c, false),
                COLLS.contains(&c) || REDUCE_COLLS.contains(&c)
            );
        }
        assert!(needs_staging(Coll::AllToAll, true));
        assert!(!needs_staging(Coll::AllToAll, false) && !needs_staging(Coll::AllGather, true));
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
                        if needs_staging(coll, in_place) {
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
        assert_eq!(
            rounds(&shape(Coll::Gather, 8, 0, 0, false), &how),
            4,
            "the root pulls 8"
        );
    }

    /// A buffer of one rank as an index: send, receive (the same one in
    /// place), scratch.
    fn buf(in_place: bool, b: Buf) -> usize {
        match b {
            Buf::Send => 0,
            Buf::Recv => (!in_place) as usize,
            Buf::Scratch => 2,
        }
    }

    /// Element ranges a rank's work reads and writes: ((rank, buffer), first, len).
    type Range = ((usize, usize), usize, usize);

    /// Per rank, per buffer, per element: the ranks combined (bit mask) and
    /// the element's position in the reduced vector; `None` before a write.
    type Bufs = Vec<Vec<Vec<Option<(u64, usize)>>>>;

    /// Every reduction on 1–6 ranks, on windows and staged, odd and even
    /// counts, every element size, in place on all, none or some of the
    /// ranks (NCCL lets ranks differ): no rank writes what another reads or
    /// writes between the barriers (so the two barriers suffice), the slices
    /// cover the vector exactly once, and running each rank's staging, fold
    /// and copies gives every rank NCCL's result, each element combined from
    /// every rank exactly once.
    #[test]
    fn reductions_fold_every_rank_once_and_never_race() {
        for n in 1..=6usize {
            let layouts: [Vec<bool>; 4] = [
                vec![false; n],
                vec![true; n],
                (0..n).map(|r| r % 2 == 0).collect(),
                (0..n).map(|r| r == n - 1).collect(),
            ];
            for elem in [1usize, 2, 4, 8] {
                for count in [0usize, 1, 3, 7, 16, 37, 100] {
                    for coll in REDUCE_COLLS {
                        for ip in &layouts {
                            for (staged, one_shot) in [(false, false), (false, true), (true, false)]
                            {
                                check_reduction(coll, n, elem, count, ip, staged, one_shot);
                            }
                        }
                    }
                }
            }
        }
    }

    fn check_reduction(
        coll: Coll,
        n: usize,
        elem: usize,
        count: usize,
        ip: &[bool],
        staged: bool,
        one_shot: bool,
    ) {
        let what = format!(
            "{coll:?} n={n} elem={elem} count={count} in_place={ip:?} staged={staged} one_shot={one_shot}"
        );
        let shape = |rank: usize| Shape {
            coll,
            nranks: n,
            rank,
            root: 0,
            block: count * elem,
            in_place: ip[rank],
            elem,
            staged,
            one_shot,
        };
        // Elements: (ranks combined as a bit mask, position in the reduced vector).
        let len = if coll == Coll::ReduceScatter {
            n * count
        } else {
            count
        };
        let mut bufs: Bufs = (0..n)
            .map(|r| {
                let input: Vec<_> = (0..len).map(|i| Some((1u64 << r, i))).collect();
                vec![input, vec![None; len], vec![None; len]]
            })
            .collect();
        // Staging runs before the ready barrier, on every rank.
        for (me, mine) in bufs.iter_mut().enumerate() {
            for p in stage(&shape(me)) {
                assert_eq!((p.src_rank, p.dst_rank), (me, me), "{what}");
                for k in 0..p.bytes / elem {
                    let v = mine[buf(ip[me], p.src_buf)][p.src / elem + k];
                    mine[buf(ip[me], p.dst_buf)][p.dst / elem + k] = v;
                }
            }
            assert_eq!(stage(&shape(me)).is_empty(), !staged || len == 0, "{what}");
        }
        let mut work: Vec<(Vec<Range>, Vec<Range>)> = Vec::new();
        for me in 0..n {
            let s = shape(me);
            let (mut reads, mut writes) = (Vec::new(), Vec::new());
            if let Some(f) = fold(&s) {
                assert_eq!(f.bytes % elem, 0, "{what}");
                assert_eq!(f.dst % elem, 0, "{what}");
                assert_eq!(f.src_buf == Buf::Scratch, staged, "{what}");
                for &(r, off) in &f.srcs {
                    reads.push(((r, buf(ip[r], f.src_buf)), off / elem, f.bytes / elem));
                }
                writes.push(((me, buf(ip[me], f.dst_buf)), f.dst / elem, f.bytes / elem));
                let mut ranks: Vec<usize> = f.srcs.iter().map(|x| x.0).collect();
                ranks.sort();
                assert_eq!(ranks, (0..n).collect::<Vec<_>>(), "{what}: every rank once");
            }
            for (_, p) in copies(&s) {
                reads.push((
                    (p.src_rank, buf(ip[p.src_rank], p.src_buf)),
                    p.src / elem,
                    p.bytes / elem,
                ));
                writes.push((
                    (p.dst_rank, buf(ip[p.dst_rank], p.dst_buf)),
                    p.dst / elem,
                    p.bytes / elem,
                ));
            }
            work.push((reads, writes));
        }
        let overlap = |a: &Range, b: &Range| {
            a.0 == b.0 && a.1 < b.1 + b.2 && b.1 < a.1 + a.2 && a.2 > 0 && b.2 > 0
        };
        for i in 0..n {
            for j in 0..n {
                if i == j {
                    continue;
                }
                for w in &work[i].1 {
                    for x in work[j].0.iter().chain(&work[j].1) {
                        assert!(
                            !overlap(w, x),
                            "{what}: rank {i} writes {w:?} while rank {j} touches {x:?}"
                        );
                    }
                }
            }
        }
        // Run each rank's stream in turn (no cross-rank hazards: any order is the same).
        for me in 0..n {
            let s = shape(me);
            if let Some(f) = fold(&s) {
                let dstb = buf(ip[me], f.dst_buf);
                let (d, m) = (f.dst / elem, f.bytes / elem);
                for k in 0..m {
                    let get = |bufs: &Bufs, (r, off): (usize, usize)| {
                        bufs[r][buf(ip[r], f.src_buf)][off / elem + k]
                    };
                    // As comm.rs issues it: dst = s0 op s1, then dst = dst op s_k.
                    let mut acc = get(&bufs, f.srcs[0]);
                    for (idx, &src) in f.srcs.iter().enumerate().skip(1) {
                        let a = if idx == 1 { acc } else { bufs[me][dstb][d + k] };
                        let b = get(&bufs, src);
                        let (Some((ma, pa)), Some((mb, pb))) = (a, b) else {
                            panic!("{what}: rank {me} folds an unwritten element")
                        };
                        assert_eq!(pa, pb, "{what}: rank {me} combines different positions");
                        assert_eq!(ma & mb, 0, "{what}: rank {me} combines a rank twice");
                        acc = Some((ma | mb, pa));
                        bufs[me][dstb][d + k] = acc;
                    }
                    if f.srcs.len() == 1 {
                        bufs[me][dstb][d + k] = acc;
                    }
                }
            }
            for (_, p) in copies(&s) {
                for k in 0..p.bytes / elem {
                    let v = bufs[p.src_rank][buf(ip[p.src_rank], p.src_buf)][p.src / elem + k];
                    bufs[p.dst_rank][buf(ip[p.dst_rank], p.dst_buf)][p.dst / elem + k] = v;
                }
            }
        }
        // After the complete barrier: the post copies.
        for (me, mine) in bufs.iter_mut().enumerate() {
            for p in post(&shape(me)) {
                assert_eq!((p.src_rank, p.dst_rank), (me, me), "{what}");
                for k in 0..p.bytes / elem {
                    let v = mine[buf(ip[me], p.src_buf)][p.src / elem + k];
                    mine[buf(ip[me], p.dst_buf)][p.dst / elem + k] = v;
                }
            }
        }
        let all = (1u64 << n) - 1;
        for (r, b) in bufs.iter().enumerate() {
            let out = &b[buf(ip[r], Buf::Recv)];
            let (at, base) = match (coll, ip[r]) {
                (Coll::ReduceScatter, true) => (r * count, r * count),
                (Coll::ReduceScatter, false) => (0, r * count),
                _ => (0, 0),
            };
            for k in 0..count {
                assert_eq!(
                    out[at + k],
                    Some((all, base + k)),
                    "{what}: rank {r} element {k}"
                );
            }
        }
    }

    /// Every copy collective on 1–5 ranks, every root, on windows and staged,
    /// in place on all, none or some of the ranks: no rank writes what another
    /// reads or writes between the barriers, and every rank ends with NCCL's
    /// result in its own layout.
    #[test]
    fn copy_collectives_with_ranks_in_place_or_not() {
        for n in 1..=5usize {
            let layouts: [Vec<bool>; 4] = [
                vec![false; n],
                vec![true; n],
                (0..n).map(|r| r % 2 == 0).collect(),
                (0..n).map(|r| r == n - 1).collect(),
            ];
            for coll in COLLS {
                for root in 0..n {
                    for ip in &layouts {
                        for staged in [false, true] {
                            // alltoall runs staged only (select::route).
                            if coll == Coll::AllToAll && !staged {
                                continue;
                            }
                            check_copies(coll, n, root, ip, staged);
                        }
                    }
                }
            }
        }
    }

    fn check_copies(coll: Coll, n: usize, root: usize, ip: &[bool], staged: bool) {
        const B: usize = 3;
        let what = format!("{coll:?} n={n} root={root} in_place={ip:?} staged={staged}");
        let shape = |rank: usize| Shape {
            coll,
            nranks: n,
            rank,
            root,
            block: B,
            in_place: ip[rank],
            elem: 1,
            staged,
            one_shot: false,
        };
        // Bytes: Some((rank, block, byte)) of an input; None: untouched.
        type Cell = Option<(usize, usize, usize)>;
        let mut bufs: Vec<Vec<Vec<Cell>>> = vec![vec![vec![None; n * B]; 3]; n];
        for (me, mine) in bufs.iter_mut().enumerate() {
            let b = buf(ip[me], Buf::Send);
            let mut put = |at: usize, blk: usize| {
                for k in 0..B {
                    mine[b][at + k] = Some((me, blk, k));
                }
            };
            match coll {
                Coll::AllGather if ip[me] => put(me * B, 0),
                Coll::Gather if ip[me] && me == root => put(me * B, 0),
                Coll::AllGather | Coll::Gather => put(0, 0),
                Coll::Broadcast if me == root => put(0, 0),
                Coll::AllToAll => (0..n).for_each(|p| put(p * B, p)),
                Coll::Scatter if me == root => (0..n).for_each(|p| put(p * B, p)),
                _ => {}
            }
        }
        for (me, mine) in bufs.iter_mut().enumerate() {
            for p in stage(&shape(me)) {
                for k in 0..p.bytes {
                    let v = mine[buf(ip[me], p.src_buf)][p.src + k];
                    mine[buf(ip[me], p.dst_buf)][p.dst + k] = v;
                }
            }
        }
        let work: Vec<Vec<Push>> = (0..n)
            .map(|me| copies(&shape(me)).into_iter().map(|x| x.1).collect())
            .collect();
        let range =
            |rank: usize, b: Buf, at: usize, len: usize| ((rank, buf(ip[rank], b)), at, len);
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                for w in &work[i] {
                    let wr = range(w.dst_rank, w.dst_buf, w.dst, w.bytes);
                    for x in &work[j] {
                        for t in [
                            range(x.src_rank, x.src_buf, x.src, x.bytes),
                            range(x.dst_rank, x.dst_buf, x.dst, x.bytes),
                        ] {
                            let overlap = wr.0 == t.0 && wr.1 < t.1 + t.2 && t.1 < wr.1 + wr.2;
                            assert!(
                                !overlap,
                                "{what}: rank {i} writes {wr:?} while rank {j} touches {t:?}"
                            );
                        }
                    }
                }
            }
        }
        for w in work.iter().flatten() {
            for k in 0..w.bytes {
                let v = bufs[w.src_rank][buf(ip[w.src_rank], w.src_buf)][w.src + k];
                bufs[w.dst_rank][buf(ip[w.dst_rank], w.dst_buf)][w.dst + k] = v;
            }
        }
        for (r, b) in bufs.iter().enumerate() {
            let out = &b[buf(ip[r], Buf::Recv)];
            let want = |at: usize, rank: usize, blk: usize| {
                for k in 0..B {
                    assert_eq!(
                        out[at + k],
                        Some((rank, blk, k)),
                        "{what}: rank {r} byte {}",
                        at + k
                    );
                }
            };
            match coll {
                Coll::AllGather => (0..n).for_each(|q| want(q * B, q, 0)),
                Coll::Broadcast => want(0, root, 0),
                Coll::AllToAll => (0..n).for_each(|p| want(p * B, p, r)),
                Coll::Gather if r == root => (0..n).for_each(|q| want(q * B, q, 0)),
                Coll::Scatter => want(if ip[r] && r == root { r * B } else { 0 }, root, r),
                _ => {}
            }
        }
    }
}
