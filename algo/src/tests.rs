//! Every schedule for every collective, run on the simulated fabric
//! ([`super::sim`]) and compared with results computed directly; plus the
//! simulator's own checks on hand-written schedules.

use super::sim::{self, SimCase, POISON};
use super::*;
use crate::reduce::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::types::{DataType, RedOp};
use std::fmt::Debug;

// ---------------------------------------------------------------------------
// Element types of the reference.

/// A collective element as the reference computes it.
trait El: Copy + Debug {
    const DT: DataType;
    /// Movement values are taken modulo this (exactly representable, distinct).
    const RANGE: i64;
    /// Exact for the small values used (integers wrap).
    fn from_i64(v: i64) -> Self;
    fn combine(self, o: Self, op: RedOp) -> Self;
    fn finish(self, op: RedOp, nranks: usize) -> Self;
    fn close(got: Self, want: Self) -> bool;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
}

macro_rules! int_el {
    ($($t:ty => $d:ident),*) => {$(
        impl El for $t {
            const DT: DataType = DataType::$d;
            const RANGE: i64 = if <$t>::BITS >= 32 { 1 << 30 } else { 1 << <$t>::BITS };
            fn from_i64(v: i64) -> Self { v as $t }
            fn combine(self, o: Self, op: RedOp) -> Self {
                match op {
                    RedOp::Sum | RedOp::Avg => self.wrapping_add(o),
                    RedOp::Prod => self.wrapping_mul(o),
                    RedOp::Min => self.min(o),
                    RedOp::Max => self.max(o),
                }
            }
            fn finish(self, op: RedOp, nranks: usize) -> Self {
                match op {
                    RedOp::Avg => (self as i128 / nranks as i128) as $t,
                    _ => self,
                }
            }
            fn close(got: Self, want: Self) -> bool { got == want }
            fn put(self, out: &mut Vec<u8>) { out.extend_from_slice(&self.to_ne_bytes()) }
            fn get(b: &[u8]) -> Self { <$t>::from_ne_bytes(b.try_into().unwrap()) }
        }
    )*};
}
int_el!(i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64);

macro_rules! float_el {
    ($($t:ty => $d:ident, $range:expr, $tol:expr);*) => {$(
        impl El for $t {
            const DT: DataType = DataType::$d;
            const RANGE: i64 = $range;
            fn from_i64(v: i64) -> Self { v as $t }
            fn combine(self, o: Self, op: RedOp) -> Self {
                match op {
                    RedOp::Sum | RedOp::Avg => self + o,
                    RedOp::Prod => self * o,
                    RedOp::Min => self.min(o),
                    RedOp::Max => self.max(o),
                }
            }
            fn finish(self, op: RedOp, nranks: usize) -> Self {
                match op {
                    RedOp::Avg => self / nranks as $t,
                    _ => self,
                }
            }
            fn close(got: Self, want: Self) -> bool {
                got.to_bits() == want.to_bits() || (got - want).abs() <= $tol * want.abs().max(1.0)
            }
            fn put(self, out: &mut Vec<u8>) { out.extend_from_slice(&self.to_ne_bytes()) }
            fn get(b: &[u8]) -> Self { <$t>::from_ne_bytes(b.try_into().unwrap()) }
        }
    )*};
}
float_el!(f32 => F32, 1 << 24, 1e-5; f64 => F64, 1 << 50, 1e-12);

/// A 16-bit float: the reference computes in f32, the buffers hold the bits.
#[derive(Clone, Copy, Debug)]
struct Half<const BF: bool>(f32);

impl<const BF: bool> El for Half<BF> {
    const DT: DataType = if BF { DataType::Bf16 } else { DataType::F16 };
    const RANGE: i64 = if BF { 256 } else { 2048 };
    fn from_i64(v: i64) -> Self {
        Half(v as f32)
    }
    fn combine(self, o: Self, op: RedOp) -> Self {
        Half(self.0.combine(o.0, op))
    }
    fn finish(self, op: RedOp, nranks: usize) -> Self {
        Half(self.0.finish(op, nranks))
    }
    fn close(got: Self, want: Self) -> bool {
        got.0.to_bits() == want.0.to_bits()
            || (got.0 - want.0).abs() <= 1e-2 * want.0.abs().max(1.0)
    }
    fn put(self, out: &mut Vec<u8>) {
        let bits = if BF {
            f32_to_bf16(self.0)
        } else {
            f32_to_f16(self.0)
        };
        out.extend_from_slice(&bits.to_ne_bytes());
    }
    fn get(b: &[u8]) -> Self {
        let bits = u16::from_ne_bytes(b.try_into().unwrap());
        Half(if BF {
            bf16_to_f32(bits)
        } else {
            f16_to_f32(bits)
        })
    }
}

