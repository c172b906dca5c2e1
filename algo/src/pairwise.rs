//! All-to-all(v), gather and scatter on the quadratic peer schedule of
//! NCCL's p2p setup: round i pairs every rank with the peer `delta_i` to its
//! right for sending and `delta_i` to its left for receiving, where `delta_i`
//! enumerates `(i² + i)/2 mod 2^k` skipping values ≥ n — so each round has
//! exactly one send and one receive per rank and every pair meets once.
//! `Pairwise` runs one round per stage (bounded concurrency); `Direct` posts
//! every round in one stage (one round of latency).

use super::*;
use Buf::{Recv, Send};

/// The peer delta of every round, `n` rounds (round 0 has delta 0: self).
pub fn quadratic_deltas(n: usize) -> Vec<usize> {
    let pow2 = n.max(1).next_power_of_two() as u128;
    (0..pow2)
        .map(|i| ((i * i + i) / 2 % pow2) as usize)
        .filter(|&d| d < n)
        .collect()
}

/// (offset, len) of peer `p`'s block on the send and the receive side.
fn blocks(a: &CollArgs, p: usize) -> ((usize, usize), (usize, usize)) {
    let side = |counts: &[usize], displs: &[usize]| {
        let (o, l) = a.part.range(counts[p]);
        (displs[p] + o, l)
    };
    match a.v {
        Some(v) if a.kind == CollKind::AllToAllV => (
            side(&v.send_counts, &v.send_displs),
            side(&v.recv_counts, &v.recv_displs),
        ),
        _ => {
            let (o, l) = a.part.range(a.count);
            ((p * a.count + o, l), (p * a.count + o, l))
        }
    }
}

pub(crate) fn all_to_all(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let mut s = Schedule::default();
    let mut one = Stage::default();
    for d in quadratic_deltas(n) {
        let to = (r + d) % n;
        let from = (r + n - d) % n;
        let ((so, sl), _) = blocks(a, to);
        let (_, (ro, rl)) = blocks(a, from);
        let send = Region::new(Send, so, sl);
        let recv = Region::new(Recv, ro, rl);
        if d == 0 {
            one.locals.push(Local::Copy {
                dst: recv,
                src: send,
            });
            continue;
        }
        let st = if a.algo == Algo::Direct {
            &mut one
        } else {
            &mut Stage::default()
        };
        st.sends.push(Xfer {
            peer: to,
            region: send,
        });
        st.recvs.push(Xfer {
            peer: from,
            region: recv,
        });
        if a.algo != Algo::Direct {
            let st = std::mem::take(st);
            s.push(st);
        }
    }
    s.push(one);
    s
}

pub(crate) fn gather(a: &CollArgs) -> Schedule {
    rooted(a, true)
}

pub(crate) fn scatter(a: &CollArgs) -> Schedule {
    rooted(a, false)
}

/// Gather (`into_root`) or scatter: the root exchanges block `p` with every
/// rank `p` — all at once (`Direct`) or one peer per stage (`Pairwise`).
fn rooted(a: &CollArgs, into_root: bool) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let (o, l) = a.part.range(a.count);
    let (mine_buf, blocks_buf) = if into_root {
        (Send, Recv)
    } else {
        (Recv, Send)
    };
    let mine = Region::new(mine_buf, o, l);
    // Data leaving this rank is a send, arriving data a receive.
    let add = |st: &mut Stage, x: Xfer, outgoing: bool| {
        if outgoing {
            st.sends.push(x)
        } else {
            st.recvs.push(x)
        }
    };
    let mut s = Schedule::default();
    if r != a.root {
        let mut st = Stage::default();
        add(
            &mut st,
            Xfer {
                peer: a.root,
                region: mine,
            },
            into_root,
        );
        s.push(st);
        return s;
    }
    let blk = |p: usize| Region::new(blocks_buf, p * a.count + o, l);
    let (dst, src) = if into_root {
        (blk(r), mine)
    } else {
        (mine, blk(r))
    };
    let mut one = Stage {
        locals: vec![Local::Copy { dst, src }],
        ..Stage::default()
    };
    for d in 1..n {
        let p = (r + d) % n;
        let x = Xfer {
            peer: p,
            region: blk(p),
        };
        if a.algo == Algo::Direct {
            add(&mut one, x, !into_root);
        } else {
            let mut st = Stage::default();
            add(&mut st, x, !into_root);
            s.push(st);
        }
    }
    s.push(one);
    s
}
