use super::*;

/// xorshift64*: deterministic test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A byte buffer aligned to 8 (so to every element size).
struct Buf {
    words: Vec<u64>,
    dtype: DataType,
}

impl Buf {
    fn new(dtype: DataType, n: usize) -> Self {
        Buf {
            words: vec![0; (n * dtype.size()).div_ceil(8) + 1],
            dtype,
        }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: plain integers, viewed as bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 8) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: plain integers, viewed as bytes.
        unsafe {
            std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.words.len() * 8)
        }
    }
    /// Element `i`'s bits, zero-extended.
    fn get(&self, i: usize) -> u64 {
        let s = self.dtype.size();
        let mut w = [0u8; 8];
        w[..s].copy_from_slice(&self.bytes()[i * s..(i + 1) * s]);
        u64::from_le_bytes(w)
    }
    fn set(&mut self, i: usize, v: u64) {
        let s = self.dtype.size();
        self.bytes_mut()[i * s..(i + 1) * s].copy_from_slice(&v.to_le_bytes()[..s]);
    }
}

fn is_nan(dt: DataType, bits: u64) -> bool {
    match dt {
        DataType::F16 => bits as u16 & 0x7fff > 0x7c00,
        DataType::Bf16 => bits as u16 & 0x7fff > 0x7f80,
        DataType::F32 => f32::from_bits(bits as u32).is_nan(),
        DataType::F64 => f64::from_bits(bits).is_nan(),
        DataType::F8E4M3 => bits as u8 & 0x7f == 0x7f,
        DataType::F8E5M2 => bits as u8 & 0x7f > 0x7c,
        _ => false,
    }
}

/// Widening and narrowing of an 8-bit float format.
type Fp8Conversions = (fn(u8) -> f32, fn(f32) -> u8);

/// The conversions of an fp8 type.
fn fp8(dt: DataType) -> Option<Fp8Conversions> {
    use crate::fp8::*;
    match dt {
        DataType::F8E4M3 => Some((f8e4m3_to_f32, f32_to_f8e4m3)),
        DataType::F8E5M2 => Some((f8e5m2_to_f32, f32_to_f8e5m2)),
        _ => None,
    }
}

/// A random element: full-range bits for integers; for floats a mix of small
/// exact values and random non-NaN bit patterns (incl. subnormals, inf).
fn random_elem(dt: DataType, rng: &mut Rng) -> u64 {
    let r = rng.next();
    let bits = |x: f64| -> u64 {
        match dt {
            DataType::F16 => f32_to_f16(x as f32) as u64,
            DataType::Bf16 => f32_to_bf16(x as f32) as u64,
            DataType::F32 => (x as f32).to_bits() as u64,
            DataType::F8E4M3 | DataType::F8E5M2 => fp8(dt).expect("fp8").1(x as f32) as u64,
            _ => x.to_bits(),
        }
    };
    if !dt.is_float() {
        return r;
    }
    let v = if r & 3 == 0 {
        bits(((r >> 8) % 2001) as f64 / 8.0 - 125.0)
    } else {
        rng.next()
    };
    let mask = match dt.size() {
        1 => 0xff,
        2 => 0xffff,
        4 => 0xffff_ffff,
        _ => u64::MAX,
    };
    let v = v & mask;
    if is_nan(dt, v) {
        bits(1.5)
    } else {
        v
    }
}

fn sext(dt: DataType, v: u64) -> i128 {
    match dt {
        DataType::I8 => v as u8 as i8 as i128,
        DataType::I32 => v as u32 as i32 as i128,
        DataType::I64 => v as i64 as i128,
        _ => v as i128,
    }
}

fn trunc(dt: DataType, v: i128) -> u64 {
    let v = v as u64;
    match dt.size() {
        1 => v & 0xff,
        2 => v & 0xffff,
        4 => v & 0xffff_ffff,
        _ => v,
    }
}

fn f64_op(op: RedOp, x: f64, y: f64) -> f64 {
    match op {
        RedOp::Sum | RedOp::Avg => x + y,
        RedOp::Prod => x * y,
        RedOp::Min => x.min(y),
        RedOp::Max => x.max(y),
    }
}

/// Widening and narrowing of a 16-bit float format.
type Conversions = (fn(u16) -> f32, fn(f32) -> u16);