/// An fp8 value (e5m2 when `E5`), kept as the f32 it widens to. The simulator
/// moves fp8 data (reductions on it are checked in `reduce/tests.rs`).
#[derive(Clone, Copy, Debug)]
struct Quarter<const E5: bool>(f32);

impl<const E5: bool> El for Quarter<E5> {
    const DT: DataType = if E5 {
        DataType::F8E5M2
    } else {
        DataType::F8E4M3
    };
    const RANGE: i64 = if E5 { 8 } else { 16 };
    fn from_i64(v: i64) -> Self {
        Quarter(v as f32)
    }
    fn combine(self, o: Self, op: RedOp) -> Self {
        Quarter(self.0.combine(o.0, op))
    }
    fn finish(self, op: RedOp, nranks: usize) -> Self {
        Quarter(self.0.finish(op, nranks))
    }
    fn close(got: Self, want: Self) -> bool {
        got.0.to_bits() == want.0.to_bits()
    }
    fn put(self, out: &mut Vec<u8>) {
        out.push(if E5 {
            crate::fp8::f32_to_f8e5m2(self.0)
        } else {
            crate::fp8::f32_to_f8e4m3(self.0)
        });
    }
    fn get(b: &[u8]) -> Self {
        Quarter(if E5 {
            crate::fp8::f8e5m2_to_f32(b[0])
        } else {
            crate::fp8::f8e4m3_to_f32(b[0])
        })
    }
}

// ---------------------------------------------------------------------------
// Cases.

const BIG_CHUNK: usize = 1 << 20;

