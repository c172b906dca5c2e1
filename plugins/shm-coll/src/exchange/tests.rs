//! Every collective at 1–5 ranks, every root, in and out of place, on threads
//! exchanging through channels, against results computed directly.

use super::*;
use crate::testkit::{expected, Bufs};
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

/// `f(rank, wire)` on `n` threads joined by channels (blocks of `block` bytes);
/// every rank's result.
fn on_threads<T: Send + 'static>(
    n: usize,
    block: usize,
    f: impl Fn(usize, &mut Chan) -> T + Send + Copy + 'static,
) -> Vec<T> {
    let handles: Vec<_> = wires(n, block)
        .into_iter()
        .enumerate()
        .map(|(r, mut w)| std::thread::spawn(move || f(r, &mut w)))
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Run one call on every rank; each rank's output afterwards.
fn run_all(
    coll: Coll,
    op: RedOp,
    c: usize,
    n: usize,
    root: usize,
    in_place: bool,
    checked: bool,
) -> Vec<Vec<u32>> {
    let block = c * 4;
    on_threads(n, block, move |r, w| {
        let call = Call {
            coll,
            dtype: DataType::U32,
            op,
            rank: r,
            nranks: n,
            root,
            block,
            stride: block,
            checked,
        };
        let mut b = Bufs::new(coll, c, n, r, root, in_place);
        // In place: `Call::in_place` finds the buffers in NCCL's layout.
        let (sp, rp) = match b.api() {
            (_, one) if b.in_place() => call.in_place(one),
            apart => apart,
        };
        // SAFETY: buffers sized for the collective as above.
        unsafe { run(&call, &call.flows(), sp, rp, w) }.unwrap();
        // Checked, this rank posts to every other rank, once each; unchecked,
        // to those it sends data (a rank the peers did not post to would
        // wait here for nothing, and the channels would hold leftovers).
        let mut posted = w.posted.clone();
        posted.sort_unstable();
        let to: Vec<usize> = (0..n)
            .filter(|&p| call.talks_to(p) && (checked || call.outgoing(p).is_some()))
            .collect();
        assert_eq!(posted, to);
        for p in 0..n {
            let rx = w.from[p].as_ref();
            assert!(
                rx.is_none_or(|rx| rx.try_recv().is_err()),
                "a message from {p} left over"
            );
        }
        b.output()
    })
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
                for (in_place, checked) in
                    [(false, true), (true, true), (false, false), (true, false)]
                {
                    for c in [0, 1, 3] {
                        let out = run_all(coll, RedOp::Sum, c, n, root, in_place, checked);
                        for (r, got) in out.iter().enumerate() {
                            let want =
                                expected(coll, RedOp::Sum, c, n, r, root).unwrap_or_default();
                            assert_eq!(
                                got,
                                &want,
                                "{} n={n} root={root} in_place={in_place} checked={checked} count={c} rank {r}",
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
                    for checked in [true, false] {
                        let out = run_all(coll, op, 5, n, n - 1, in_place, checked);
                        for (r, got) in out.iter().enumerate() {
                            let want = expected(coll, op, 5, n, r, n - 1).unwrap_or_default();
                            assert_eq!(
                                got,
                                &want,
                                "{} {op} n={n} rank {r} checked={checked}",
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
fn floats_reduce_to_the_same_bits_on_every_rank() {
    // Rank order fixes the rounding: every rank's sum is bitwise equal.
    let n = 4;
    let c = 64;
    let all = on_threads(n, c * 4, move |r, w| {
        let call = Call {
            coll: Coll::AllReduce,
            dtype: DataType::F32,
            op: RedOp::Sum,
            rank: r,
            nranks: n,
            root: 0,
            block: c * 4,
            stride: c * 4,
            checked: true,
        };
        let send: Vec<f32> = (0..c)
            .map(|i| 0.1f32 * (r as f32 + 1.0) + i as f32 * 1e-3)
            .collect();
        let mut recv = vec![0f32; c];
        // SAFETY: both hold `c` floats.
        unsafe {
            run(
                &call,
                &call.flows(),
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                w,
            )
        }
        .unwrap();
        recv.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    });
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
                        stride: 4,
                        checked: true,
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
                        // Data goes only to a rank that uses it.
                        if me.talks_to(p) && me.outgoing(p).is_some() {
                            assert!(
                                them.placed(r).is_some() || them.reduces(),
                                "{} root {root}: rank {r} sends data rank {p} drops",
                                coll.name()
                            );
                        }
                        // Every message posted is taken, checked or not.
                        for checked in [true, false] {
                            let (me, them) = (Call { checked, ..me }, Call { checked, ..them });
                            assert_eq!(
                                me.posts_to(p),
                                them.takes_from(r),
                                "{} {r}->{p}",
                                coll.name()
                            );
                            assert_eq!(
                                me.posts_to(p),
                                me.talks_to(p) && (checked || me.outgoing(p).is_some())
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A call's peer sets are the ranks its predicates name, in rank order, for
/// every collective, root, rank and setting (roots out of range included).
#[test]
fn peer_sets_are_the_predicates_ranks() {
    for n in 1..=5 {
        for coll in Coll::ALL {
            for root in 0..=n {
                for rank in 0..n {
                    for checked in [true, false] {
                        let c = Call {
                            coll,
                            dtype: DataType::U8,
                            op: RedOp::Sum,
                            rank,
                            nranks: n,
                            root,
                            block: 4,
                            stride: 4,
                            checked,
                        };
                        let of = |f: &dyn Fn(usize) -> bool| {
                            (0..n).filter(|&p| f(p)).collect::<Vec<_>>()
                        };
                        let what = format!(
                            "{} n {n} root {root} rank {rank} checked {checked}",
                            coll.name()
                        );
                        assert_eq!(
                            c.others().collect::<Vec<_>>(),
                            of(&|p| c.talks_to(p)),
                            "{what}"
                        );
                        assert_eq!(
                            c.posting().collect::<Vec<_>>(),
                            of(&|p| c.posts_to(p)),
                            "{what}"
                        );
                        assert_eq!(
                            c.taking().collect::<Vec<_>>(),
                            of(&|p| c.takes_from(p)),
                            "{what}"
                        );
                        assert_eq!(
                            c.silent().collect::<Vec<_>>(),
                            of(&|p| c.talks_to(p) && !c.takes_from(p)),
                            "{what}"
                        );
                        for p in 0..n + 2 {
                            assert_eq!(c.posting().contains(p), c.posts_to(p), "{what} {p}");
                            assert_eq!(c.taking().contains(p), c.takes_from(p), "{what} {p}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn chunks_cover_the_block_once() {
    assert_eq!(chunks(0, 64).collect::<Vec<_>>(), vec![(0, 0)]);
    assert_eq!(chunks(64, 64).collect::<Vec<_>>(), vec![(0, 64)]);
    assert_eq!(chunks(65, 64).collect::<Vec<_>>(), vec![(0, 64), (64, 1)]);
    assert_eq!(
        chunks(200, 64).collect::<Vec<_>>(),
        vec![(0, 64), (64, 64), (128, 64), (192, 8)]
    );
}