/// Scalar reference: integers in i128 then wrapped; f32 in f64 (exact for +
/// and ×) then rounded; f16/bf16 as round(f32 op f32).
fn reference(dt: DataType, op: RedOp, x: u64, y: u64) -> u64 {
    match dt {
        DataType::F32 => {
            let (a, b) = (
                f32::from_bits(x as u32) as f64,
                f32::from_bits(y as u32) as f64,
            );
            (f64_op(op, a, b) as f32).to_bits() as u64
        }
        DataType::F64 => f64_op(op, f64::from_bits(x), f64::from_bits(y)).to_bits(),
        DataType::F8E4M3 | DataType::F8E5M2 => {
            // Exact in f64 (and in f32), rounded once, saturating.
            let (w, n) = fp8(dt).expect("fp8");
            n(f64_op(op, w(x as u8) as f64, w(y as u8) as f64) as f32) as u64
        }
        DataType::F16 | DataType::Bf16 => {
            let (w, n): Conversions = if dt == DataType::F16 {
                (f16_to_f32, f32_to_f16)
            } else {
                (bf16_to_f32, f32_to_bf16)
            };
            let r = f64_op(op, w(x as u16) as f64, w(y as u16) as f64) as f32;
            n(r) as u64
        }
        _ => {
            let (a, b) = (sext(dt, x), sext(dt, y));
            let r = match op {
                RedOp::Sum | RedOp::Avg => a.wrapping_add(b),
                RedOp::Prod => a.wrapping_mul(b),
                RedOp::Min => a.min(b),
                RedOp::Max => a.max(b),
            };
            trunc(dt, r)
        }
    }
}

fn as_f64(dt: DataType, v: u64) -> f64 {
    if let Some((w, _)) = fp8(dt) {
        return w(v as u8) as f64;
    }
    match dt {
        DataType::F16 => f16_to_f32(v as u16) as f64,
        DataType::Bf16 => bf16_to_f32(v as u16) as f64,
        DataType::F32 => f32::from_bits(v as u32) as f64,
        _ => f64::from_bits(v),
    }
}

/// Bit equality, except: any NaN matches any NaN, and min/max may pick
/// either zero when comparing +0 with -0.
fn same(dt: DataType, op: RedOp, got: u64, want: u64) -> bool {
    if got == want || (is_nan(dt, got) && is_nan(dt, want)) {
        return true;
    }
    dt.is_float() && matches!(op, RedOp::Min | RedOp::Max) && as_f64(dt, got) == as_f64(dt, want)
}

#[derive(Clone, Copy, Debug)]
enum Alias {
    Distinct,
    DstIsA,
    DstIsB,
    All,
}

#[test]
fn every_dtype_op_length_and_alias_matches_reference() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for dt in DataType::ALL {
        for op in RedOp::ALL {
            for n in [0usize, 1, 7, 33, 1000] {
                for alias in [Alias::Distinct, Alias::DstIsA, Alias::DstIsB, Alias::All] {
                    let (mut a, mut b) = (Buf::new(dt, n), Buf::new(dt, n));
                    // Guard elements past `n` in every buffer: must stay untouched.
                    let cap = a.words.len() * 8 / dt.size();
                    for i in 0..cap {
                        a.set(i, random_elem(dt, &mut rng));
                        b.set(i, random_elem(dt, &mut rng));
                    }
                    if let Alias::All = alias {
                        b.words.clone_from(&a.words);
                    }
                    let want: Vec<u64> = (0..n)
                        .map(|i| reference(dt, op, a.get(i), b.get(i)))
                        .collect();
                    let mut d = Buf::new(dt, n);
                    for i in 0..cap {
                        d.set(i, random_elem(dt, &mut rng));
                    }
                    let (a0, b0, d0) = (a.words.clone(), b.words.clone(), d.words.clone());
                    let out: &Buf;
                    let guard: &[u64];
                    // SAFETY: buffers hold `n` aligned elements.
                    unsafe {
                        match alias {
                            Alias::Distinct => {
                                let (pa, pb) = (a.ptr(), b.ptr());
                                reduce(dt, op, d.ptr(), pa, pb, n);
                                assert_eq!(a.words, a0);
                                assert_eq!(b.words, b0);
                                out = &d;
                                guard = &d0;
                            }
                            Alias::DstIsA => {
                                let (pa, pb) = (a.ptr(), b.ptr());
                                reduce(dt, op, pa, pa, pb, n);
                                assert_eq!(b.words, b0);
                                out = &a;
                                guard = &a0;
                            }
                            Alias::DstIsB => {
                                let (pa, pb) = (a.ptr(), b.ptr());
                                reduce(dt, op, pb, pa, pb, n);
                                assert_eq!(a.words, a0);
                                out = &b;
                                guard = &b0;
                            }
                            Alias::All => {
                                let pa = a.ptr();
                                reduce(dt, op, pa, pa, pa, n);
                                out = &a;
                                guard = &a0;
                            }
                        }
                    }
                    for (i, w) in want.iter().enumerate() {
                        let got = out.get(i);
                        assert!(
                            same(dt, op, got, *w),
                            "{dt} {op} n={n} {alias:?} [{i}]: {:#x} op {:#x} = {got:#x}, want {w:#x}",
                            if let Alias::DstIsA | Alias::All = alias {
                                Buf { words: a0.clone(), dtype: dt }.get(i)
                            } else {
                                a.get(i)
                            },
                            if let Alias::DstIsB = alias {
                                Buf { words: b0.clone(), dtype: dt }.get(i)
                            } else {
                                b.get(i)
                            },
                        );
                    }
                    let s = dt.size();
                    let g = Buf {
                        words: guard.to_vec(),
                        dtype: dt,
                    };
                    assert_eq!(
                        out.bytes()[n * s..],
                        g.bytes()[n * s..],
                        "{dt} {op} n={n} {alias:?}: wrote past n"
                    );
                }
            }
        }
    }
}

