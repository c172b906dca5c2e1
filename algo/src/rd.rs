//! Recursive doubling all-reduce: log2(n) exchanges of the whole vector,
//! latency-optimal for small messages. Non-powers of two fold the first
//! 2·(n − p) ranks in pairs first (p the largest power of two ≤ n) and hand
//! the result back at the end. Every exchange combines the same two values
//! on both sides, so every rank ends with bitwise identical floats.

use super::ring::segments;
use super::*;
use Buf::{Recv, Scratch, Send};

pub(crate) fn all_reduce(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let (poff, plen) = a.part.range(a.count);
    let mut s = Schedule::default();
    let p = if n == 0 {
        1
    } else {
        1usize << (usize::BITS - 1 - n.leading_zeros())
    };
    let rem = n - p;
    // Rank in the power-of-two group (None: folded away).
    let vrank = if r < 2 * rem {
        (r % 2 == 1).then_some(r / 2)
    } else {
        Some(r - rem)
    };
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    for (soff, slen) in segments(plen, a.chunk) {
        let send = Region::new(Send, poff + soff, slen);
        let out = Region::new(Recv, poff + soff, slen);
        let inc = Region::new(Scratch, 0, slen);
        s.scratch = s.scratch.max(slen);
        if n == 1 {
            s.push(Stage {
                locals: vec![
                    Local::Copy {
                        dst: out,
                        src: send,
                    },
                    Local::Finish { dst: out },
                ],
                ..Stage::default()
            });
            continue;
        }
        let Some(v) = vrank else {
            // Folded: give our input to the odd neighbour, get the result back.
            s.push(Stage {
                sends: vec![Xfer {
                    peer: r + 1,
                    region: send,
                }],
                ..Stage::default()
            });
            s.push(Stage {
                recvs: vec![Xfer {
                    peer: r + 1,
                    region: out,
                }],
                ..Stage::default()
            });
            continue;
        };
        let mut cur = send;
        if r < 2 * rem {
            s.push(Stage {
                recvs: vec![Xfer {
                    peer: r - 1,
                    region: inc,
                }],
                locals: vec![Local::Reduce {
                    dst: out,
                    a: send,
                    b: inc,
                }],
                ..Stage::default()
            });
            cur = out;
        }
        let mut mask = 1;
        while mask < p {
            let peer = real(v ^ mask);
            s.push(Stage {
                sends: vec![Xfer { peer, region: cur }],
                recvs: vec![Xfer { peer, region: inc }],
                locals: vec![Local::Reduce {
                    dst: out,
                    a: cur,
                    b: inc,
                }],
            });
            cur = out;
            mask <<= 1;
        }
        // p ≥ 2, so the last stage is an exchange: finish right after its reduction.
        if let Some(st) = s.stages.last_mut() {
            st.locals.push(Local::Finish { dst: out });
        }
        if r < 2 * rem {
            s.push(Stage {
                sends: vec![Xfer {
                    peer: r - 1,
                    region: out,
                }],
                ..Stage::default()
            });
        }
    }
    s
}