/// All-to-all-v counts of every rank: deterministic per (src, dst), zeros
/// included, scaled by `count`; displacements in a rank-dependent order with gaps.
fn vcounts(n: usize, count: usize) -> Vec<VCounts> {
    let c = |s: usize, d: usize| (((s * 5 + d * 3) % 4) * count).div_ceil(2);
    let place = |counts: &[usize], reverse: bool, gap: &dyn Fn(usize) -> usize| {
        let mut displs = vec![0; n];
        let mut at = 0;
        let order: Vec<usize> = if reverse {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        for p in order {
            displs[p] = at + gap(p);
            at = displs[p] + counts[p];
        }
        displs
    };
    (0..n)
        .map(|r| {
            let send_counts: Vec<usize> = (0..n).map(|d| c(r, d)).collect();
            let recv_counts: Vec<usize> = (0..n).map(|s| c(s, r)).collect();
            VCounts {
                send_displs: place(&send_counts, r % 2 == 1, &|p| p % 3),
                recv_displs: place(&recv_counts, r % 2 == 0, &|p| (p + 1) % 2),
                send_counts,
                recv_counts,
            }
        })
        .collect()
}

/// Inputs of every rank.
fn inputs<T: El>(case: &SimCase) -> Vec<Vec<T>> {
    (0..case.nranks)
        .map(|r| {
            let (send, _) = case.buffer_elems(r).unwrap();
            (0..send)
                .map(|i| {
                    let v = if !case.kind.reduces() {
                        ((r as i64) * 1_000_003 + (i as i64) * 7 + 1) % T::RANGE
                    } else if case.op == RedOp::Prod {
                        [-1, 1, 2][(r + 2 * i) % 3]
                    } else {
                        ((r * 7 + i * 3) % 11) as i64 - 5
                    };
                    T::from_i64(v)
                })
                .collect()
        })
        .collect()
}

/// Every rank's receive buffer, computed directly.
fn reference<T: El>(case: &SimCase, inp: &[Vec<T>]) -> Vec<Vec<T>> {
    let (n, c, root) = (case.nranks, case.count, case.root);
    let poison = T::get(&vec![POISON; T::DT.size()]);
    let red = |at: &dyn Fn(usize) -> usize| {
        let mut x = inp[0][at(0)];
        for (p, v) in inp.iter().enumerate().skip(1) {
            x = x.combine(v[at(p)], case.op);
        }
        x.finish(case.op, n)
    };
    // The full reduction, computed once (all-reduce and reduce).
    let full: Vec<T> = match case.kind {
        CollKind::AllReduce | CollKind::Reduce => (0..c).map(|i| red(&|_| i)).collect(),
        _ => Vec::new(),
    };
    (0..n)
        .map(|r| {
            let (_, recv) = case.buffer_elems(r).unwrap();
            let mut out = vec![poison; recv];
            match case.kind {
                CollKind::AllReduce => out.copy_from_slice(&full),
                CollKind::ReduceScatter => (0..c).for_each(|i| out[i] = red(&|_| r * c + i)),
                CollKind::Reduce if r == root => out.copy_from_slice(&full),
                CollKind::AllGather => (0..n * c).for_each(|j| out[j] = inp[j / c][j % c]),
                CollKind::Gather if r == root => {
                    (0..n * c).for_each(|j| out[j] = inp[j / c][j % c])
                }
                CollKind::Broadcast => out.copy_from_slice(&inp[root][..c]),
                CollKind::Scatter => out.copy_from_slice(&inp[root][r * c..(r + 1) * c]),
                CollKind::AllToAll => (0..n * c).for_each(|j| out[j] = inp[j / c][r * c + j % c]),
                CollKind::AllToAllV => {
                    let me = &case.v[r];
                    for (p, vp) in case.v.iter().enumerate() {
                        let (so, ro, len) =
                            (vp.send_displs[r], me.recv_displs[p], me.recv_counts[p]);
                        out[ro..ro + len].copy_from_slice(&inp[p][so..so + len]);
                    }
                }
                CollKind::Reduce | CollKind::Gather | CollKind::Barrier => {}
            }
            out
        })
        .collect()
}

/// Run one case with elements `T`; on a wrong result or an error, push a
/// description to `fails`.
fn check<T: El>(case: &SimCase, fails: &mut Vec<String>) {
    check_with::<T>(case, fails, &schedule)
}

/// [`check`] with the schedules from `sched`.
fn check_with<T: El>(
    case: &SimCase,
    fails: &mut Vec<String>,
    sched: &dyn Fn(&CollArgs<'_>) -> Schedule,
) {
    let inp = inputs::<T>(case);
    let bytes: Vec<Vec<u8>> = inp
        .iter()
        .map(|v| {
            let mut b = Vec::with_capacity(v.len() * T::DT.size());
            v.iter().for_each(|x| x.put(&mut b));
            b
        })
        .collect();
    let got = match sim::run_with(case, &bytes, sched) {
        Ok(g) => g,
        Err(e) => return fails.push(format!("{e}{}", v_note(case))),
    };
    let want = reference(case, &inp);
    let sz = T::DT.size();
    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.len() != w.len() * sz {
            return fails.push(format!(
                "{case}{}: rank {r}: {} result bytes, want {}",
                v_note(case),
                g.len(),
                w.len() * sz
            ));
        }
        let bad: Vec<usize> = (0..w.len())
            .filter(|&i| !T::close(T::get(&g[i * sz..(i + 1) * sz]), w[i]))
            .collect();
        if let Some(&i) = bad.first() {
            return fails.push(format!(
                "{case}{}: rank {r}: {} of {} elements wrong, first at {i}: got {:?}, want {:?}{}",
                v_note(case),
                bad.len(),
                w.len(),
                T::get(&g[i * sz..(i + 1) * sz]),
                w[i],
                if T::close(T::get(&g[i * sz..(i + 1) * sz]), poison::<T>()) {
                    " (never written)"
                } else {
                    ""
                }
            ));
        }
    }
}

/// How to rebuild an all-to-all-v case's counts.
fn v_note(case: &SimCase) -> &'static str {
    match case.kind {
        CollKind::AllToAllV => " (v = vcounts(nranks, count))",
        _ => "",
    }
}

fn poison<T: El>() -> T {
    T::get(&vec![POISON; T::DT.size()])
}

fn check_dt(case: &SimCase, fails: &mut Vec<String>) {
    match case.dtype {
        DataType::I8 => check::<i8>(case, fails),
        DataType::U8 => check::<u8>(case, fails),
        DataType::I32 => check::<i32>(case, fails),
        DataType::U32 => check::<u32>(case, fails),
        DataType::I64 => check::<i64>(case, fails),
        DataType::U64 => check::<u64>(case, fails),
        DataType::F16 => check::<Half<false>>(case, fails),
        DataType::Bf16 => check::<Half<true>>(case, fails),
        DataType::F32 => check::<f32>(case, fails),
        DataType::F64 => check::<f64>(case, fails),
        DataType::F8E4M3 => check::<Quarter<false>>(case, fails),
        DataType::F8E5M2 => check::<Quarter<true>>(case, fails),
    }
}

