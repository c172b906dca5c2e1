//! Test inputs and comparison for device reductions, shared by the kernels' unit
//! tests and `core/tests/gpu_kernels.rs`. Not part of the API.

use crate::types::{DataType, RedOp};
use std::fmt::Write as _;

/// xorshift64*: reproducible inputs.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// `n` elements of `dtype`: a quarter random bits (every NaN payload, every
/// subnormal, …), an eighth special values (±0, ±inf, NaNs, subnormals,
/// extremes; integers 0/1/-1/MIN/MAX), an eighth small integers, the rest
/// ordinary values (floats of moderate exponent: sums and products that
/// round; integers at random: sums and products that wrap).
pub fn gen(dtype: DataType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let size = dtype.size();
    let mut out = Vec::with_capacity(n * size);
    for _ in 0..n {
        let r = rng.next_u64();
        let pick = r & 7;
        let x = r >> 8;
        let v: u64 = match dtype {
            DataType::F16 => match pick {
                0 | 1 => x,
                2 => [
                    0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x0001, 0x8001, 0x03ff,
                    0x0400, 0x7bff, 0xfbff, 0x3c00,
                ][(x % 14) as usize],
                3 => 0x3c00 + (x % 8) * 0x400,
                _ => ((x & 1) << 15) | ((9 + (x >> 1) % 13) << 10) | ((x >> 8) & 0x3ff),
            },
            DataType::Bf16 => match pick {
                0 | 1 => x,
                2 => [
                    0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x0001, 0x8001, 0x007f,
                    0x0080, 0x7f7f, 0xff7f, 0x3f80,
                ][(x % 14) as usize],
                3 => 0x3f80 + (x % 8) * 0x80,
                _ => ((x & 1) << 15) | ((117 + (x >> 1) % 21) << 7) | ((x >> 9) & 0x7f),
            },
            DataType::F32 => match pick {
                0 | 1 => x ^ (r << 40),
                2 => [
                    0u64,
                    0x8000_0000,
                    0x7f80_0000,
                    0xff80_0000,
                    0x7fc0_0000,
                    0xffc0_0000,
                    0x7f80_0001,
                    0x0000_0001,
                    0x807f_ffff,
                    0x0080_0000,
                    0x7f7f_ffff,
                    0xff7f_ffff,
                    0x3f80_0000,
                ][(x % 13) as usize],
                3 => ((x % 8) as f32).to_bits() as u64,
                _ => ((x & 1) << 31) | ((107 + (x >> 1) % 41) << 23) | ((x >> 10) & 0x7f_ffff),
            },
            DataType::F64 => match pick {
                0 | 1 => r.rotate_left(17) ^ x,
                2 => [
                    0u64,
                    1 << 63,
                    0x7ff0 << 48,
                    0xfff0 << 48,
                    0x7ff8 << 48,
                    0xfff8 << 48,
                    (0x7ff0 << 48) | 1,
                    1,
                    (1 << 63) | 0x000f_ffff_ffff_ffff,
                    1 << 52,
                    0x7fef_ffff_ffff_ffff,
                    0x3ff0 << 48,
                ][(x % 12) as usize],
                3 => ((x % 8) as f64).to_bits(),
                _ => {
                    ((x & 1) << 63)
                        | ((1003 + (x >> 1) % 41) << 52)
                        | (r.rotate_left(29) & 0x000f_ffff_ffff_ffff)
                }
            },
            _ => match pick {
                0 => [
                    0u64,
                    1,
                    u64::MAX,
                    1 << (size * 8 - 1),
                    (1u64 << (size * 8 - 1)) - 1,
                ][(x % 5) as usize],
                1 => x % 7,
                _ => r,
            },
        };
        out.extend_from_slice(&v.to_le_bytes()[..size]);
    }
    out
}

/// Element `i` of `v` as raw bits.
pub fn bits(dtype: DataType, v: &[u8], i: usize) -> u64 {
    let s = dtype.size();
    let mut b = [0u8; 8];
    b[..s].copy_from_slice(&v[i * s..(i + 1) * s]);
    u64::from_le_bytes(b)
}

/// Whether raw bits `x` of `dtype` are a NaN.
pub fn is_nan(dtype: DataType, x: u64) -> bool {
    match dtype {
        DataType::F16 => x & 0x7fff > 0x7c00,
        DataType::Bf16 => x & 0x7fff > 0x7f80,
        DataType::F32 => f32::from_bits(x as u32).is_nan(),
        DataType::F64 => f64::from_bits(x).is_nan(),
        _ => false,
    }
}

/// Result of comparing one run.
#[derive(Default)]
pub struct Cmp {
    /// Elements that differ.
    pub bad: usize,
    /// NaNs from arithmetic accepted with other bits than the CPU's.
    pub nan_diff: usize,
    /// The first few differences.
    pub first: String,
}

/// `got` against `want`, bit for bit, except that a NaN made by arithmetic
/// (sum, prod, avg on floats) may be any NaN (payloads are the hardware's).
pub fn compare(dtype: DataType, op: RedOp, want: &[u8], got: &[u8]) -> Cmp {
    let any_nan = dtype.is_float() && matches!(op, RedOp::Sum | RedOp::Prod | RedOp::Avg);
    let mut c = Cmp::default();
    assert_eq!(want.len(), got.len());
    for i in 0..want.len() / dtype.size() {
        let (w, g) = (bits(dtype, want, i), bits(dtype, got, i));
        if w == g {
            continue;
        }
        if any_nan && is_nan(dtype, w) && is_nan(dtype, g) {
            c.nan_diff += 1;
            continue;
        }
        if c.bad < 4 {
            let _ = write!(c.first, " [{i}] want {w:#x} got {g:#x};");
        }
        c.bad += 1;
    }
    c
}
