//! Collective scenarios of `fxtest-worker` (included with `#[path]` from the
//! binary): a reference model that every rank evaluates on its own from the
//! deterministic inputs of all ranks, and the scenarios built on it.
//!
//! The model is independent of the library: its own f16/bf16 conversions,
//! its own reductions, its own reading of NCCL's buffer layouts.

/// Kernel parameters for `ferrocx_sdk::kernels::launch`: a pointer to each
/// value (the values must outlive the launch call). Defined before the
/// modules that use it (devnet, moe).
macro_rules! kernel_params {
    ($($v:expr),*) => { [$((&$v as *const _ as *mut std::ffi::c_void)),*] };
}

pub mod bad;
pub mod capture_drop;
pub mod ce_direct;
pub mod ce_hang;
pub mod ce_rooted;
pub mod device;
pub mod devnet;
pub mod devnet_fake;
pub mod hang;
pub mod host_p2p;
pub mod matrix;
pub mod mismatch;
pub mod mix;
pub mod moe;
pub mod p2p;
pub mod p2p_graph;
pub mod plugin;
pub mod probe;
pub mod repeat;
pub mod selection;
pub mod shrink;
pub mod soak;

use ferrocx::{Algo, Request};
use ferrocx::{
    Bf16, CollKind, CollSpec, Communicator, DataType, Group, RedOp, VCounts, F16, F8E4M3, F8E5M2,
};

/// Bytes of canary kept after every buffer's visible length.
pub const TAIL: usize = 16;
/// What untouched memory holds.
pub const CANARY: u8 = 0xA5;

/// SIGKILL this process after `ms` milliseconds (a rank dying mid-run).
pub fn kill_self_after(ms: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        // SAFETY: plain libc calls on our own pid.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    });
}

/// Format a library error.
pub fn e2s(e: ferrocx::Error) -> String {
    e.to_string()
}

/// SplitMix64 finalizer.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash of a few values.
pub fn hash(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x5EED_0000_0000_0000, |h, &p| mix64(h ^ p))
}

/// A byte buffer aligned to 8 bytes, with [`TAIL`] canary bytes after its
/// visible length (to catch writes past the end).
pub struct ABuf {
    words: Vec<u64>,
    len: usize,
}

impl ABuf {
    /// `len` visible bytes, all `fill`; the tail is canary.
    pub fn new(len: usize, fill: u8) -> Self {
        let mut b = ABuf {
            words: vec![u64::from_ne_bytes([CANARY; 8]); (len + TAIL).div_ceil(8)],
            len,
        };
        b.bytes_mut().fill(fill);
        b
    }

    /// A buffer holding a copy of `data`.
    pub fn from_bytes(data: &[u8]) -> Self {
        let mut b = ABuf::new(data.len(), CANARY);
        b.bytes_mut().copy_from_slice(data);
        b
    }

    fn all(&self) -> &[u8] {
        // SAFETY: u64 has no padding; the byte view covers exactly the vector's storage.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 8) }
    }

    fn all_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `all`; every byte pattern is a valid u64.
        unsafe {
            std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.words.len() * 8)
        }
    }

    /// The visible bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.all()[..self.len]
    }

    /// The visible bytes, mutable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let l = self.len;
        &mut self.all_mut()[..l]
    }

    /// Visible length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether every byte after the visible length is still canary.
    pub fn tail_intact(&self) -> bool {
        self.all()[self.len..].iter().all(|&b| b == CANARY)
    }
}

/// View 8-aligned bytes as `f32`s.
pub fn as_f32(b: &[u8]) -> &[f32] {
    assert!((b.as_ptr() as usize).is_multiple_of(4) && b.len().is_multiple_of(4));
    // SAFETY: alignment and length checked; every bit pattern is a valid f32.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), b.len() / 4) }
}

/// View 8-aligned bytes as mutable `f32`s.
pub fn as_f32_mut(b: &mut [u8]) -> &mut [f32] {
    assert!((b.as_ptr() as usize).is_multiple_of(4) && b.len().is_multiple_of(4));
    // SAFETY: as in `as_f32`.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast(), b.len() / 4) }
}

// ---------------------------------------------------------------- floats

