//! Broadcast and reduce on a pipelined tree rooted at the root: a chain
//! (bandwidth: every link carries the data once, segments overlap along
//! the chain), a binomial tree (log2(n) depth for many ranks) or a star
//! (direct: one hop, for few ranks or small messages).
//!
//! Segment k moves one hop per stage, so a rank receives segment k while it
//! forwards segment k-1.

use super::ring::segments;
use super::*;
use Buf::{Recv, Scratch, Send};

/// (parent, children) of this rank in the tree of `a.algo`.
fn shape(a: &CollArgs) -> (Option<usize>, Vec<usize>) {
    let n = a.nranks;
    let v = (a.rank + n - a.root) % n; // rank relative to the root
    let real = |x: usize| (x + a.root) % n;
    match a.algo {
        Algo::Chain => (
            (v > 0).then(|| real(v - 1)),
            (v + 1 < n).then(|| real(v + 1)).into_iter().collect(),
        ),
        Algo::Tree => {
            // Binomial: parent clears the lowest set bit; children add the
            // powers of two below it, biggest subtree first.
            let low = if v == 0 {
                n.next_power_of_two()
            } else {
                v & v.wrapping_neg()
            };
            let mut kids = Vec::new();
            let mut m = low >> 1;
            while m > 0 {
                if v + m < n {
                    kids.push(real(v + m));
                }
                m >>= 1;
            }
            ((v > 0).then(|| real(v & (v - 1))), kids)
        }
        _ => {
            if v == 0 {
                (None, (1..n).map(real).collect())
            } else {
                (Some(a.root), Vec::new())
            }
        }
    }
}

pub(crate) fn broadcast(a: &CollArgs) -> Schedule {
    let (poff, plen) = a.part.range(a.count);
    let (parent, kids) = shape(a);
    // A star has nothing to pipeline: one message per child (the transport
    // pipelines within it); chains and trees forward segment by segment.
    let seg = if a.algo == Algo::Direct {
        plen.max(1)
    } else {
        a.chunk
    };
    let segs: Vec<_> = segments(plen, seg).collect();
    let seg = |buf, k: usize| Region::new(buf, poff + segs[k].0, segs[k].1);
    let mut s = Schedule::default();
    match parent {
        None => {
            for k in 0..segs.len() {
                s.push(Stage {
                    sends: kids
                        .iter()
                        .map(|&c| Xfer {
                            peer: c,
                            region: seg(Send, k),
                        })
                        .collect(),
                    ..Stage::default()
                });
            }
            // The root's own copy rides with the last send: it delays no
            // segment, and a device runner runs it beside that transfer
            // (it touches nothing a send writes).
            let copy = Local::Copy {
                dst: Region::new(Recv, poff, plen),
                src: Region::new(Send, poff, plen),
            };
            match s.stages.last_mut() {
                Some(last) => last.locals.push(copy),
                // No children (one rank): the copy alone.
                None if plen > 0 => s.push(Stage {
                    locals: vec![copy],
                    ..Stage::default()
                }),
                None => {}
            }
        }
        Some(p) => {
            for k in 0..=segs.len() {
                let mut st = Stage::default();
                if k < segs.len() {
                    st.recvs.push(Xfer {
                        peer: p,
                        region: seg(Recv, k),
                    });
                }
                if k > 0 {
                    st.sends = kids
                        .iter()
                        .map(|&c| Xfer {
                            peer: c,
                            region: seg(Recv, k - 1),
                        })
                        .collect();
                }
                s.push(st);
            }
        }
    }
    s
}

pub(crate) fn reduce(a: &CollArgs) -> Schedule {
    let (poff, plen) = a.part.range(a.count);
    let (parent, kids) = shape(a);
    let segs: Vec<_> = segments(plen, a.chunk).collect();
    let width = segs.first().map_or(0, |s| s.1);
    let seg = |buf, k: usize| Region::new(buf, poff + segs[k].0, segs[k].1);
    // Scratch: one slot per child, then the running partial (non-roots).
    let slot = |j: usize, k: usize| Region::new(Scratch, j * width, segs[k].1);
    let acc = |k: usize| Region::new(Scratch, kids.len() * width, segs[k].1);
    let mut s = Schedule {
        scratch: (kids.len() + usize::from(parent.is_some() && !kids.is_empty())) * width,
        ..Schedule::default()
    };
    let is_root = parent.is_none();
    for k in 0..=segs.len() {
        let mut st = Stage::default();
        if k < segs.len() {
            st.recvs = kids
                .iter()
                .enumerate()
                .map(|(j, &c)| Xfer {
                    peer: c,
                    region: slot(j, k),
                })
                .collect();
            let dst = if is_root { seg(Recv, k) } else { acc(k) };
            if kids.is_empty() {
                if is_root {
                    st.locals.push(Local::Copy {
                        dst,
                        src: seg(Send, k),
                    });
                }
            } else {
                for j in 0..kids.len() {
                    let first = if j == 0 { seg(Send, k) } else { dst };
                    st.locals.push(Local::Reduce {
                        dst,
                        a: first,
                        b: slot(j, k),
                    });
                }
            }
            if is_root {
                st.locals.push(Local::Finish { dst });
            }
        }
        if let (Some(p), true) = (parent, k > 0) {
            // Leaves send their input directly; inner ranks their partial.
            let region = if kids.is_empty() {
                seg(Send, k - 1)
            } else {
                acc(k - 1)
            };
            st.sends.push(Xfer { peer: p, region });
        }
        s.push(st);
    }
    s
}