#[test]
fn special_cases() {
    let run = |dt: DataType, op: RedOp, x: u64, y: u64| -> u64 {
        let (mut a, mut b, mut d) = (Buf::new(dt, 1), Buf::new(dt, 1), Buf::new(dt, 1));
        a.set(0, x);
        b.set(0, y);
        // SAFETY: one aligned element each.
        unsafe { reduce(dt, op, d.ptr(), a.ptr(), b.ptr(), 1) };
        d.get(0)
    };
    // Integer wrap.
    assert_eq!(run(DataType::I8, RedOp::Sum, 127, 1), 0x80);
    assert_eq!(run(DataType::U8, RedOp::Prod, 16, 16), 0);
    assert_eq!(
        run(DataType::I32, RedOp::Min, (-5i32) as u32 as u64, 3),
        (-5i32) as u32 as u64
    );
    assert_eq!(run(DataType::U32, RedOp::Max, 0xffff_fffe, 3), 0xffff_fffe);
    assert_eq!(run(DataType::U64, RedOp::Sum, u64::MAX, 2), 1);
    assert_eq!(
        run(DataType::I64, RedOp::Prod, i64::MIN as u64, (-1i64) as u64),
        i64::MIN as u64
    );
    // bf16: 1 + 1/256 is a tie between 1 and 1 + 1/128: stays 1 after rounding.
    let one = f32_to_bf16(1.0) as u64;
    let eps = f32_to_bf16(1.0 / 256.0) as u64;
    assert_eq!(run(DataType::Bf16, RedOp::Sum, one, eps), one);
    // f16: 2048 + 1 rounds to 2048 (tie, even); 2048 + 3 to 2052.
    let h = |x: f32| f32_to_f16(x) as u64;
    assert_eq!(run(DataType::F16, RedOp::Sum, h(2048.0), h(1.0)), h(2048.0));
    assert_eq!(run(DataType::F16, RedOp::Sum, h(2048.0), h(3.0)), h(2052.0));
    assert_eq!(run(DataType::F16, RedOp::Sum, h(65504.0), h(16.0)), 0x7c00);
    assert_eq!(run(DataType::F16, RedOp::Prod, h(-2.0), h(1.5)), h(-3.0));
    assert_eq!(run(DataType::F16, RedOp::Max, h(-2.0), h(1.5)), h(1.5));
    assert_eq!(run(DataType::Bf16, RedOp::Min, one, eps), eps);
}

