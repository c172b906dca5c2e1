//! Ring algorithms: all-reduce as reduce-scatter + all-gather, and the ring
//! all-gather and reduce-scatter. Bandwidth-optimal: every rank sends
//! (n-1)/n of the data per phase, to its right neighbour only.
//!
//! Long parts are cut into segments of `chunk × nranks` elements, each
//! running a whole ring, which bounds scratch to one block of a segment.

use super::*;
use Buf::{Recv, Scratch, Send};

/// `(offset, len)` of the segments of `len` elements, `seg` at a time.
pub(crate) fn segments(len: usize, seg: usize) -> impl Iterator<Item = (usize, usize)> {
    let seg = seg.max(1);
    (0..len.div_ceil(seg)).map(move |i| (i * seg, seg.min(len - i * seg)))
}

/// Block `i` of `n` nearly equal blocks of `len` elements: `(offset, len)`.
pub(crate) fn block(len: usize, i: usize, n: usize) -> (usize, usize) {
    Part { index: i, of: n }.range(len)
}

fn neighbours(a: &CollArgs) -> (usize, usize) {
    let n = a.nranks;
    ((a.rank + 1) % n, (a.rank + n - 1) % n)
}

/// Ring all-reduce: reduce-scatter then all-gather, per segment.
pub(crate) fn all_reduce(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let (poff, plen) = a.part.range(a.count);
    let mut s = Schedule::default();
    if n == 1 {
        let all = Region::new(Recv, poff, plen);
        s.push(Stage {
            locals: vec![
                Local::Copy {
                    dst: all,
                    src: Region::new(Send, poff, plen),
                },
                Local::Finish { dst: all },
            ],
            ..Stage::default()
        });
        return s;
    }
    let (right, left) = neighbours(a);
    let seg = a.chunk.saturating_mul(n);
    for (soff, slen) in segments(plen, seg) {
        let base = poff + soff;
        let blk = |buf, i| {
            let (o, l) = block(slen, i, n);
            Region::new(buf, base + o, l)
        };
        s.scratch = s.scratch.max(slen.div_ceil(n));
        // Reduce-scatter: at step k, send block r-k-1 (own input at k = 0,
        // the partial reduced at step k-1 after), receive block r-k-2.
        for k in 0..n - 1 {
            let sb = (r + 2 * n - k - 1) % n;
            let rb = (r + 2 * n - k - 2) % n;
            let src = if k == 0 { blk(Send, sb) } else { blk(Recv, sb) };
            let inc = Region::new(Scratch, 0, blk(Recv, rb).len);
            let dst = blk(Recv, rb);
            let mut locals = vec![Local::Reduce {
                dst,
                a: blk(Send, rb),
                b: inc,
            }];
            if k == n - 2 {
                locals.push(Local::Finish { dst });
            }
            s.push(Stage {
                sends: vec![Xfer {
                    peer: right,
                    region: src,
                }],
                recvs: vec![Xfer {
                    peer: left,
                    region: inc,
                }],
                locals,
            });
        }
        // All-gather of the reduced blocks, starting with our own (block r).
        for k in 0..n - 1 {
            let sb = (r + n - k) % n;
            let rb = (r + 2 * n - k - 1) % n;
            s.push(Stage {
                sends: vec![Xfer {
                    peer: right,
                    region: blk(Recv, sb),
                }],
                recvs: vec![Xfer {
                    peer: left,
                    region: blk(Recv, rb),
                }],
                locals: vec![],
            });
        }
    }
    s
}

/// Ring all-gather: n-1 steps, each forwarding the block received last.
pub(crate) fn all_gather(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let (poff, plen) = a.part.range(a.count);
    let mut s = Schedule::default();
    let (right, left) = neighbours(a);
    // No scratch and nothing to reduce: whole blocks, one message per step.
    for (soff, slen) in segments(plen, plen.max(1)) {
        let off = poff + soff;
        let blk = |i: usize| Region::new(Recv, i * a.count + off, slen);
        let own = Region::new(Send, off, slen);
        if n == 1 {
            s.push(Stage {
                locals: vec![Local::Copy {
                    dst: blk(r),
                    src: own,
                }],
                ..Stage::default()
            });
            continue;
        }
        for k in 0..n - 1 {
            let src = if k == 0 { own } else { blk((r + n - k) % n) };
            let rb = (r + 2 * n - k - 1) % n;
            let locals = if k == 0 {
                vec![Local::Copy {
                    dst: blk(r),
                    src: own,
                }]
            } else {
                vec![]
            };
            s.push(Stage {
                sends: vec![Xfer {
                    peer: right,
                    region: src,
                }],
                recvs: vec![Xfer {
                    peer: left,
                    region: blk(rb),
                }],
                locals,
            });
        }
    }
    s
}

/// Ring reduce-scatter: the partial of block b travels around the ring,
/// each rank adding its contribution, and ends complete on rank b.
pub(crate) fn reduce_scatter(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let (poff, plen) = a.part.range(a.count);
    let mut s = Schedule::default();
    let (right, left) = neighbours(a);
    for (soff, slen) in segments(plen, a.chunk) {
        let off = poff + soff;
        let blk = |i: usize| Region::new(Send, i * a.count + off, slen);
        let out = Region::new(Recv, off, slen);
        if n == 1 {
            s.push(Stage {
                locals: vec![
                    Local::Copy {
                        dst: out,
                        src: blk(0),
                    },
                    Local::Finish { dst: out },
                ],
                ..Stage::default()
            });
            continue;
        }
        // Scratch: [incoming | running partial].
        let inc = Region::new(Scratch, 0, slen);
        let acc = Region::new(Scratch, slen, slen);
        s.scratch = s.scratch.max(2 * slen);
        for k in 0..n - 1 {
            let sb = (r + 2 * n - k - 1) % n;
            let rb = (r + 2 * n - k - 2) % n;
            let src = if k == 0 { blk(sb) } else { acc };
            let last = k == n - 2;
            let dst = if last { out } else { acc };
            let mut locals = vec![Local::Reduce {
                dst,
                a: blk(rb),
                b: inc,
            }];
            if last {
                locals.push(Local::Finish { dst });
            }
            s.push(Stage {
                sends: vec![Xfer {
                    peer: right,
                    region: src,
                }],
                recvs: vec![Xfer {
                    peer: left,
                    region: inc,
                }],
                locals,
            });
        }
    }
    s
}
