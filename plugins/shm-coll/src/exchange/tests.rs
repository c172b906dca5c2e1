//! Every collective at 1–5 ranks, every root, in and out of place, on threads
//! exchanging through channels, against results computed directly.

use super::*;
use ferrocx_sdk::PluginError;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

/// One rank's channels: a sender to every rank, a receiver from every rank.
struct Chan {
    to: Vec<Sender<Vec<u8>>>,
    from: Vec<Option<Receiver<Vec<u8>>>>,
    /// Payloads taken this call (kept alive until the call returns).
    held: Vec<Vec<u8>>,
    scratch: Vec<u64>,
    posted: Vec<usize>,
}

impl Wire for Chan {
    unsafe fn post(&mut self, peer: usize, data: *const u8, len: usize) -> PluginResult<()> {
        let v = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: the trait's contract.
            unsafe { std::slice::from_raw_parts(data, len) }.to_vec()
        };
        self.posted.push(peer);
        self.to[peer]
            .send(v)
            .map_err(|_| PluginError::internal("peer gone"))
    }

    fn take(&mut self, peer: usize, len: usize) -> PluginResult<*const u8> {
        let rx = self.from[peer].as_ref().expect("no channel from self");
        let v = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| PluginError::internal(format!("nothing from rank {peer}")))?;
        if v.len() != len {
            return Err(PluginError::invalid(format!(
                "rank {peer} sent {} bytes, expected {len}",
                v.len()
            )));
        }
        self.held.push(v);
        Ok(self.held.last().unwrap().as_ptr())
    }

    fn scratch(&mut self) -> *mut u8 {
        self.scratch.as_mut_ptr().cast()
    }
}

/// Channels for `n` ranks.
fn wires(n: usize, block: usize) -> Vec<Chan> {
    let mut tx: Vec<Vec<Option<Sender<Vec<u8>>>>> = (0..n).map(|_| vec![None; n]).collect();
    let mut rx: Vec<Vec<Option<Receiver<Vec<u8>>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    for (a, row) in tx.iter_mut().enumerate() {
        for (b, slot) in row.iter_mut().enumerate() {
            let (t, r) = channel();
            *slot = Some(t);
            rx[b][a] = Some(r);
        }
    }
    tx.into_iter()
        .zip(rx)
        .map(|(to, from)| Chan {
            to: to.into_iter().map(Option::unwrap).collect(),
            from,
            held: Vec::new(),
            scratch: vec![0; block.div_ceil(8)],
            posted: Vec::new(),
        })
        .collect()
}

/// Rank r's element i of its send buffer.
fn input(r: usize, i: usize) -> u32 {
    (r * 1000 + i * 7 + 1) as u32
}

/// The expected receive buffer of rank r (None: it receives nothing).
fn expected(coll: Coll, op: RedOp, c: usize, n: usize, r: usize, root: usize) -> Option<Vec<u32>> {
    let red = |i: usize| {
        let xs = (0..n).map(|q| input(q, i));
        match op {
            RedOp::Sum => xs.fold(0u32, u32::wrapping_add),
            RedOp::Max => xs.max().unwrap(),
            RedOp::Min => xs.min().unwrap(),
            RedOp::Prod => xs.fold(1u32, u32::wrapping_mul),
            RedOp::Avg => xs.fold(0u32, u32::wrapping_add) / n as u32,
        }
    };
    Some(match coll {
        Coll::AllReduce => (0..c).map(red).collect(),
        Coll::Reduce if r == root => (0..c).map(red).collect(),
        Coll::ReduceScatter => (0..c).map(|i| red(r * c + i)).collect(),
        Coll::Broadcast => (0..c).map(|i| input(root, i)).collect(),
        Coll::AllGather => (0..n * c).map(|i| input(i / c, i % c)).collect(),
        Coll::Gather if r == root => (0..n * c).map(|i| input(i / c, i % c)).collect(),
        Coll::AllToAll => (0..n * c).map(|i| input(i / c, r * c + i % c)).collect(),
        Coll::Scatter => (0..c).map(|i| input(root, r * c + i)).collect(),
        _ => return None,
    })
}

/// NCCL's in-place layouts.
#[derive(Clone, Copy)]
enum Layout {
    /// Separate buffers.
    Apart,
    /// One buffer for both.
    Same,
    /// The input is this rank's block of the output (all_gather, gather's root).
    SendAtBlock,
    /// The output is this rank's block of the input (reduce_scatter, scatter's root).
    RecvAtBlock,
}

fn layout(coll: Coll, in_place: bool, r: usize, root: usize) -> Layout {
    match coll {
        _ if !in_place => Layout::Apart,
        Coll::AllGather => Layout::SendAtBlock,
        Coll::Gather if r == root => Layout::SendAtBlock,
        Coll::ReduceScatter => Layout::RecvAtBlock,
        Coll::Scatter if r == root => Layout::RecvAtBlock,
        Coll::Gather | Coll::Scatter => Layout::Apart,
        _ => Layout::Same,
    }
}

