//! A collective as one exchange kernel (sans-IO): which mode, strides and
//! buffers the LL kernel ([`super::ll`]) and the Simple kernel
//! ([`super::simple`]) get for it. Neither kernel needs windows or staging —
//! each rank writes its data into its peers' mapped areas and reads its own —
//! so a plugin (ce's `select::route`) picks them by size alone.
//!
//! | collective | mode | input (rank `me`) | to rank `q` | rank `r`'s data lands at |
//! |---|---|---|---|---|
//! | all_reduce | fold | send | the whole input | folded into recv |
//! | reduce_scatter | fold | send | block `q` | folded into recv (in place: recv + me·block) |
//! | all_gather | gather | send (in place: recv + me·block) | the input | recv + r·block |
//! | alltoall | gather | send | block `q` | recv + r·block |
//! | broadcast | broadcast | the root's send | the root's input, else an ack | recv |
//! | scatter | broadcast | the root's send (in place: recv) | the root's block `q`, else an ack | recv (in place: the root's recv + root·block) |
//! | gather | root gather | send (in place: the root's recv + root·block) | the input to the root, else an ack | the root's recv + r·block |
//!
//! In place the rooted ones keep NCCL's layout at the root and the core's
//! elsewhere: a non-root's one buffer holds its own block at its start.
//!
//! In place (one buffer, `FX_COLL_IN_PLACE`) the core passes the buffer as
//! both send and recv, in NCCL's layout; the kernel reads each line before
//! it writes it.

use super::ll::{MODE_BROADCAST, MODE_FOLD, MODE_GATHER, MODE_ROOT_GATHER};
use crate::collective::Coll;

/// What the kernel moves for one call on one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moves {
    /// `MODE_*`.
    pub mode: i32,
    /// This rank's input.
    pub input: u64,
    /// This rank's output.
    pub output: u64,
    /// Bytes between the input's segments for consecutive ranks.
    pub send_stride: u64,
    /// Bytes between consecutive ranks' places in the output.
    pub out_stride: u64,
}

impl Moves {
    /// Whether rank `me`'s kernel writes output bytes that it also sends
    /// from its input (all_reduce and alltoall in place): the Simple kernel,
    /// whose sending and receiving blocks run apart, then writes a chunk only
    /// after it was sent. `sends`: whether the rank sends data (a broadcast's
    /// non-roots do not).
    pub fn overlap(&self, me: usize, nranks: usize, block: usize, sends: bool) -> bool {
        let b = block as u64;
        let seg = |base: u64, stride: u64, r: usize| {
            let at = base + r as u64 * stride;
            (at, at + b)
        };
        let others = (0..nranks).filter(|&r| r != me);
        let sent: Vec<(u64, u64)> = if sends {
            others
                .clone()
                .map(|q| seg(self.input, self.send_stride, q))
                .collect()
        } else {
            Vec::new()
        };
        let written: Vec<(u64, u64)> = match self.mode {
            MODE_GATHER => others
                .map(|r| seg(self.output, self.out_stride, r))
                .collect(),
            // Only the root writes (it sends acks alone, so `sends` is false there).
            MODE_ROOT_GATHER if sends => Vec::new(),
            MODE_ROOT_GATHER => others
                .map(|r| seg(self.output, self.out_stride, r))
                .collect(),
            // The root writes its own input only where it is not its output.
            MODE_BROADCAST if sends && self.output == self.input => Vec::new(),
            _ => vec![seg(self.output, 0, 0)],
        };
        sent.iter()
            .any(|&(s0, s1)| written.iter().any(|&(w0, w1)| s0 < w1 && w0 < s1))
    }
}