/// Rank counts of the full matrix.
const SMALL: &[usize] = &[
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 64,
];
/// Rank counts of the reduced matrix ([`large`]).
const LARGE: &[usize] = &[256, 1024];

/// Large rank counts run a reduced matrix.
fn large(n: usize) -> bool {
    n >= 256
}

/// (count, chunk) pairs for `n` ranks.
fn counts(kind: CollKind, n: usize) -> Vec<(usize, usize)> {
    let mut v = if large(n) {
        // n·count buffers on every rank: keep 1024 ranks within memory.
        let wide = matches!(
            kind,
            CollKind::AllGather
                | CollKind::ReduceScatter
                | CollKind::AllToAll
                | CollKind::AllToAllV
        );
        if wide && n > 256 {
            vec![(1, BIG_CHUNK), (3, BIG_CHUNK)]
        } else {
            vec![(1, BIG_CHUNK), (n + 1, BIG_CHUNK)]
        }
    } else {
        vec![
            (0, BIG_CHUNK),
            (1, BIG_CHUNK),
            (n.saturating_sub(1), BIG_CHUNK),
            (2 * n + 3, BIG_CHUNK),
            // Longer than the chunk: ring all-reduce segments by chunk·n,
            // everything else by chunk (per channel part of a block).
            (
                if kind == CollKind::AllReduce {
                    13 * n + 5
                } else {
                    29
                },
                4,
            ),
        ]
    };
    v.sort_unstable();
    v.dedup();
    v
}

/// (dtype, op) pairs to run a case with; `salt` rotates the extras.
fn flavors(kind: CollKind, n: usize, salt: usize) -> Vec<(DataType, RedOp)> {
    use DataType::*;
    use RedOp::*;
    if kind == CollKind::Barrier {
        return vec![(I32, Sum)];
    }
    if !kind.reduces() {
        if large(n) {
            return vec![(I32, Sum)];
        }
        let extra = [I8, F64, Bf16, I64, U8, F16, U32, F8E4M3, F8E5M2];
        return vec![(I32, Sum), (extra[salt % extra.len()], Sum)];
    }
    if large(n) {
        return vec![(I32, Sum), (I32, Max)];
    }
    let mut v = vec![
        (I32, Sum),
        (I32, Prod),
        (I32, Min),
        (I32, Max),
        (I32, Avg),
        (F32, Sum),
        (F64, Avg),
    ];
    let extra = [
        (U8, Sum),
        (I64, Prod),
        (F16, Sum),
        (Bf16, Avg),
        (F32, Prod),
        (F64, Min),
        (U8, Avg),
        (F16, Max),
        (Bf16, Sum),
        (U64, Max),
        (I8, Avg),
        (F32, Avg),
        (U32, Prod),
        (F16, Avg),
    ];
    // 16-bit floats only where their products and sums stay exact.
    let e = extra[salt % extra.len()];
    if !(matches!(e.0, F16 | Bf16) && n > 17) {
        v.push(e);
    }
    v
}

/// The whole matrix for one collective at the given rank counts; returns
/// (cases run, failures). `SIM_TIMING=1` (with `--nocapture`) prints the
/// time taken per algorithm and rank count.
fn matrix(kind: CollKind, rank_counts: &[usize]) -> (usize, Vec<String>) {
    let mut fails = Vec::new();
    let mut runs = 0;
    let mut salt = 0;
    for algo in Algo::for_kind(kind) {
        for &n in rank_counts {
            let t0 = std::time::Instant::now();
            let runs0 = runs;
            let roots: Vec<usize> = if kind.rooted() {
                let mut r = vec![0, n / 2, n - 1];
                r.dedup();
                r
            } else {
                vec![0]
            };
            let parts: &[usize] = if large(n) { &[1] } else { &[1, 3] };
            let layouts: &[bool] = if in_place_safe(kind) {
                &[false, true]
            } else {
                &[false]
            };
            for (count, chunk) in counts(kind, n) {
                let v = if kind == CollKind::AllToAllV {
                    vcounts(n, count)
                } else {
                    Vec::new()
                };
                for &root in &roots {
                    for &nparts in parts {
                        for &in_place in layouts {
                            salt += 1;
                            for (dtype, op) in flavors(kind, n, salt) {
                                let case = SimCase {
                                    root,
                                    nparts,
                                    chunk,
                                    dtype,
                                    op,
                                    in_place,
                                    v: v.clone(),
                                    ..SimCase::new(kind, algo, n, count)
                                };
                                runs += 1;
                                check_dt(&case, &mut fails);
                            }
                        }
                    }
                }
            }
            if std::env::var_os("SIM_TIMING").is_some() {
                eprintln!(
                    "TIMING {} {} n={n}: {} runs {:?}",
                    kind.name(),
                    algo.name(),
                    runs - runs0,
                    t0.elapsed()
                );
            }
        }
    }
    (runs, fails)
}