/// IEEE binary16 bits → f32 (exact). Written here, not taken from the library.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = (h >> 10) & 0x1f;
    let man = (h & 0x3ff) as u32;
    match exp {
        0 => sign * man as f32 * 2f32.powi(-24),
        0x1f if man == 0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        e => f32::from_bits(((h as u32 & 0x8000) << 16) | ((e as u32 + 112) << 23) | (man << 13)),
    }
}

/// f32 → IEEE binary16 bits, round to nearest even (overflow → inf).
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1 << shift) - 1);
        let mut r = m >> shift;
        if rem > half || (rem == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && r & 1 == 1) {
        r += 1;
    }
    sign | r as u16
}

/// bfloat16 bits → f32.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 → bfloat16 bits, round to nearest even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let lower = b & 0xffff;
    let mut r = b >> 16;
    if lower > 0x8000 || (lower == 0x8000 && r & 1 == 1) {
        r += 1;
    }
    r as u16
}

/// Distance in units in the last place between two floats given as bits of
/// `width` bits (sign-magnitude mapped onto a line).
fn ulps(a: u64, b: u64, width: u32) -> u64 {
    let sign = 1u64 << (width - 1);
    let key = |x: u64| -> i128 {
        if x & sign != 0 {
            -((x & !sign) as i128)
        } else {
            x as i128
        }
    };
    (key(a) - key(b)).unsigned_abs() as u64
}

/// A float input that keeps every reduction exact: halves in [-16, 16]
/// (sums of 4 ranks fit bf16's 8 significant bits), or {1, 2, -1, 0.5} for products.
fn float_input(h: u64, op: RedOp) -> f32 {
    if op == RedOp::Prod {
        [1.0, 2.0, -1.0, 0.5][(h % 4) as usize]
    } else {
        ((h % 65) as i32 - 32) as f32 * 0.5
    }
}

// ---------------------------------------------------------------- elements

/// One element type of the model.
pub trait El: Copy {
    /// Bytes.
    const SIZE: usize;
    /// Read from native-endian bytes.
    fn load(b: &[u8]) -> Self;
    /// Write as native-endian bytes.
    fn store(self, b: &mut [u8]);
    /// Input for a reduction with `op` from a hash.
    fn gen(h: u64, op: RedOp) -> Self;
    /// `a op b` (`Avg` adds).
    fn red(op: RedOp, a: Self, b: Self) -> Self;
    /// The average's final division.
    fn avg(sum: Self, n: usize) -> Self;
    /// Whether `got` is acceptable for `exp` (exact, except 1 ulp for float averages).
    fn close(got: Self, exp: Self, op: RedOp) -> bool;
    /// For messages.
    fn show(self) -> String;
}

macro_rules! int_el {
    ($($t:ty),*) => {$(
        impl El for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().expect("element size"))
            }
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes())
            }
            fn gen(h: u64, _op: RedOp) -> Self {
                h as $t
            }
            fn red(op: RedOp, a: Self, b: Self) -> Self {
                match op {
                    RedOp::Sum | RedOp::Avg => a.wrapping_add(b),
                    RedOp::Prod => a.wrapping_mul(b),
                    RedOp::Min => a.min(b),
                    RedOp::Max => a.max(b),
                }
            }
            fn avg(sum: Self, n: usize) -> Self {
                sum.wrapping_div(n as $t)
            }
            fn close(got: Self, exp: Self, _op: RedOp) -> bool {
                got == exp
            }
            fn show(self) -> String {
                format!("{self}")
            }
        }
    )*};
}
int_el!(i8, u8, i32, u32, i64, u64);

fn fred<F: PartialOrd + std::ops::Add<Output = F> + std::ops::Mul<Output = F>>(
    op: RedOp,
    a: F,
    b: F,
) -> F {
    match op {
        RedOp::Sum | RedOp::Avg => a + b,
        RedOp::Prod => a * b,
        RedOp::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
        RedOp::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
    }
}

impl El for f32 {
    const SIZE: usize = 4;
    fn load(b: &[u8]) -> Self {
        f32::from_ne_bytes(b.try_into().expect("element size"))
    }
    fn store(self, b: &mut [u8]) {
        b.copy_from_slice(&self.to_ne_bytes())
    }
    fn gen(h: u64, op: RedOp) -> Self {
        float_input(h, op)
    }
    fn red(op: RedOp, a: Self, b: Self) -> Self {
        fred(op, a, b)
    }
    fn avg(sum: Self, n: usize) -> Self {
        sum / n as f32
    }
    fn close(got: Self, exp: Self, op: RedOp) -> bool {
        got == exp
            || (op == RedOp::Avg && ulps(got.to_bits() as u64, exp.to_bits() as u64, 32) <= 1)
    }
    fn show(self) -> String {
        format!("{self:?}")
    }
}