#[test]
fn finish_avg_every_dtype() {
    let mut rng = Rng(42);
    for dt in DataType::ALL {
        for nranks in [0usize, 1, 2, 3, 7] {
            for n in [0usize, 1, 7, 33, 1000] {
                let mut d = Buf::new(dt, n);
                let cap = d.words.len() * 8 / dt.size();
                for i in 0..cap {
                    d.set(i, random_elem(dt, &mut rng));
                }
                let orig = d.words.clone();
                let o = Buf {
                    words: orig.clone(),
                    dtype: dt,
                };
                for op in RedOp::ALL {
                    d.words.clone_from(&orig);
                    // SAFETY: `n` aligned elements.
                    unsafe { finish(dt, op, d.ptr(), n, nranks) };
                    if op != RedOp::Avg || nranks <= 1 {
                        assert_eq!(d.words, orig, "{dt} {op} nranks={nranks} n={n}");
                        continue;
                    }
                    for i in 0..n {
                        let x = o.get(i);
                        let want = match dt {
                            DataType::F32 => {
                                (f32::from_bits(x as u32) / nranks as f32).to_bits() as u64
                            }
                            DataType::F64 => (f64::from_bits(x) / nranks as f64).to_bits(),
                            DataType::F16 => {
                                f32_to_f16(f16_to_f32(x as u16) / nranks as f32) as u64
                            }
                            DataType::Bf16 => {
                                f32_to_bf16(bf16_to_f32(x as u16) / nranks as f32) as u64
                            }
                            DataType::F8E4M3 | DataType::F8E5M2 => {
                                let (w, n) = fp8(dt).expect("fp8");
                                n(w(x as u8) / nranks as f32) as u64
                            }
                            _ => trunc(dt, sext(dt, x) / nranks as i128),
                        };
                        let got = d.get(i);
                        assert!(
                            same(dt, op, got, want),
                            "{dt} avg/{nranks} [{i}] of {x:#x}: {got:#x}, want {want:#x}"
                        );
                    }
                    let s = dt.size();
                    assert_eq!(d.bytes()[n * s..], o.bytes()[n * s..], "{dt}: wrote past n");
                }
            }
        }
    }
    // Explicit values: truncation toward zero for negative integers.
    let avg3 = |dt: DataType, x: u64| -> u64 {
        let mut d = Buf::new(dt, 1);
        d.set(0, x);
        // SAFETY: one aligned element.
        unsafe { finish(dt, RedOp::Avg, d.ptr(), 1, 3) };
        d.get(0)
    };
    assert_eq!(
        avg3(DataType::I8, (-128i8) as u8 as u64),
        (-42i8) as u8 as u64
    );
    assert_eq!(avg3(DataType::I8, (-7i8) as u8 as u64), (-2i8) as u8 as u64);
    assert_eq!(avg3(DataType::U8, 255), 85);
    assert_eq!(
        avg3(DataType::I32, (-7i32) as u32 as u64),
        (-2i32) as u32 as u64
    );
    assert_eq!(avg3(DataType::U32, u32::MAX as u64), 0x5555_5555);
    assert_eq!(avg3(DataType::I64, (-7i64) as u64), (-2i64) as u64);
    assert_eq!(avg3(DataType::U64, u64::MAX), 0x5555_5555_5555_5555);
    assert_eq!(
        avg3(DataType::F32, 3f32.to_bits() as u64),
        1f32.to_bits() as u64
    );
    assert_eq!(avg3(DataType::F64, (-9f64).to_bits()), (-3f64).to_bits());
    assert_eq!(
        avg3(DataType::F16, f32_to_f16(-9.0) as u64),
        f32_to_f16(-3.0) as u64
    );
    assert_eq!(
        avg3(DataType::Bf16, f32_to_bf16(6.0) as u64),
        f32_to_bf16(2.0) as u64
    );
}

/// Exact value of f16 bits, computed independently.
fn f16_value(h: u16) -> f64 {
    let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    match e {
        0 => s * m * 2f64.powi(-24),
        31 if m == 0.0 => s * f64::INFINITY,
        31 => f64::NAN,
        _ => s * (1024.0 + m) * 2f64.powi(e - 25),
    }
}

/// Reference f32 → f16: binary search over the (monotone) positive f16
/// encodings, nearest with ties to the even encoding, ≥ 65520 → inf.
fn f32_to_f16_ref(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7e00;
    }
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = (x as f64).abs();
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    // Largest encoding with value ≤ a.
    let (mut lo, mut hi) = (0u16, 0x7bffu16);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if f16_value(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let below = f16_value(lo);
    if below == a {
        return sign | lo;
    }
    let above = f16_value(lo + 1);
    let r = if a - below < above - a || (a - below == above - a && lo & 1 == 0) {
        lo
    } else {
        lo + 1
    };
    sign | r
}