/// The kernel's moves for `coll` on rank `me` (the call's `root`) with
/// blocks of `block` bytes (`send`, `recv`: the descriptor's buffers), or
/// `None` for a collective the kernel does not run.
pub fn moves(
    coll: Coll,
    me: usize,
    root: usize,
    block: usize,
    in_place: bool,
    send: u64,
    recv: u64,
) -> Option<Moves> {
    let b = block as u64;
    let own = me as u64 * b;
    // In place, a rooted collective's non-root has its block at the start.
    let rooted_own = if me == root { own } else { 0 };
    let m = |mode, input, output, send_stride, out_stride| Moves {
        mode,
        input,
        output,
        send_stride,
        out_stride,
    };
    Some(match coll {
        Coll::AllReduce => m(MODE_FOLD, send, recv, 0, 0),
        Coll::ReduceScatter if in_place => m(MODE_FOLD, recv, recv + own, b, 0),
        Coll::ReduceScatter => m(MODE_FOLD, send, recv, b, 0),
        Coll::AllGather if in_place => m(MODE_GATHER, recv + own, recv, 0, b),
        Coll::AllGather => m(MODE_GATHER, send, recv, 0, b),
        Coll::AllToAll => m(MODE_GATHER, send, recv, b, b),
        Coll::Broadcast => m(MODE_BROADCAST, send, recv, 0, 0),
        // The root's block q goes to rank q: a broadcast whose root sends
        // each peer its own segment. In place, NCCL's layout (the buffer
        // holds every block; this rank's is at recv + me·block).
        Coll::Scatter if in_place => m(MODE_BROADCAST, recv, recv + rooted_own, b, 0),
        Coll::Scatter => m(MODE_BROADCAST, send, recv, b, 0),
        Coll::Gather if in_place => m(MODE_ROOT_GATHER, recv + rooted_own, recv, 0, b),
        Coll::Gather => m(MODE_ROOT_GATHER, send, recv, 0, b),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the kernel's protocol on host vectors: every rank's segment for
    /// every peer, then each rank's output as the kernel writes it (fold by
    /// wrapping u8 sums in rank order).
    fn run(coll: Coll, n: usize, block: usize, in_place: bool, root: usize) -> Vec<Vec<u8>> {
        // One address space: rank r's send at r·SPAN, recv at r·SPAN + SPAN/2.
        const SPAN: usize = 1 << 12;
        let mut mem = vec![0u8; n * SPAN];
        let inputs = |r: usize, i: usize| (r * 31 + i * 7 + 1) as u8;
        let in_len = match coll {
            Coll::ReduceScatter | Coll::AllToAll | Coll::Scatter => n * block,
            _ => block,
        };
        let recv_len = match coll {
            Coll::AllGather | Coll::AllToAll | Coll::Gather => n * block,
            Coll::ReduceScatter | Coll::Scatter if in_place => n * block,
            _ => block,
        };
        let mv: Vec<Moves> = (0..n)
            .map(|r| {
                let (send, recv) = ((r * SPAN) as u64, (r * SPAN + SPAN / 2) as u64);
                let send = if in_place { recv } else { send };
                moves(coll, r, root, block, in_place, send, recv).unwrap()
            })
            .collect();
        for (r, m) in mv.iter().enumerate() {
            // In place, the input lies in the receive buffer at the input address.
            for i in 0..in_len {
                mem[m.input as usize + i] = inputs(r, i);
            }
        }
        let seg = |r: usize, q: usize, mem: &[u8]| -> Vec<u8> {
            let a = (mv[r].input + q as u64 * mv[r].send_stride) as usize;
            mem[a..a + block].to_vec()
        };
        // Every segment is in flight before anyone writes (the kernel sends first).
        let sent: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|r| (0..n).map(|q| seg(r, q, &mem)).collect())
            .collect();
        for (me, m) in mv.iter().enumerate() {
            match m.mode {
                MODE_FOLD => {
                    let v: Vec<u8> = (0..block)
                        .map(|i| (0..n).fold(0u8, |a, r| a.wrapping_add(sent[r][me][i])))
                        .collect();
                    let o = m.output as usize;
                    mem[o..o + block].copy_from_slice(&v);
                }
                MODE_GATHER => {
                    for (r, from) in sent.iter().enumerate() {
                        let o = (m.output + r as u64 * m.out_stride) as usize;
                        mem[o..o + block].copy_from_slice(&from[me]);
                    }
                }
                // Only the root takes data; the others write nothing.
                MODE_ROOT_GATHER if me == root => {
                    for (r, from) in sent.iter().enumerate() {
                        let o = (m.output + r as u64 * m.out_stride) as usize;
                        mem[o..o + block].copy_from_slice(&from[me]);
                    }
                }
                MODE_ROOT_GATHER => {}
                _ => {
                    let o = m.output as usize;
                    mem[o..o + block].copy_from_slice(&sent[root][me]);
                }
            }
        }
        (0..n)
            .map(|r| {
                let o = r * SPAN + SPAN / 2;
                mem[o..o + recv_len].to_vec()
            })
            .collect()
    }

    /// The kernel's moves give NCCL's results, in place and not, on 1–5 ranks.
    #[test]
    fn moves_give_nccl_results() {
        let inputs = |r: usize, i: usize| (r * 31 + i * 7 + 1) as u8;
        for n in 1..=5 {
            for block in [1, 8, 13] {
                for in_place in [false, true] {
                    let sum = |i: usize| (0..n).fold(0u8, |a, r| a.wrapping_add(inputs(r, i)));
                    let ar = run(Coll::AllReduce, n, block, in_place, 0);
                    let rs = run(Coll::ReduceScatter, n, block, in_place, 0);
                    let ag = run(Coll::AllGather, n, block, in_place, 0);
                    let a2a = run(Coll::AllToAll, n, block, in_place, 0);
                    let root = n - 1;
                    let bc = run(Coll::Broadcast, n, block, in_place, root);
                    for me in 0..n {
                        let what = format!("n={n} block={block} in_place={in_place} rank {me}");
                        assert_eq!(ar[me], (0..block).map(sum).collect::<Vec<_>>(), "{what}");
                        let mine: Vec<u8> = (0..block).map(|i| sum(me * block + i)).collect();
                        let rs_out = if in_place {
                            &rs[me][me * block..(me + 1) * block]
                        } else {
                            &rs[me][..]
                        };
                        assert_eq!(rs_out, &mine[..], "{what}");
                        let gathered: Vec<u8> = (0..n)
                            .flat_map(|r| (0..block).map(move |i| inputs(r, i)))
                            .collect();
                        assert_eq!(ag[me], gathered, "{what}");
                        let exchanged: Vec<u8> = (0..n)
                            .flat_map(|r| (0..block).map(move |i| inputs(r, me * block + i)))
                            .collect();
                        assert_eq!(a2a[me], exchanged, "{what}");
                        let rooted: Vec<u8> = (0..block).map(|i| inputs(root, i)).collect();
                        assert_eq!(bc[me], rooted, "{what}");
                        // Scatter: the root's block `me`, at this rank's place.
                        let sc = run(Coll::Scatter, n, block, in_place, root);
                        let got = if in_place && me == root {
                            &sc[me][me * block..(me + 1) * block]
                        } else {
                            &sc[me][..block]
                        };
                        let part: Vec<u8> =
                            (0..block).map(|i| inputs(root, me * block + i)).collect();
                        assert_eq!(got, &part[..], "scatter {what}");
                        // Gather: every block at the root; the others' buffers untouched.
                        let g = run(Coll::Gather, n, block, in_place, root);
                        if me == root {
                            assert_eq!(g[me], gathered, "gather {what}");
                        } else if !in_place {
                            assert!(g[me].iter().all(|&x| x == 0), "gather {what}");
                        }
                    }
                }
            }
        }
    }

    /// Only all_reduce and alltoall in place write what they send.
    #[test]
    fn overlap_is_in_place_all_reduce_and_alltoall() {
        let (send, recv) = (0x1000u64, 0x9000u64);
        for n in 2..=4 {
            for me in 0..n {
                for coll in [
                    Coll::AllReduce,
                    Coll::ReduceScatter,
                    Coll::AllGather,
                    Coll::AllToAll,
                    Coll::Broadcast,
                    Coll::Scatter,
                    Coll::Gather,
                ] {
                    for in_place in [false, true] {
                        let s = if in_place { recv } else { send };
                        let m = moves(coll, me, 0, 64, in_place, s, recv).unwrap();
                        let sends = match coll {
                            Coll::Broadcast | Coll::Scatter => me == 0,
                            Coll::Gather => me != 0,
                            _ => true,
                        };
                        let want = in_place && matches!(coll, Coll::AllReduce | Coll::AllToAll);
                        assert_eq!(
                            m.overlap(me, n, 64, sends),
                            want,
                            "{coll:?} n={n} me={me} in_place={in_place}"
                        );
                    }
                }
            }
        }
        // One rank sends nothing: nothing to wait for.
        let m = moves(Coll::AllReduce, 0, 0, 64, true, recv, recv).unwrap();
        assert!(!m.overlap(0, 1, 64, true));
    }

    #[test]
    fn only_the_kernels_collectives() {
        assert_eq!(moves(Coll::Reduce, 0, 0, 8, false, 1, 2), None);
    }
}