impl El for f64 {
    const SIZE: usize = 8;
    fn load(b: &[u8]) -> Self {
        f64::from_ne_bytes(b.try_into().expect("element size"))
    }
    fn store(self, b: &mut [u8]) {
        b.copy_from_slice(&self.to_ne_bytes())
    }
    fn gen(h: u64, op: RedOp) -> Self {
        float_input(h, op) as f64
    }
    fn red(op: RedOp, a: Self, b: Self) -> Self {
        fred(op, a, b)
    }
    fn avg(sum: Self, n: usize) -> Self {
        sum / n as f64
    }
    fn close(got: Self, exp: Self, op: RedOp) -> bool {
        got == exp || (op == RedOp::Avg && ulps(got.to_bits(), exp.to_bits(), 64) <= 1)
    }
    fn show(self) -> String {
        format!("{self:?}")
    }
}

/// fp8 inputs: integers of magnitude ≤ `span` (products: ±1, 2, ½), so that every
/// partial sum stays exact up to 8 ranks (e4m3 holds the integers to 16, e5m2 to 8).
fn fp8_input(h: u64, op: RedOp, span: u64) -> f32 {
    if op == RedOp::Prod {
        return float_input(h, op);
    }
    (h % (2 * span + 1)) as f32 - span as f32
}

/// 16- and 8-bit floats on their bits (`$bits`), computed on as f32 (`$to`, `$from`);
/// inputs from `$gen(h, op)`.
macro_rules! narrow_el {
    ($t:ident: $bits:ty, $to:path, $from:path, $gen:expr) => {
        impl El for $t {
            const SIZE: usize = std::mem::size_of::<$bits>();
            fn load(b: &[u8]) -> Self {
                $t(<$bits>::from_ne_bytes(b.try_into().expect("element size")))
            }
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.0.to_ne_bytes())
            }
            fn gen(h: u64, op: RedOp) -> Self {
                $t($from($gen(h, op)))
            }
            fn red(op: RedOp, a: Self, b: Self) -> Self {
                $t($from(fred(op, $to(a.0), $to(b.0))))
            }
            fn avg(sum: Self, n: usize) -> Self {
                $t($from($to(sum.0) / n as f32))
            }
            fn close(got: Self, exp: Self, op: RedOp) -> bool {
                let bits = 8 * std::mem::size_of::<$bits>() as u32;
                $to(got.0) == $to(exp.0)
                    || (op == RedOp::Avg && ulps(got.0 as u64, exp.0 as u64, bits) <= 1)
            }
            fn show(self) -> String {
                format!("{:?} ({:#x})", $to(self.0), self.0)
            }
        }
    };
}
narrow_el!(F16: u16, f16_to_f32, f32_to_f16, float_input);
narrow_el!(Bf16: u16, bf16_to_f32, f32_to_bf16, float_input);
narrow_el!(
    F8E4M3: u8,
    ferrocx::algo::fp8::f8e4m3_to_f32,
    ferrocx::algo::fp8::f32_to_f8e4m3,
    |h, op| fp8_input(h, op, 2)
);
narrow_el!(
    F8E5M2: u8,
    ferrocx::algo::fp8::f8e5m2_to_f32,
    ferrocx::algo::fp8::f32_to_f8e5m2,
    |h, op| fp8_input(h, op, 1)
);

/// Call `f::<T>(args)` with `T` the Rust type of a [`DataType`].
macro_rules! dispatch {
    ($dt:expr, $f:ident, ($($a:expr),*)) => {
        match $dt {
            DataType::I8 => $f::<i8>($($a),*),
            DataType::U8 => $f::<u8>($($a),*),
            DataType::I32 => $f::<i32>($($a),*),
            DataType::U32 => $f::<u32>($($a),*),
            DataType::I64 => $f::<i64>($($a),*),
            DataType::U64 => $f::<u64>($($a),*),
            DataType::F16 => $f::<F16>($($a),*),
            DataType::Bf16 => $f::<Bf16>($($a),*),
            DataType::F32 => $f::<f32>($($a),*),
            DataType::F64 => $f::<f64>($($a),*),
            DataType::F8E4M3 => $f::<F8E4M3>($($a),*),
            DataType::F8E5M2 => $f::<F8E5M2>($($a),*),
        }
    };
}