/// Run one call on every rank; each rank's output afterwards.
fn run_all(
    coll: Coll,
    op: RedOp,
    c: usize,
    n: usize,
    root: usize,
    in_place: bool,
) -> Vec<Vec<u32>> {
    let block = c * 4;
    let ws = wires(n, block);
    let handles: Vec<_> = ws
        .into_iter()
        .enumerate()
        .map(|(r, mut w)| {
            std::thread::spawn(move || {
                let (se, re) = coll.buffer_bytes(c, n, r, root);
                let call = Call {
                    coll,
                    dtype: DataType::U32,
                    op,
                    rank: r,
                    nranks: n,
                    root,
                    block,
                };
                let input_vals: Vec<u32> = (0..se).map(|i| input(r, i)).collect();
                let poison = 0xdead_beefu32;
                let mut send = input_vals.clone();
                let mut buf = vec![poison; se.max(re)];
                // In place: the input laid out in the one buffer as NCCL says, the
                // pointers from `Call::in_place`, the output read where NCCL says.
                let (sp, rp, out): (*const u8, *mut u8, std::ops::Range<usize>) =
                    match layout(coll, in_place, r, root) {
                        Layout::Apart => (send.as_ptr().cast(), buf.as_mut_ptr().cast(), 0..re),
                        Layout::Same => {
                            buf[..se].copy_from_slice(&input_vals);
                            let (s, v) = call.in_place(buf.as_mut_ptr().cast());
                            (s, v, 0..re)
                        }
                        Layout::SendAtBlock => {
                            buf[r * c..r * c + se].copy_from_slice(&input_vals);
                            let (s, v) = call.in_place(buf.as_mut_ptr().cast());
                            (s, v, 0..re)
                        }
                        Layout::RecvAtBlock => {
                            buf[..se].copy_from_slice(&input_vals);
                            let (s, v) = call.in_place(buf.as_mut_ptr().cast());
                            (s, v, r * c..r * c + re)
                        }
                    };
                // SAFETY: buffers sized for the collective as above.
                unsafe { run(&call, sp, rp, &mut w) }.unwrap();
                // Everyone this rank posted to is a rank it talks to, once each.
                let mut posted = w.posted.clone();
                posted.sort_unstable();
                let talks: Vec<usize> = (0..n).filter(|&p| call.talks_to(p)).collect();
                assert_eq!(posted, talks);
                send.clear();
                buf[out].to_vec()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn every_collective_rank_count_root_and_layout() {
    for coll in Coll::ALL {
        for n in 1..=5 {
            let roots = if matches!(
                coll,
                Coll::Broadcast | Coll::Reduce | Coll::Gather | Coll::Scatter
            ) {
                n
            } else {
                1
            };
            for root in 0..roots {
                for in_place in [false, true] {
                    for c in [0, 1, 3] {
                        let out = run_all(coll, RedOp::Sum, c, n, root, in_place);
                        for (r, got) in out.iter().enumerate() {
                            let want =
                                expected(coll, RedOp::Sum, c, n, r, root).unwrap_or_default();
                            assert_eq!(
                                got,
                                &want,
                                "{} n={n} root={root} in_place={in_place} count={c} rank {r}",
                                coll.name()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_operator_of_the_reductions() {
    for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce] {
        for op in [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max, RedOp::Avg] {
            for n in [2, 3, 4] {
                for in_place in [false, true] {
                    let out = run_all(coll, op, 5, n, n - 1, in_place);
                    for (r, got) in out.iter().enumerate() {
                        let want = expected(coll, op, 5, n, r, n - 1).unwrap_or_default();
                        assert_eq!(got, &want, "{} {op} n={n} rank {r}", coll.name());
                    }
                }
            }
        }
    }
}

#[test]
fn floats_reduce_to_the_same_bits_on_every_rank() {
    // Rank order fixes the rounding: every rank's sum is bitwise equal.
    let n = 4;
    let c = 64;
    let ws = wires(n, c * 4);
    let handles: Vec<_> = ws
        .into_iter()
        .enumerate()
        .map(|(r, mut w)| {
            std::thread::spawn(move || {
                let call = Call {
                    coll: Coll::AllReduce,
                    dtype: DataType::F32,
                    op: RedOp::Sum,
                    rank: r,
                    nranks: n,
                    root: 0,
                    block: c * 4,
                };
                let send: Vec<f32> = (0..c)
                    .map(|i| 0.1f32 * (r as f32 + 1.0) + i as f32 * 1e-3)
                    .collect();
                let mut recv = vec![0f32; c];
                // SAFETY: both hold `c` floats.
                unsafe {
                    run(
                        &call,
                        send.as_ptr().cast(),
                        recv.as_mut_ptr().cast(),
                        &mut w,
                    )
                }
                .unwrap();
                recv.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            })
        })
        .collect();
    let all: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(all.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn exchanges_are_symmetric_and_sizes_match() {
    for coll in Coll::ALL {
        for n in 1..=6 {
            for root in 0..n {
                for r in 0..n {
                    let me = Call {
                        coll,
                        dtype: DataType::U8,
                        op: RedOp::Sum,
                        rank: r,
                        nranks: n,
                        root,
                        block: 4,
                    };
                    for p in 0..n {
                        let them = Call { rank: p, ..me };
                        assert_eq!(
                            me.talks_to(p),
                            them.talks_to(r),
                            "{} {r}<->{p}",
                            coll.name()
                        );
                        if me.talks_to(p) {
                            assert_eq!(me.incoming(p), them.outgoing(r).map_or(0, |_| 4));
                        }
                    }
                }
            }
        }
    }
}
