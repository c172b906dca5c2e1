//! Deterministic inputs and exactly known results for fxperf's checks.
//!
//! Every rank can compute every other rank's input from `(seed, rank, index)`,
//! so each rank checks its own output locally, element by element, without
//! moving data (as nccl-tests does).
//!
//! Reductions get small integers, which every type holds exactly: sums are
//! bounded so that every partial sum, in any order, stays exact (bf16: 256,
//! half: 2048); products use factors in {1, 2, -1}, so every partial product
//! is ± a power of two (exact, or ±inf in every order once it overflows
//! half); min and max are exact anyway. Integer results wrap as the types
//! do. Only avg of floats is compared with a tolerance (4 units in the last
//! place): an implementation may divide by nranks or multiply by 1/nranks.
//! Data movement (gathers, scatters, broadcast, all-to-all) is checked byte by
//! byte against a pattern that depends on the source rank and the byte's
//! position in the source buffer.

use ferrocx::{Bf16, CollKind, DataType, RedOp, VCounts, F16, F8E4M3, F8E5M2};

/// An element type as the checks see it.
pub trait Elem: Copy {
    /// Size in bytes.
    const SIZE: usize;
    /// Floating point.
    const FLOAT: bool;
    /// Holds negative values.
    const SIGNED: bool;
    /// Floats: every integer of magnitude up to this is exact (0 for integers).
    const EXACT: i64;
    /// Floats: relative tolerance of avg results.
    const TOL: f64;
    /// Integers: wrap to the type; floats: round to nearest.
    fn from_int(v: i128) -> Self;
    /// The value as an integer (integer types only).
    fn to_int(self) -> i128;
    /// Round to the type.
    fn from_f64(v: f64) -> Self;
    /// Widen.
    fn to_f64(self) -> f64;
    /// Store at the start of `b` (native byte order).
    fn put(self, b: &mut [u8]);
    /// Load from the start of `b`.
    fn get(b: &[u8]) -> Self;
    /// Equal values (integers: bits; floats: numerically, so NaN never matches).
    fn same(self, o: Self) -> bool;
}

macro_rules! int_elem {
    ($($t:ty: $signed:expr),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const FLOAT: bool = false;
            const SIGNED: bool = $signed;
            const EXACT: i64 = 0;
            const TOL: f64 = 0.0;
            fn from_int(v: i128) -> Self { v as $t }
            fn to_int(self) -> i128 { self as i128 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
            fn put(self, b: &mut [u8]) { b[..Self::SIZE].copy_from_slice(&self.to_ne_bytes()) }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
            fn same(self, o: Self) -> bool { self == o }
        }
    )*};
}
int_elem!(i8: true, u8: false, i32: true, u32: false, i64: true, u64: false);

macro_rules! float_elem {
    ($t:ty, $exact:expr, $mant:expr) => {
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const FLOAT: bool = true;
            const SIGNED: bool = true;
            const EXACT: i64 = $exact;
            const TOL: f64 = 4.0 / (1u64 << $mant) as f64;
            fn from_int(v: i128) -> Self {
                v as $t
            }
            fn to_int(self) -> i128 {
                self as i128
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn put(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.to_ne_bytes())
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
            fn same(self, o: Self) -> bool {
                self == o
            }
        }
    };
}
float_elem!(f32, 1 << 24, 23);
float_elem!(f64, 1 << 53, 52);

// 16- and 8-bit floats on their bits (`$bits`), computed on as f32. fp8 saturates:
// a product past the largest finite value is that value in every order (factors
// of magnitude ≥ 1 only grow it), so products stay checkable.
macro_rules! narrow_elem {
    ($t:ident: $bits:ty, $exact:expr, $mant:expr) => {
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$bits>();
            const FLOAT: bool = true;
            const SIGNED: bool = true;
            const EXACT: i64 = $exact;
            const TOL: f64 = 4.0 / (1u64 << $mant) as f64;
            fn from_int(v: i128) -> Self {
                $t::from_f32(v as f32)
            }
            fn to_int(self) -> i128 {
                self.to_f32() as i128
            }
            fn from_f64(v: f64) -> Self {
                $t::from_f32(v as f32)
            }
            fn to_f64(self) -> f64 {
                self.to_f32() as f64
            }
            fn put(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.0.to_ne_bytes())
            }
            fn get(b: &[u8]) -> Self {
                $t(<$bits>::from_ne_bytes(
                    b[..Self::SIZE].try_into().expect("element size"),
                ))
            }
            fn same(self, o: Self) -> bool {
                self.to_f32() == o.to_f32()
            }
        }
    };
}
narrow_elem!(F16: u16, 2048, 10);
narrow_elem!(Bf16: u16, 256, 7);
narrow_elem!(F8E4M3: u8, 16, 3);
narrow_elem!(F8E5M2: u8, 8, 2);