/// Elements `first..` of a typed input.
fn gen_typed<T: El>(op: RedOp, base: u64, first: usize, out: &mut [u8]) {
    for (i, ch) in out.chunks_exact_mut(T::SIZE).enumerate() {
        T::gen(mix64(base ^ (first + i) as u64), op).store(ch);
    }
}

/// Bytes `first..` of a raw input (byte `i` is byte `i % 8` of the hash of `i / 8`).
fn gen_raw(base: u64, first: usize, out: &mut [u8]) {
    let (mut word, mut bytes) = (usize::MAX, [0u8; 8]);
    for (j, b) in out.iter_mut().enumerate() {
        let i = first + j;
        if i / 8 != word {
            word = i / 8;
            bytes = mix64(base ^ word as u64).to_ne_bytes();
        }
        *b = bytes[i % 8];
    }
}

/// `dst = fold(op, srcs)` element by element, then the average's division.
fn reduce_typed<T: El>(op: RedOp, srcs: &[&[u8]], dst: &mut [u8]) {
    let es = T::SIZE;
    for (i, d) in dst.chunks_exact_mut(es).enumerate() {
        let at = |s: &[u8]| T::load(&s[i * es..(i + 1) * es]);
        let mut acc = at(srcs[0]);
        for s in &srcs[1..] {
            acc = T::red(op, acc, at(s));
        }
        if op == RedOp::Avg {
            acc = T::avg(acc, srcs.len());
        }
        acc.store(d);
    }
}

fn close_typed<T: El>(op: RedOp, got: &[u8], exp: &[u8]) -> bool {
    T::close(T::load(got), T::load(exp), op)
}

fn show_typed<T: El>(b: &[u8]) -> String {
    T::load(b).show()
}

/// Show one element of `dtype`.
pub fn show(dtype: DataType, b: &[u8]) -> String {
    dispatch!(dtype, show_typed, (b))
}

// ---------------------------------------------------------------- cases

/// Elements rank `src` sends rank `dst` in an all-to-all-v of base count `c`
/// (some zero, most different).
pub fn vcnt(c: usize, src: usize, dst: usize) -> usize {
    if c == 0 {
        0
    } else {
        c * ((src * 7 + dst * 3) % 5) / 3 + (src + dst) % 2
    }
}

/// Rank `s`'s send displacements (peers in reverse order, 1-element gaps) and extent.
pub fn vsend(c: usize, s: usize, n: usize) -> (Vec<usize>, usize) {
    let mut d = vec![0; n];
    let (mut run, mut ext) = (0, 0);
    for p in (0..n).rev() {
        d[p] = run;
        ext = ext.max(run + vcnt(c, s, p));
        run += vcnt(c, s, p) + 1;
    }
    (d, ext)
}

/// Rank `r`'s receive displacements (peers in order, 2-element gaps) and extent.
pub fn vrecv(c: usize, r: usize, n: usize) -> (Vec<usize>, usize) {
    let mut d = vec![0; n];
    let (mut run, mut ext) = (0, 0);
    for (p, dp) in d.iter_mut().enumerate() {
        *dp = run;
        ext = ext.max(run + vcnt(c, p, r));
        run += vcnt(c, p, r) + 2;
    }
    (d, ext)
}

/// Rank `r`'s all-to-all-v counts.
pub fn vcounts(c: usize, r: usize, n: usize) -> VCounts {
    VCounts {
        send_counts: (0..n).map(|p| vcnt(c, r, p)).collect(),
        send_displs: vsend(c, r, n).0,
        recv_counts: (0..n).map(|p| vcnt(c, p, r)).collect(),
        recv_displs: vrecv(c, r, n).0,
    }
}

/// One collective call, identical on every rank.
#[derive(Debug, Clone)]
pub struct Case {
    /// Collective.
    pub kind: CollKind,
    /// Element type.
    pub dtype: DataType,
    /// Operator (reducing kinds).
    pub op: RedOp,
    /// NCCL count (all-to-all-v: base of [`vcnt`]).
    pub count: usize,
    /// Root (rooted kinds).
    pub root: usize,
    /// In-place layout.
    pub in_place: bool,
    /// Forced algorithm.
    pub algo: Option<Algo>,
    /// Seed of the inputs.
    pub seed: u64,
}