#[test]
fn f16_all_bit_patterns() {
    for h in 0..=u16::MAX {
        let f = f16_to_f32(h);
        let v = f16_value(h);
        if v.is_nan() {
            assert!(f.is_nan(), "{h:#06x} → {f}");
            let back = f32_to_f16(f);
            assert!(back & 0x7fff > 0x7c00, "{h:#06x}: NaN → {back:#06x}");
            assert_eq!(back & 0x8000, h & 0x8000, "{h:#06x}: NaN sign");
            assert_ne!(back & 0x0200, 0, "{h:#06x}: NaN not quiet");
        } else {
            assert_eq!(f as f64, v, "{h:#06x}");
            assert_eq!(f.is_sign_negative(), h & 0x8000 != 0, "{h:#06x}: sign");
            assert_eq!(f32_to_f16(f), h, "{h:#06x} round trip");
        }
    }
}

#[test]
fn f32_to_f16_rounding_edges() {
    let p = |e: i32| 2f32.powi(e);
    let cases: &[(f32, u16)] = &[
        (0.0, 0x0000),
        (-0.0, 0x8000),
        (1.0, 0x3c00),
        (-2.0, 0xc000),
        (1.0 + p(-11), 0x3c00),          // tie → even (down)
        (1.0 + 3.0 * p(-11), 0x3c02),    // tie → even (up)
        (1.0 + p(-11) + p(-20), 0x3c01), // just above the tie
        (1.0 + p(-11) - p(-23), 0x3c00), // just below the tie
        (65504.0, 0x7bff),               // max finite
        (65519.99, 0x7bff),              // below the overflow tie
        (65520.0, 0x7c00),               // tie to even = inf
        (-65520.0, 0xfc00),
        (1e6, 0x7c00),
        (f32::MAX, 0x7c00),
        (f32::INFINITY, 0x7c00),
        (f32::NEG_INFINITY, 0xfc00),
        (p(-14), 0x0400),                // min normal
        (p(-14) - p(-25), 0x0400),       // tie max-subnormal/min-normal → even
        (p(-14) - p(-24), 0x03ff),       // max subnormal
        (p(-14) - 3.0 * p(-25), 0x03fe), // tie 0x3fe/0x3ff → even
        (p(-24), 0x0001),                // min subnormal
        (p(-25), 0x0000),                // tie → 0
        (p(-25) + p(-40), 0x0001),       // just above → min subnormal
        (-p(-25), 0x8000),
        (3.0 * p(-25), 0x0002), // tie 1/2 → even
        (5.0 * p(-25), 0x0002), // tie 2/3 → even
        (p(-30), 0x0000),
        (f32::from_bits(1), 0x0000), // f32 subnormal
        (-f32::from_bits(0x007f_ffff), 0x8000),
        (p(-15), 0x0200), // subnormal exactly
        (1.5 * p(-15), 0x0300),
    ];
    for &(x, want) in cases {
        assert_eq!(f32_to_f16(x), want, "{x:e} ({:#010x})", x.to_bits());
        assert_eq!(f32_to_f16_ref(x), want, "reference disagrees at {x:e}");
    }
    // NaNs stay (quiet) NaNs, sign kept.
    for bits in [
        0x7fc0_0000u32,
        0x7f80_0001,
        0xff80_0001,
        0x7fff_ffff,
        0xffc0_1234,
    ] {
        let h = f32_to_f16(f32::from_bits(bits));
        assert!(
            h & 0x7fff > 0x7c00 && h & 0x0200 != 0,
            "{bits:#x} → {h:#06x}"
        );
        assert_eq!(h & 0x8000 != 0, bits >> 31 == 1);
    }
    // A sweep over f32 bit patterns (every exponent, strided mantissas, both signs).
    let mut bits = 0u32;
    loop {
        let x = f32::from_bits(bits);
        if !x.is_nan() {
            assert_eq!(f32_to_f16(x), f32_to_f16_ref(x), "{x:e} ({bits:#010x})");
        }
        match bits.checked_add(4099) {
            Some(b) => bits = b,
            None => break,
        }
    }
    // Every f32 in the f16 range near each rounding point: x = f16 value ± small
    // multiples of the f32 ulp, and the midpoints between neighbours.
    for h in 0..0x7c00u16 {
        let v = f16_value(h) as f32;
        let next = f16_value(h + 1) as f32;
        let mid = ((v as f64 + next as f64) / 2.0) as f32; // exact in f32
        for x in [v, mid, next] {
            let b = x.to_bits();
            for d in 0..3u32 {
                for y in [b.wrapping_sub(d), b + d] {
                    let y = f32::from_bits(y);
                    for s in [y, -y] {
                        if !s.is_nan() {
                            assert_eq!(f32_to_f16(s), f32_to_f16_ref(s), "{s:e}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn bf16_conversions() {
    let p = |e: i32| 2f32.powi(e);
    assert_eq!(f32_to_bf16(1.0), 0x3f80);
    assert_eq!(f32_to_bf16(1.0 + p(-8)), 0x3f80); // tie → even (down)
    assert_eq!(f32_to_bf16(1.0 + 3.0 * p(-8)), 0x3f82); // tie → even (up)
    assert_eq!(f32_to_bf16(1.0 + p(-8) + p(-20)), 0x3f81); // above the tie
    assert_eq!(f32_to_bf16(-(1.0 + p(-8))), 0xbf80);
    assert_eq!(f32_to_bf16(f32::MAX), 0x7f80); // past the largest bf16 → inf
    assert_eq!(f32_to_bf16(f32::from_bits(0x7f7f_0000)), 0x7f7f);
    assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
    assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
    assert_eq!(f32_to_bf16(-0.0), 0x8000);
    assert_eq!(f32_to_bf16(f32::from_bits(0x0000_8000)), 0x0000); // subnormal tie → even
    assert_eq!(f32_to_bf16(f32::from_bits(0x0001_8000)), 0x0002);
    for bits in [
        0x7fc0_0000u32,
        0x7f80_0001,
        0xff80_0001,
        0x7fff_ffff,
        0xffff_ffff,
    ] {
        let h = f32_to_bf16(f32::from_bits(bits));
        assert!(
            h & 0x7fff > 0x7f80 && h & 0x0040 != 0,
            "{bits:#x} → {h:#06x}"
        );
        assert_eq!(h & 0x8000 != 0, bits >> 31 == 1);
    }
    // Every bf16 widens exactly and rounds back to itself (NaNs stay NaN).
    for h in 0..=u16::MAX {
        let f = bf16_to_f32(h);
        assert_eq!(f.to_bits(), (h as u32) << 16);
        let back = f32_to_bf16(f);
        if f.is_nan() {
            assert!(back & 0x7fff > 0x7f80);
        } else {
            assert_eq!(back, h);
        }
    }
    // Against a reference on a sweep: nearest of the two neighbours, ties even.
    let mut bits = 0u32;
    loop {
        let x = f32::from_bits(bits);
        if x.is_finite() {
            let lo = bits & 0xffff_0000;
            let rem = bits & 0xffff;
            let up = rem > 0x8000 || (rem == 0x8000 && (lo >> 16) & 1 == 1);
            let want = ((lo >> 16) + up as u32) as u16;
            assert_eq!(f32_to_bf16(x), want, "{bits:#010x}");
        }
        match bits.checked_add(997) {
            Some(b) => bits = b,
            None => break,
        }
    }
}

/// Rough throughput; run with
/// `cargo test --release -p ferrocx --lib reduce_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn reduce_throughput() {
    const BYTES: usize = 16 << 20;
    const ITERS: u32 = 10;
    for dt in [
        DataType::F32,
        DataType::Bf16,
        DataType::F16,
        DataType::F64,
        DataType::I32,
    ] {
        let n = BYTES / dt.size();
        let mut rng = Rng(7);
        let (mut a, mut b, mut d) = (Buf::new(dt, n), Buf::new(dt, n), Buf::new(dt, n));
        for i in 0..n {
            a.set(i, random_elem(dt, &mut rng));
            b.set(i, random_elem(dt, &mut rng));
        }
        let (pa, pb, pd) = (a.ptr(), b.ptr(), d.ptr());
        let mut line = format!("{:>8} sum, {} MiB per buffer:", dt.name(), BYTES >> 20);
        for (name, dst) in [("dst=a+b", pd), ("a+=b", pa)] {
            // SAFETY: every buffer holds `n` aligned elements.
            unsafe { reduce(dt, RedOp::Sum, dst, pa, pb, n) }; // warm up / fault in
                                                               // Best of ITERS: the machine may be shared.
            let mut s = f64::INFINITY;
            for _ in 0..ITERS {
                let t = std::time::Instant::now();
                // SAFETY: as above.
                unsafe { reduce(dt, RedOp::Sum, dst, pa, pb, n) };
                s = s.min(t.elapsed().as_secs_f64());
            }
            line += &format!(
                "  {name}: {:5.2} GB/s per buffer ({:5.2} GB/s memory traffic)",
                BYTES as f64 / s / 1e9,
                3.0 * BYTES as f64 / s / 1e9
            );
        }
        println!("{line}");
        std::hint::black_box(&d);
    }
}