macro_rules! by_type {
    ($dt:expr, $f:ident ( $($arg:expr),* )) => {
        match $dt {
            DataType::I8 => $f::<i8>($($arg),*),
            DataType::U8 => $f::<u8>($($arg),*),
            DataType::I32 => $f::<i32>($($arg),*),
            DataType::U32 => $f::<u32>($($arg),*),
            DataType::I64 => $f::<i64>($($arg),*),
            DataType::U64 => $f::<u64>($($arg),*),
            DataType::F16 => $f::<F16>($($arg),*),
            DataType::Bf16 => $f::<Bf16>($($arg),*),
            DataType::F32 => $f::<f32>($($arg),*),
            DataType::F64 => $f::<f64>($($arg),*),
            DataType::F8E4M3 => $f::<F8E4M3>($($arg),*),
            DataType::F8E5M2 => $f::<F8E5M2>($($arg),*),
        }
    };
}

fn mix(seed: u64, rank: usize, i: usize) -> u64 {
    let mut h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (rank as u64)
            .wrapping_add(1)
            .wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ seed.wrapping_mul(0x1656_67B1_9E37_79F9);
    h ^= h >> 29;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^ (h >> 32)
}

/// Byte `k` of rank `rank`'s send buffer for data-movement collectives.
pub fn pattern(seed: u64, rank: usize, k: usize) -> u8 {
    ((k as u64 ^ (rank as u64) << 40 ^ seed << 48).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// Inputs of a reduction: element `i` of rank `r`'s send buffer.
#[derive(Debug, Clone, Copy)]
pub struct Gen {
    seed: u64,
    op: RedOp,
    signed: bool,
    /// Values lie in [-m, m] (signed) or [0, m].
    m: u64,
    nranks: usize,
}

impl Gen {
    /// Inputs for `T`, `op` over `nranks` ranks.
    pub fn new<T: Elem>(seed: u64, op: RedOp, nranks: usize) -> Gen {
        let m = if T::FLOAT {
            // |every partial sum| <= nranks*m <= EXACT.
            (T::EXACT as u64 / nranks.max(1) as u64).min(1000)
        } else {
            100
        };
        Gen {
            seed,
            op,
            signed: T::SIGNED,
            m,
            nranks,
        }
    }

    /// Element `i` of `rank`'s input.
    pub fn value(&self, rank: usize, i: usize) -> i64 {
        let h = mix(self.seed, rank, i);
        match self.op {
            RedOp::Prod => match h % 8 {
                0 => 2,
                1 if self.signed => -1,
                _ => 1,
            },
            _ if self.signed => (h % (2 * self.m + 1)) as i64 - self.m as i64,
            _ => (h % (self.m + 1)) as i64,
        }
    }

    /// The exact integer result at `i` before the type's wrapping (avg: the sum).
    fn fold_int(&self, i: usize) -> i128 {
        let vals = (0..self.nranks).map(|r| self.value(r, i) as i128);
        match self.op {
            RedOp::Sum | RedOp::Avg => vals.fold(0i128, i128::wrapping_add),
            RedOp::Prod => vals.fold(1i128, i128::wrapping_mul),
            RedOp::Min => vals.min().unwrap_or(0),
            RedOp::Max => vals.max().unwrap_or(0),
        }
    }

    /// Whether `got` is the right result at element `i`.
    fn ok<T: Elem>(&self, i: usize, got: T) -> bool {
        if T::FLOAT {
            let exact = match self.op {
                // Powers of two: exact in f64 for any realistic number of ranks.
                RedOp::Prod => (0..self.nranks).map(|r| self.value(r, i) as f64).product(),
                _ => self.fold_int(i) as f64,
            };
            if self.op == RedOp::Avg {
                let want = exact / self.nranks as f64;
                let g = got.to_f64();
                (g - want).abs() <= T::TOL * want.abs().max(1.0)
            } else {
                got.same(T::from_f64(exact))
            }
        } else {
            let v = self.fold_int(i);
            let want = if self.op == RedOp::Avg {
                T::from_int(T::from_int(v).to_int() / self.nranks as i128)
            } else {
                T::from_int(v)
            };
            got.same(want)
        }
    }
}

/// Bytes below which a buffer is filled or checked on the calling thread.
const PIECE_MIN: usize = 8 << 20;

/// The length of the pieces a `len`-byte buffer of `es`-byte elements is cut
/// into: whole elements, one piece per available core, at least [`PIECE_MIN`].
/// Filling and checking multi-GiB buffers element by element on one core takes
/// minutes; the pieces are independent (every value depends only on its index).
fn piece_len(len: usize, es: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    len.div_ceil(cores).max(PIECE_MIN).div_ceil(es) * es
}

/// `f(piece, offset)` over `buf` cut by [`piece_len`], one thread per piece.
fn par_fill(buf: &mut [u8], es: usize, f: impl Fn(&mut [u8], usize) + Sync) {
    let p = piece_len(buf.len(), es);
    if buf.len() <= p {
        return f(buf, 0);
    }
    let f = &f;
    std::thread::scope(|s| {
        for (k, c) in buf.chunks_mut(p).enumerate() {
            s.spawn(move || f(c, k * p));
        }
    });
}

/// The sum of `f(piece, offset)` over `out` cut by [`piece_len`], one thread per piece.
fn par_count(out: &[u8], es: usize, f: impl Fn(&[u8], usize) -> u64 + Sync) -> u64 {
    let p = piece_len(out.len(), es);
    if out.len() <= p {
        return f(out, 0);
    }
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = out
            .chunks(p)
            .enumerate()
            .map(|(k, c)| s.spawn(move || f(c, k * p)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .sum()
    })
}

fn fill_values<T: Elem>(buf: &mut [u8], seed: u64, op: RedOp, nranks: usize, rank: usize) {
    let g = Gen::new::<T>(seed, op, nranks);
    par_fill(buf, T::SIZE, |piece, off| {
        let first = off / T::SIZE;
        for (i, c) in piece.chunks_exact_mut(T::SIZE).enumerate() {
            T::from_int(g.value(rank, first + i) as i128).put(c);
        }
    });
}

fn check_values<T: Elem>(out: &[u8], seed: u64, op: RedOp, nranks: usize, base: usize) -> u64 {
    let g = Gen::new::<T>(seed, op, nranks);
    par_count(out, T::SIZE, |piece, off| {
        let first = base + off / T::SIZE;
        piece
            .chunks_exact(T::SIZE)
            .enumerate()
            .filter(|(j, c)| !g.ok(first + j, T::get(c)))
            .count() as u64
    })
}

fn fill_bytes(buf: &mut [u8], seed: u64, rank: usize) {
    par_fill(buf, 1, |piece, off| {
        for (k, b) in piece.iter_mut().enumerate() {
            *b = pattern(seed, rank, off + k);
        }
    });
}

/// Wrong elements of `out` against bytes `base..` of `src`'s input.
fn check_bytes(out: &[u8], es: usize, seed: u64, src: usize, base: usize) -> u64 {
    par_count(out, es, |piece, off| {
        piece
            .chunks_exact(es)
            .enumerate()
            .filter(|(e, c)| {
                c.iter()
                    .enumerate()
                    .any(|(b, &x)| x != pattern(seed, src, base + off + e * es + b))
            })
            .count() as u64
    })
}

/// The byte the output is poisoned with before a checked call.
pub fn poison(seed: u64) -> u8 {
    0xA5 ^ (seed as u8).wrapping_mul(0x3D)
}

/// What one rank of a collective needs to fill its input and check its output.
#[derive(Debug, Clone)]
pub struct Case {
    /// The collective.
    pub kind: CollKind,
    /// Element type.
    pub dtype: DataType,
    /// Operator (reductions).
    pub op: RedOp,
    /// NCCL's count.
    pub count: usize,
    /// Root (rooted collectives).
    pub root: usize,
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
}

impl Case {
    /// Write this rank's input (`buf` holds exactly the send elements).
    pub fn fill_input(&self, seed: u64, buf: &mut [u8]) {
        if self.kind.reduces() {
            by_type!(
                self.dtype,
                fill_values(buf, seed, self.op, self.nranks, self.rank)
            )
        } else {
            fill_bytes(buf, seed, self.rank)
        }
    }

    /// Wrong elements of this rank's output (`out` holds exactly the receive elements).
    pub fn check_output(&self, seed: u64, out: &[u8]) -> u64 {
        let (n, r, c, es) = (self.nranks, self.rank, self.count, self.dtype.size());
        let blk = c * es;
        let blocks = |src_off: &dyn Fn(usize) -> usize| -> u64 {
            (0..n)
                .map(|q| check_bytes(&out[q * blk..(q + 1) * blk], es, seed, q, src_off(q)))
                .sum()
        };
        match self.kind {
            // Non-root ranks of reduce and gather receive nothing.
            CollKind::Reduce | CollKind::Gather if r != self.root => 0,
            CollKind::AllReduce | CollKind::Reduce => {
                by_type!(self.dtype, check_values(out, seed, self.op, n, 0))
            }
            CollKind::ReduceScatter => {
                by_type!(self.dtype, check_values(out, seed, self.op, n, r * c))
            }
            CollKind::AllGather | CollKind::Gather => blocks(&|_| 0),
            CollKind::AllToAll => blocks(&|_| r * blk),
            CollKind::Broadcast => check_bytes(out, es, seed, self.root, 0),
            CollKind::Scatter => check_bytes(out, es, seed, self.root, r * blk),
            CollKind::AllToAllV => {
                let mine = vcounts(r, n, c);
                (0..n)
                    .map(|q| {
                        let at = mine.recv_displs[q] * es;
                        let len = mine.recv_counts[q] * es;
                        let from = vcounts(q, n, c).send_displs[r] * es;
                        check_bytes(&out[at..at + len], es, seed, q, from)
                    })
                    .sum()
            }
            CollKind::Barrier => 0,
        }
    }
}

/// fxperf's all-to-all-v counts: rank `rank` of `nranks` with alltoall's
/// per-peer `count`. Every rank sends and receives `T = nranks*count`
/// elements; rank r sends peer p `floor(T*(1+d)/(n(n+1)/2))`, d = (p-r) mod n,
/// plus the rounding remainder when d = n-1. Displacements are contiguous in
/// peer order.
pub fn vcounts(rank: usize, nranks: usize, count: usize) -> VCounts {
    let n = nranks.max(1);
    let total = (n * count) as u128;
    let wsum = (n * (n + 1) / 2) as u128;
    let share = |d: usize| (total * (1 + d) as u128 / wsum) as usize;
    let rem = total as usize - (0..n).map(share).sum::<usize>();
    let cnt = |d: usize| share(d) + if d == n - 1 { rem } else { 0 };
    let send_counts: Vec<usize> = (0..n).map(|p| cnt((p + n - rank) % n)).collect();
    let recv_counts: Vec<usize> = (0..n).map(|q| cnt((rank + n - q) % n)).collect();
    let displs = |c: &[usize]| {
        c.iter()
            .scan(0, |acc, &x| {
                let d = *acc;
                *acc += x;
                Some(d)
            })
            .collect()
    };
    VCounts {
        send_displs: displs(&send_counts),
        recv_displs: displs(&recv_counts),
        send_counts,
        recv_counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcounts_balance() {
        for n in 1..9 {
            for count in [0, 1, 3, 16, 1000] {
                let all: Vec<VCounts> = (0..n).map(|r| vcounts(r, n, count)).collect();
                for r in 0..n {
                    assert_eq!(all[r].send_counts.iter().sum::<usize>(), n * count);
                    assert_eq!(all[r].recv_counts.iter().sum::<usize>(), n * count);
                    for q in 0..n {
                        assert_eq!(all[r].recv_counts[q], all[q].send_counts[r]);
                    }
                }
            }
        }
        let v = vcounts(0, 4, 16);
        assert_eq!(v.send_counts, vec![6, 12, 19, 27]);
        assert_eq!(v.send_displs, vec![0, 6, 18, 37]);
    }

    /// Simulate the reduction the way a library might (any order, in the
    /// type) and check that the expected values match exactly.
    fn simulate<T: Elem>(op: RedOp, n: usize) -> u64 {
        let es = T::SIZE;
        let count = 257;
        let ins: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                let mut b = vec![0u8; count * es];
                fill_values::<T>(&mut b, 7, op, n, r);
                b
            })
            .collect();
        let mut out = vec![0u8; count * es];
        for i in 0..count {
            // Reverse rank order, accumulating in the type.
            let get = |r: usize| T::get(&ins[r][i * es..]);
            let mut acc = get(n - 1);
            for r in (0..n - 1).rev() {
                let (a, b) = (acc, get(r));
                acc = if T::FLOAT {
                    let (x, y) = (a.to_f64(), b.to_f64());
                    T::from_f64(match op {
                        RedOp::Sum | RedOp::Avg => x + y,
                        RedOp::Prod => x * y,
                        RedOp::Min => x.min(y),
                        RedOp::Max => x.max(y),
                    })
                } else {
                    let (x, y) = (a.to_int(), b.to_int());
                    T::from_int(match op {
                        RedOp::Sum | RedOp::Avg => x.wrapping_add(y),
                        RedOp::Prod => x.wrapping_mul(y),
                        RedOp::Min => x.min(y),
                        RedOp::Max => x.max(y),
                    })
                };
            }
            if op == RedOp::Avg {
                acc = if T::FLOAT {
                    T::from_f64(acc.to_f64() / n as f64)
                } else {
                    T::from_int(acc.to_int() / n as i128)
                };
            }
            acc.put(&mut out[i * es..]);
        }
        check_values::<T>(&out, 7, op, n, 0)
    }

    #[test]
    fn expected_values_are_exact() {
        for n in [1, 2, 3, 4, 7, 16, 33] {
            for op in RedOp::ALL {
                assert_eq!(simulate::<i8>(op, n), 0, "i8 {op} {n}");
                assert_eq!(simulate::<u8>(op, n), 0, "u8 {op} {n}");
                assert_eq!(simulate::<i32>(op, n), 0, "i32 {op} {n}");
                assert_eq!(simulate::<u64>(op, n), 0, "u64 {op} {n}");
                assert_eq!(simulate::<f32>(op, n), 0, "f32 {op} {n}");
                assert_eq!(simulate::<f64>(op, n), 0, "f64 {op} {n}");
                assert_eq!(simulate::<F16>(op, n), 0, "half {op} {n}");
                assert_eq!(simulate::<Bf16>(op, n), 0, "bfloat16 {op} {n}");
            }
        }
    }

    /// Buffers big enough to be cut into pieces on several threads are filled
    /// and checked exactly as element-by-element loops would.
    #[test]
    fn pieces_cover_big_buffers() {
        let len = 3 * PIECE_MIN + 4 * 5;
        let mut b = vec![0u8; len];
        fill_bytes(&mut b, 9, 1);
        assert!(b.iter().enumerate().all(|(k, &x)| x == pattern(9, 1, k)));
        assert_eq!(check_bytes(&b[4..], 4, 9, 1, 4), 0);
        b[2 * PIECE_MIN + 6] ^= 1;
        b[len - 1] ^= 1;
        assert_eq!(check_bytes(&b, 4, 9, 1, 0), 2);

        fill_values::<i32>(&mut b, 3, RedOp::Max, 1, 0);
        let g = Gen::new::<i32>(3, RedOp::Max, 1);
        assert!(b
            .chunks_exact(4)
            .enumerate()
            .all(|(i, c)| i32::get(c) as i64 == g.value(0, i)));
        // One rank: the output of max is its input.
        assert_eq!(check_values::<i32>(&b, 3, RedOp::Max, 1, 0), 0);
        assert_eq!(check_values::<i32>(&b[8..], 3, RedOp::Max, 1, 2), 0);
        b[PIECE_MIN + 5] ^= 0x40;
        assert_eq!(check_values::<i32>(&b, 3, RedOp::Max, 1, 0), 1);
    }

    #[test]
    fn check_catches_errors() {
        let c = Case {
            kind: CollKind::AllGather,
            dtype: DataType::I32,
            op: RedOp::Sum,
            count: 8,
            root: 0,
            rank: 0,
            nranks: 2,
        };
        let mut out = vec![0u8; 2 * 8 * 4];
        for q in 0..2 {
            let c2 = Case {
                rank: q,
                ..c.clone()
            };
            c2.fill_input(3, &mut out[q * 32..(q + 1) * 32]);
        }
        assert_eq!(c.check_output(3, &out), 0);
        out[33] ^= 1;
        assert_eq!(c.check_output(3, &out), 1);
        assert_eq!(c.check_output(4, &out), 16);
    }
}