impl Case {
    /// A case with defaults (sum, root 0, out of place, automatic algorithm).
    pub fn new(kind: CollKind, dtype: DataType, count: usize, seed: u64) -> Self {
        Case {
            kind,
            dtype,
            op: RedOp::Sum,
            count,
            root: 0,
            in_place: false,
            algo: None,
            seed,
        }
    }

    /// Everything about the case, for messages (identical on every rank).
    pub fn describe(&self, n: usize) -> String {
        let mut s = format!(
            "{} dtype={} count={}",
            self.kind.name(),
            self.dtype.name(),
            self.count
        );
        if self.kind.reduces() {
            s += &format!(" op={}", self.op.name());
        }
        if self.kind.rooted() {
            s += &format!(" root={}", self.root);
        }
        s += if self.in_place {
            " in-place"
        } else {
            " out-of-place"
        };
        s += &format!(
            " algo={} nranks={n} seed={:#x}",
            self.algo.map_or("auto", |a| a.name()),
            self.seed
        );
        s
    }

    /// The library's spec for this case on rank `r`.
    pub fn spec(&self, r: usize, n: usize) -> CollSpec {
        let mut s = CollSpec::new(self.kind, self.dtype, self.count)
            .op(self.op)
            .root(self.root);
        if let Some(a) = self.algo {
            s = s.algo(a);
        }
        if self.kind == CollKind::AllToAllV {
            s = s.with_v(vcounts(self.count, r, n));
        }
        s
    }

    /// Elements of rank `p`'s input.
    fn send_elems(&self, p: usize, n: usize) -> usize {
        let c = self.count;
        match self.kind {
            CollKind::ReduceScatter | CollKind::AllToAll | CollKind::Scatter => n * c,
            CollKind::AllToAllV => vsend(c, p, n).1,
            CollKind::Barrier => 0,
            _ => c,
        }
    }

    /// Rank `p`'s input bytes.
    pub fn input(&self, p: usize, n: usize) -> Vec<u8> {
        self.input_part(p, 0, self.send_elems(p, n))
    }

    /// Elements `lo..hi` of rank `p`'s input.
    pub fn input_part(&self, p: usize, lo: usize, hi: usize) -> Vec<u8> {
        let es = self.dtype.size();
        let mut v = vec![0u8; (hi - lo) * es];
        let base = hash(&[self.seed, p as u64]);
        if self.kind.reduces() {
            dispatch!(self.dtype, gen_typed, (self.op, base, lo, &mut v));
        } else {
            gen_raw(base, lo * es, &mut v);
        }
        v
    }
}

/// Per element of a checked buffer: how to compare.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cmp {
    /// Bytes must be equal.
    Exact,
    /// A reduction result: [`El::close`].
    Reduced,
    /// Anything goes.
    Any,
}

/// A case on one rank: its buffers, filled, and what they must hold afterwards.
pub struct Prepared {
    /// The case.
    pub case: Case,
    /// Its spec.
    pub spec: CollSpec,
    rank: usize,
    nranks: usize,
    /// Send buffer (out of place; empty in place).
    send: ABuf,
    send_orig: Vec<u8>,
    /// Receive buffer (out of place) or the one buffer (in place).
    buf: ABuf,
    expected: Vec<u8>,
    cmp: Vec<Cmp>,
}

