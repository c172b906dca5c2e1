//! Direct all-gather and reduce-scatter: one stage in which every rank
//! exchanges with every other rank. One round of latency; for small messages
//! at modest rank counts.

use super::ring::segments;
use super::*;
use Buf::{Recv, Scratch, Send};

/// Peers other than `r`, nearest first on the right: r+1, r+2, …
fn others(r: usize, n: usize) -> impl Iterator<Item = usize> {
    (1..n).map(move |d| (r + d) % n)
}

pub(crate) fn all_gather(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let (poff, plen) = a.part.range(a.count);
    let mut s = Schedule::default();
    // No scratch: whole blocks (the transport pipelines long messages).
    for (soff, slen) in segments(plen, plen.max(1)) {
        let off = poff + soff;
        let own = Region::new(Send, off, slen);
        let blk = |i: usize| Region::new(Recv, i * a.count + off, slen);
        s.push(Stage {
            sends: others(r, n)
                .map(|p| Xfer {
                    peer: p,
                    region: own,
                })
                .collect(),
            // Receive from the left first: the peer that sends to us first.
            recvs: others(r, n)
                .map(|p| {
                    let q = (2 * r + n - p) % n;
                    Xfer {
                        peer: q,
                        region: blk(q),
                    }
                })
                .collect(),
            locals: vec![Local::Copy {
                dst: blk(r),
                src: own,
            }],
        });
    }
    s
}

pub(crate) fn reduce_scatter(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let (poff, plen) = a.part.range(a.count);
    let mut s = Schedule::default();
    for (soff, slen) in segments(plen, a.chunk) {
        let off = poff + soff;
        let blk = |i: usize| Region::new(Send, i * a.count + off, slen);
        let out = Region::new(Recv, off, slen);
        s.scratch = s.scratch.max((n - 1) * slen);
        let slot = |j: usize| Region::new(Scratch, j * slen, slen);
        let mut locals = Vec::with_capacity(n + 1);
        if n == 1 {
            locals.push(Local::Copy {
                dst: out,
                src: blk(r),
            });
        }
        for j in 0..n - 1 {
            let a_ = if j == 0 { blk(r) } else { out };
            locals.push(Local::Reduce {
                dst: out,
                a: a_,
                b: slot(j),
            });
        }
        locals.push(Local::Finish { dst: out });
        s.push(Stage {
            sends: others(r, n)
                .map(|p| Xfer {
                    peer: p,
                    region: blk(p),
                })
                .collect(),
            recvs: others(r, n)
                .enumerate()
                .map(|(j, p)| Xfer {
                    peer: (2 * r + n - p) % n,
                    region: slot(j),
                })
                .collect(),
            locals,
        });
    }
    s
}