fn assert_matrix(kind: CollKind, rank_counts: &[usize]) {
    let (runs, fails) = matrix(kind, rank_counts);
    assert!(
        fails.is_empty(),
        "{} of {runs} {} cases failed; the first ones:\n{}",
        fails.len(),
        kind.name(),
        fails
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A test of the full matrix and one of the large rank counts, per collective.
macro_rules! matrix_tests {
    ($($small:ident, $large:ident => $kind:ident;)*) => {$(
        #[test]
        fn $small() {
            assert_matrix(CollKind::$kind, SMALL);
        }

        #[test]
        fn $large() {
            assert_matrix(CollKind::$kind, LARGE);
        }
    )*};
}

matrix_tests! {
    all_reduce, all_reduce_large => AllReduce;
    all_gather, all_gather_large => AllGather;
    reduce_scatter, reduce_scatter_large => ReduceScatter;
    broadcast, broadcast_large => Broadcast;
    reduce, reduce_large => Reduce;
    all_to_all, all_to_all_large => AllToAll;
    all_to_all_v, all_to_all_v_large => AllToAllV;
    gather, gather_large => Gather;
    scatter, scatter_large => Scatter;
    barrier, barrier_large => Barrier;
}

/// The hash-map message queues (used past 2 Mi (channel, source,
/// destination) triples) behave like the dense table.
#[test]
fn sparse_queues() {
    sim::FORCE_SPARSE.with(|f| f.set(true));
    for kind in [
        CollKind::AllReduce,
        CollKind::AllToAllV,
        CollKind::Broadcast,
    ] {
        assert_matrix(kind, &[1, 2, 5, 8, 13]);
    }
    sim_reports_rendezvous_deadlock();
    sim_reports_length_mismatch();
}

#[test]
fn quadratic_deltas_enumerate_every_peer_once() {
    for n in (1..=130).chain([255, 256, 257, 1000, 1024, 1025]) {
        if let Err(e) = sim::check_quadratic(n) {
            panic!("{e}");
        }
    }
}

/// The harness notices broken schedules: each mutation of the real
/// schedules must make some case fail.
#[test]
fn matrix_catches_broken_schedules() {
    type Mutation = fn(&CollArgs<'_>, Schedule) -> Schedule;
    fn drop_finish(_: &CollArgs<'_>, mut s: Schedule) -> Schedule {
        for st in &mut s.stages {
            st.locals.retain(|l| !matches!(l, Local::Finish { .. }));
        }
        s
    }
    // Rank 2 is the root of rooted cases: it moves data in every collective.
    fn drop_last_stage(a: &CollArgs<'_>, mut s: Schedule) -> Schedule {
        let moves = |st: &Stage| {
            st.sends.iter().chain(&st.recvs).any(|x| x.region.len > 0)
                || st.locals.iter().any(|l| match l {
                    Local::Reduce { dst, .. } | Local::Copy { dst, .. } | Local::Finish { dst } => {
                        dst.len > 0
                    }
                })
        };
        if a.rank == 2 {
            if let Some(i) = s.stages.iter().rposition(moves) {
                s.stages.remove(i);
            }
        }
        s
    }
    // Rank 1 receives in broadcast and scatter, rank 2 (the root) in reduce and gather.
    fn shift_recv(a: &CollArgs<'_>, mut s: Schedule) -> Schedule {
        if a.rank == 1 || a.rank == 2 {
            if let Some(x) = s
                .stages
                .iter_mut()
                .flat_map(|st| st.recvs.iter_mut())
                .find(|x| x.region.len > 0)
            {
                x.region.off = if x.region.off > 0 {
                    x.region.off - 1
                } else {
                    x.region.off + 1
                };
            }
        }
        s
    }
    let mutations: [(&str, Mutation); 3] = [
        ("drop_finish", drop_finish),
        ("drop_last_stage", drop_last_stage),
        ("shift_recv", shift_recv),
    ];
    let mut unnoticed = Vec::new();
    for kind in CollKind::ALL
        .into_iter()
        .filter(|&k| k != CollKind::Barrier)
    {
        for algo in Algo::for_kind(kind) {
            for (name, m) in mutations {
                if name == "drop_finish" && !kind.reduces() {
                    continue;
                }
                let case = SimCase {
                    root: 2,
                    op: RedOp::Avg,
                    v: if kind == CollKind::AllToAllV {
                        vcounts(5, 13)
                    } else {
                        Vec::new()
                    },
                    ..SimCase::new(kind, algo, 5, 13)
                };
                let mut fails = Vec::new();
                check_with::<i32>(&case, &mut fails, &|a| m(a, schedule(a)));
                if fails.is_empty() {
                    unnoticed.push(format!("{name} on {case}"));
                }
            }
        }
    }
    assert!(
        unnoticed.is_empty(),
        "broken schedules passed: {unnoticed:#?}"
    );
}

// ---------------------------------------------------------------------------
// The simulator itself, on hand-written schedules.

use Buf::{Recv, Scratch, Send};

fn xfer(peer: usize, buf: Buf, off: usize, len: usize) -> Xfer {
    Xfer {
        peer,
        region: Region::new(buf, off, len),
    }
}

/// Ring all-gather written out: copy own block, then n-1 forwarding stages.
fn hand_ring_all_gather(a: &CollArgs<'_>) -> Schedule {
    let (n, r, c) = (a.nranks, a.rank, a.count);
    let mut s = Schedule::default();
    s.stages.push(Stage {
        locals: vec![Local::Copy {
            dst: Region::new(Recv, r * c, c),
            src: Region::new(Send, 0, c),
        }],
        ..Stage::default()
    });
    for k in 1..n {
        let (sb, rb) = ((r + n - k + 1) % n, (r + n - k) % n);
        s.stages.push(Stage {
            sends: vec![xfer((r + 1) % n, Recv, sb * c, c)],
            recvs: vec![xfer((r + n - 1) % n, Recv, rb * c, c)],
            locals: vec![],
        });
    }
    s
}

/// Direct all-reduce written out: everyone sends its input to everyone,
/// receives into scratch, then reduces.
fn hand_direct_all_reduce(a: &CollArgs<'_>) -> Schedule {
    let (n, r, c) = (a.nranks, a.rank, a.count);
    let out = Region::new(Recv, 0, c);
    let peers = || (0..n).filter(move |&p| p != r);
    let mut locals = vec![Local::Copy {
        dst: out,
        src: Region::new(Send, 0, c),
    }];
    locals.extend(peers().map(|p| Local::Reduce {
        dst: out,
        a: out,
        b: Region::new(Scratch, p * c, c),
    }));
    locals.push(Local::Finish { dst: out });
    Schedule {
        stages: vec![Stage {
            sends: peers().map(|p| xfer(p, Send, 0, c)).collect(),
            recvs: peers().map(|p| xfer(p, Scratch, p * c, c)).collect(),
            locals,
        }],
        scratch: n * c,
    }
}

fn i32_inputs(case: &SimCase) -> Vec<Vec<u8>> {
    inputs::<i32>(case)
        .iter()
        .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
        .collect()
}

fn hand_case(kind: CollKind, algo: Algo, nranks: usize, count: usize, in_place: bool) -> SimCase {
    SimCase {
        in_place,
        ..SimCase::new(kind, algo, nranks, count)
    }
}

#[test]
fn sim_runs_hand_written_ring_all_gather() {
    for in_place in [false, true] {
        let case = hand_case(CollKind::AllGather, Algo::Ring, 3, 5, in_place);
        let inp = i32_inputs(&case);
        let got = sim::run_with(&case, &inp, hand_ring_all_gather).unwrap();
        let want: Vec<u8> = inp.concat();
        assert!(got.iter().all(|g| *g == want), "{case}");
    }
}

#[test]
fn sim_runs_hand_written_all_reduce() {
    for op in RedOp::ALL {
        for in_place in [false, true] {
            let case = SimCase {
                op,
                ..hand_case(CollKind::AllReduce, Algo::RecursiveDoubling, 4, 7, in_place)
            };
            let mut fails = Vec::new();
            let inp = inputs::<i32>(&case);
            let bytes = i32_inputs(&case);
            let got = sim::run_with(&case, &bytes, hand_direct_all_reduce).unwrap();
            let want = reference(&case, &inp);
            for (g, w) in got.iter().zip(&want) {
                let w: Vec<u8> = w.iter().flat_map(|x| x.to_ne_bytes()).collect();
                if *g != w {
                    fails.push(format!("{case}"));
                }
            }
            assert!(fails.is_empty(), "{fails:?}");
        }
    }
}

/// Run a two-rank all-reduce (count 4) whose rank 0 and rank 1 schedules are given.
fn two_ranks(
    in_place: bool,
    nparts: usize,
    s0: Schedule,
    s1: Schedule,
) -> Result<Vec<Vec<u8>>, String> {
    let case = SimCase {
        nparts,
        ..hand_case(CollKind::AllReduce, Algo::RecursiveDoubling, 2, 4, in_place)
    };
    sim::run_with(&case, &i32_inputs(&case), |a| {
        if a.rank == 0 {
            s0.clone()
        } else {
            s1.clone()
        }
    })
}

fn stages(st: Vec<Stage>) -> Schedule {
    Schedule {
        stages: st,
        scratch: 0,
    }
}

fn send_st(peer: usize, buf: Buf, off: usize, len: usize) -> Stage {
    Stage {
        sends: vec![xfer(peer, buf, off, len)],
        ..Stage::default()
    }
}

fn recv_st(peer: usize, buf: Buf, off: usize, len: usize) -> Stage {
    Stage {
        recvs: vec![xfer(peer, buf, off, len)],
        ..Stage::default()
    }
}

fn expect_err(r: Result<Vec<Vec<u8>>, String>, words: &[&str]) {
    let e = r.expect_err("the simulator accepted a broken schedule");
    for w in words {
        assert!(e.contains(w), "error lacks {w:?}: {e}");
    }
}

#[test]
fn sim_matches_in_posting_order() {
    // Two messages 0 → 1 in one stage: the first send lands in the first receive.
    let s0 = stages(vec![Stage {
        sends: vec![xfer(1, Send, 0, 1), xfer(1, Send, 1, 3)],
        ..Stage::default()
    }]);
    let s1 = stages(vec![Stage {
        recvs: vec![xfer(0, Recv, 3, 1), xfer(0, Recv, 0, 3)],
        ..Stage::default()
    }]);
    let got = two_ranks(false, 1, s0, s1).unwrap();
    let case = hand_case(CollKind::AllReduce, Algo::RecursiveDoubling, 2, 4, false);
    let r0 = &i32_inputs(&case)[0];
    assert_eq!(got[1][12..16], r0[0..4]);
    assert_eq!(got[1][0..12], r0[4..16]);
}

#[test]
fn sim_reports_rendezvous_deadlock() {
    // Both receive first, then send.
    let s = || stages(vec![recv_st(1, Recv, 0, 4), send_st(1, Send, 0, 4)]);
    let mut s1 = s();
    s1.stages[0].recvs[0].peer = 0;
    s1.stages[1].sends[0].peer = 0;
    expect_err(
        two_ranks(false, 1, s(), s1),
        &["deadlock", "rank 0 part 0 stage 0/2", "receive from rank 1"],
    );
    // Both send first, then receive: fine with buffering, not under rendezvous.
    let s0 = stages(vec![send_st(1, Send, 0, 4), recv_st(1, Recv, 0, 4)]);
    let s1 = stages(vec![send_st(0, Send, 0, 4), recv_st(0, Recv, 0, 4)]);
    expect_err(two_ranks(false, 1, s0, s1), &["deadlock", "send to rank 0"]);
    // Unmatched: rank 1 never receives.
    let s0 = stages(vec![send_st(1, Send, 0, 4)]);
    expect_err(
        two_ranks(false, 1, s0, Schedule::default()),
        &["deadlock", "rank 1 is finished"],
    );
}

#[test]
fn sim_reports_length_mismatch() {
    let s0 = stages(vec![send_st(1, Send, 0, 2)]);
    let s1 = stages(vec![recv_st(0, Recv, 0, 3)]);
    expect_err(
        two_ranks(false, 1, s0, s1),
        &["length mismatch", "2 elements", "expects 3"],
    );
}

#[test]
fn sim_reports_overlapping_receives() {
    let s0 = stages(vec![Stage {
        sends: vec![xfer(1, Send, 0, 2), xfer(1, Send, 2, 2)],
        ..Stage::default()
    }]);
    let s1 = stages(vec![Stage {
        recvs: vec![xfer(0, Recv, 0, 2), xfer(0, Recv, 1, 2)],
        ..Stage::default()
    }]);
    expect_err(
        two_ranks(false, 1, s0, s1),
        &["overlaps", "rank 1 part 0 stage 0"],
    );
}

#[test]
fn sim_reports_receive_over_send_through_in_place_aliasing() {
    // Exchange: send Send[0..2], receive into Recv[1..3]. Distinct memory
    // out-of-place; the same memory in-place (send = recv for all-reduce).
    let s = |peer| {
        stages(vec![Stage {
            sends: vec![xfer(peer, Send, 0, 2)],
            recvs: vec![xfer(peer, Recv, 1, 2)],
            locals: vec![],
        }])
    };
    two_ranks(false, 1, s(1), s(0)).unwrap();
    expect_err(two_ranks(true, 1, s(1), s(0)), &["overlaps", "in memory"]);
}

#[test]
fn sim_reports_bad_regions_and_peers() {
    let ok = || stages(vec![]);
    expect_err(
        two_ranks(false, 1, stages(vec![send_st(1, Send, 1, 4)]), ok()),
        &["out of bounds", "4 element send buffer"],
    );
    expect_err(
        two_ranks(false, 1, stages(vec![recv_st(1, Scratch, 0, 1)]), ok()),
        &["out of bounds", "scratch"],
    );
    expect_err(
        two_ranks(false, 1, stages(vec![send_st(0, Send, 0, 1)]), ok()),
        &["to itself"],
    );
    expect_err(
        two_ranks(false, 1, stages(vec![send_st(2, Send, 0, 1)]), ok()),
        &["out of range"],
    );
    expect_err(
        two_ranks(false, 1, stages(vec![recv_st(1, Send, 0, 1)]), ok()),
        &["writes into the send buffer"],
    );
    let local = |l: Local| {
        stages(vec![Stage {
            locals: vec![l],
            ..Stage::default()
        }])
    };
    let partial = Local::Copy {
        dst: Region::new(Recv, 1, 2),
        src: Region::new(Recv, 0, 2),
    };
    expect_err(
        two_ranks(false, 1, local(partial), ok()),
        &["partially overlaps"],
    );
    // In-place, Recv[1..3] and Send[0..2] are the same memory shifted by one.
    let aliased = Local::Reduce {
        dst: Region::new(Recv, 1, 2),
        a: Region::new(Send, 0, 2),
        b: Region::new(Recv, 1, 2),
    };
    two_ranks(false, 1, local(aliased), ok()).unwrap();
    expect_err(
        two_ranks(true, 1, local(aliased), ok()),
        &["partially overlaps"],
    );
    let short = Local::Copy {
        dst: Region::new(Recv, 0, 2),
        src: Region::new(Send, 0, 3),
    };
    expect_err(
        two_ranks(false, 1, local(short), ok()),
        &["different lengths"],
    );
}

#[test]
fn sim_reports_channel_races() {
    // Both channels of rank 0 write Recv[0..2].
    let s0 = stages(vec![Stage {
        locals: vec![Local::Copy {
            dst: Region::new(Recv, 0, 2),
            src: Region::new(Send, 0, 2),
        }],
        ..Stage::default()
    }]);
    expect_err(
        two_ranks(false, 2, s0.clone(), stages(vec![])),
        &["channels race", "rank 0"],
    );
    // Reading the same input from both channels is fine.
    let s0 = stages(vec![Stage {
        locals: vec![Local::Copy {
            dst: Region::new(Recv, 0, 2),
            src: Region::new(Send, 0, 2),
        }],
        ..Stage::default()
    }]);
    let s0b = stages(vec![Stage {
        locals: vec![Local::Copy {
            dst: Region::new(Recv, 2, 2),
            src: Region::new(Send, 0, 2),
        }],
        ..Stage::default()
    }]);
    let case = SimCase {
        nparts: 2,
        ..hand_case(CollKind::AllReduce, Algo::RecursiveDoubling, 2, 4, false)
    };
    sim::run_with(&case, &i32_inputs(&case), |a| {
        match (a.rank, a.part.index) {
            (0, 0) => s0.clone(),
            (0, _) => s0b.clone(),
            _ => Schedule::default(),
        }
    })
    .unwrap();
}

#[test]
fn sim_rejects_bad_cases() {
    let case = hand_case(CollKind::AllToAll, Algo::Direct, 2, 1, true);
    let e = sim::run(&case, &[vec![0; 8], vec![0; 8]]).unwrap_err();
    assert!(e.contains("in-place"), "{e}");
    let case = hand_case(CollKind::AllReduce, Algo::Ring, 2, 1, false);
    let e = sim::run(&case, &[vec![0; 4], vec![0; 3]]).unwrap_err();
    assert!(e.contains("rank 1's input has 3 bytes"), "{e}");
}