impl Prepared {
    /// Fill the buffers of `case` for rank `r` of `n` and compute the expected result.
    pub fn new(case: &Case, r: usize, n: usize) -> Self {
        let c = case.count;
        let es = case.dtype.size();
        let root = case.root;
        // Rank p's input elements lo..hi (only what this rank's result needs is generated).
        let part = |p: usize, lo: usize, hi: usize| case.input_part(p, lo, hi);
        let mine = &case.input(r, n);
        let el = |e: usize| e * es;
        let reduced = |lo: usize, hi: usize| -> Vec<u8> {
            let parts: Vec<Vec<u8>> = (0..n).map(|p| part(p, lo, hi)).collect();
            let srcs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let mut out = vec![0u8; el(hi - lo)];
            dispatch!(case.dtype, reduce_typed, (case.op, &srcs, &mut out));
            out
        };
        // The output this rank must see, as (offset in elements, bytes, reduced?)
        // pieces of the out-of-place receive buffer; and its length in elements.
        let mut pieces: Vec<(usize, Vec<u8>, bool)> = Vec::new();
        let is_root = r == root;
        let recv_elems = match case.kind {
            CollKind::AllReduce => {
                pieces.push((0, reduced(0, c), true));
                c
            }
            CollKind::AllGather => {
                for p in 0..n {
                    pieces.push((p * c, part(p, 0, c), false));
                }
                n * c
            }
            CollKind::ReduceScatter => {
                pieces.push((0, reduced(r * c, (r + 1) * c), true));
                c
            }
            CollKind::Broadcast => {
                pieces.push((0, part(root, 0, c), false));
                c
            }
            CollKind::Reduce => {
                if is_root {
                    pieces.push((0, reduced(0, c), true));
                }
                c
            }
            CollKind::AllToAll => {
                for p in 0..n {
                    pieces.push((p * c, part(p, r * c, (r + 1) * c), false));
                }
                n * c
            }
            CollKind::AllToAllV => {
                let (rd, ext) = vrecv(c, r, n);
                for (p, &at) in rd.iter().enumerate() {
                    let sd = vsend(c, p, n).0[r];
                    pieces.push((at, part(p, sd, sd + vcnt(c, p, r)), false));
                }
                ext
            }
            CollKind::Gather => {
                if is_root {
                    for p in 0..n {
                        pieces.push((p * c, part(p, 0, c), false));
                    }
                }
                n * c
            }
            CollKind::Scatter => {
                pieces.push((0, part(root, r * c, (r + 1) * c), false));
                c
            }
            CollKind::Barrier => 0,
        };
        // Initial buffer contents, where outputs land, and what is not checked.
        let mut any = false;
        let (send_init, buf_init, out_at): (Vec<u8>, Vec<u8>, usize) = if !case.in_place {
            let send = match case.kind {
                // Non-roots' send buffers are unused: alternate empty and junk.
                CollKind::Broadcast | CollKind::Scatter if !is_root => {
                    if case.seed.is_multiple_of(2) {
                        Vec::new()
                    } else {
                        part(root, 0, case.send_elems(root, n))
                            .iter()
                            .map(|b| !b)
                            .collect()
                    }
                }
                _ => mine.clone(),
            };
            (send, vec![CANARY; el(recv_elems)], 0)
        } else {
            match case.kind {
                CollKind::AllReduce | CollKind::AllToAll | CollKind::Reduce => {
                    (Vec::new(), mine.clone(), 0)
                }
                CollKind::ReduceScatter => (Vec::new(), mine.clone(), r * c),
                CollKind::AllGather => {
                    let mut b = vec![CANARY; el(n * c)];
                    b[el(r * c)..el((r + 1) * c)].copy_from_slice(mine);
                    (Vec::new(), b, 0)
                }
                CollKind::Gather if is_root => {
                    let mut b = vec![CANARY; el(n * c)];
                    b[el(r * c)..el((r + 1) * c)].copy_from_slice(mine);
                    (Vec::new(), b, 0)
                }
                CollKind::Gather => (Vec::new(), mine.clone(), 0),
                CollKind::Broadcast if is_root => (Vec::new(), mine.clone(), 0),
                CollKind::Broadcast => (Vec::new(), vec![CANARY; el(c)], 0),
                CollKind::Scatter if is_root => (Vec::new(), mine.clone(), r * c),
                CollKind::Scatter => (Vec::new(), vec![CANARY; el(c)], 0),
                CollKind::AllToAllV => {
                    // Input in the send layout; afterwards only the receive
                    // layout's regions are defined.
                    let mut b = vec![CANARY; mine.len().max(el(recv_elems))];
                    b[..mine.len()].copy_from_slice(mine);
                    any = true;
                    (Vec::new(), b, 0)
                }
                CollKind::Barrier => (Vec::new(), Vec::new(), 0),
            }
        };
        let mut expected = buf_init.clone();
        let mut cmp = vec![if any { Cmp::Any } else { Cmp::Exact }; buf_init.len() / es];
        // Non-root ranks of reduce and gather keep their buffers (in place: their input).
        let unchanged = !is_root && matches!(case.kind, CollKind::Reduce | CollKind::Gather);
        if !(case.in_place && unchanged) {
            for (at, bytes, red) in pieces {
                let at = out_at + at;
                expected[el(at)..el(at) + bytes.len()].copy_from_slice(&bytes);
                for k in &mut cmp[at..at + bytes.len() / es] {
                    *k = if red { Cmp::Reduced } else { Cmp::Exact };
                }
            }
        }
        Prepared {
            spec: case.spec(r, n),
            case: case.clone(),
            rank: r,
            nranks: n,
            send: ABuf::from_bytes(&send_init),
            send_orig: send_init,
            buf: ABuf::from_bytes(&buf_init),
            expected,
            cmp,
        }
    }

    /// Run it alone.
    pub fn run(&mut self, comm: &Communicator) -> ferrocx::Result<()> {
        if self.case.in_place {
            comm.collective_in_place(&self.spec, self.buf.bytes_mut())
        } else {
            comm.collective(&self.spec, self.send.bytes(), self.buf.bytes_mut())
        }
    }

    /// Add it to a group; `typed` uses the typed API where one exists.
    pub fn post<'a>(&'a mut self, g: &mut Group<'a>, typed: bool) -> ferrocx::Result<()> {
        let simple = self.case.algo.is_none() && !self.case.in_place;
        if typed
            && simple
            && self.case.kind == CollKind::AllReduce
            && self.case.dtype == DataType::F32
        {
            return g.all_reduce(
                as_f32(self.send.bytes()),
                as_f32_mut(self.buf.bytes_mut()),
                self.case.op,
            );
        }
        if self.case.in_place {
            g.collective_in_place(&self.spec, self.buf.bytes_mut())
        } else {
            g.collective(&self.spec, self.send.bytes(), self.buf.bytes_mut())
        }
    }

    /// Start it with the raw API.
    ///
    /// # Safety
    /// `self` must not be touched until the request completes.
    pub unsafe fn start(&mut self, comm: &Communicator) -> ferrocx::Result<Request> {
        let recv = (self.buf.bytes_mut().as_mut_ptr(), self.buf.len());
        let send = if self.case.in_place {
            (recv.0 as *const u8, recv.1)
        } else {
            (self.send.bytes().as_ptr(), self.send.len())
        };
        // SAFETY: the buffers live in `self`, which the caller keeps untouched.
        unsafe { comm.start_raw(&self.spec, send, recv, self.case.in_place) }
    }

    /// Compare every byte with the model; a message naming the case and the
    /// first mismatches otherwise.
    pub fn verify(&self) -> Result<(), String> {
        let es = self.case.dtype.size();
        let mut problems = Vec::new();
        if !self.case.in_place && self.send.bytes() != &self.send_orig[..] {
            problems.push("the send buffer was modified".to_string());
        }
        if !self.send.tail_intact() {
            problems.push("bytes after the send buffer were written".to_string());
        }
        if !self.buf.tail_intact() {
            problems.push("bytes after the receive buffer were written".to_string());
        }
        let got = self.buf.bytes();
        let mut bad = 0usize;
        for (i, k) in self.cmp.iter().enumerate() {
            let (g, e) = (
                &got[i * es..(i + 1) * es],
                &self.expected[i * es..(i + 1) * es],
            );
            let ok = match k {
                Cmp::Any => true,
                Cmp::Exact => g == e,
                Cmp::Reduced => {
                    dispatch!(self.case.dtype, close_typed, (self.case.op, g, e))
                }
            };
            if !ok {
                bad += 1;
                if bad <= 4 {
                    let what = if e.iter().all(|&b| b == CANARY) && *k == Cmp::Exact {
                        " (should be untouched)"
                    } else {
                        ""
                    };
                    problems.push(format!(
                        "element {i}: got {} expected {}{what}",
                        show(self.case.dtype, g),
                        show(self.case.dtype, e)
                    ));
                }
            }
        }
        if bad > 4 {
            problems.push(format!("… {bad} wrong elements of {}", self.cmp.len()));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "rank {}: {}: {}",
                self.rank,
                self.case.describe(self.nranks),
                problems.join("; ")
            ))
        }
    }
}

/// Leak check: nothing in flight, no registrations; returns the stats.
pub fn check_idle(comm: &Communicator, when: &str) -> Result<ferrocx::EngineStats, String> {
    let s = comm.stats();
    if s.live_plans != 0 || s.queued_ops != 0 {
        return Err(format!("{when}: work left behind: {s:?}"));
    }
    if comm.registration_count() != 0 {
        return Err(format!(
            "{when}: {} registrations left",
            comm.registration_count()
        ));
    }
    Ok(s)
}
