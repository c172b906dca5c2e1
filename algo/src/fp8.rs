//! Conversions between `f32` and the two 8-bit float formats NCCL reduces
//! (OCP FP8: e4m3 in its "fn" form — no infinities, largest 448, NaN
//! S.1111.111 — and e5m2 — IEEE-like, largest 57344), as CUDA's
//! `__NV_SATFINITE` conversions behave: round to nearest even, anything past
//! the largest finite value (infinities too) becomes it, NaN stays NaN.
//!
//! NCCL reduces fp8 by widening to half, combining, and narrowing with
//! saturation; widening is exact and one sum or product of two fp8 values
//! rounds the same through half or f32, so ferrocx computes in f32.
//! `sdk/src/kernels/mod.rs` carries the same functions in CUDA C.

/// An 8-bit format: mantissa bits, exponent bias, largest finite value and its code.
struct Format {
    mbits: u32,
    bias: i32,
    max: f32,
    max_code: u8,
    /// e5m2 has infinities (exponent all ones, mantissa 0); e4m3 only NaN (all ones).
    infinities: bool,
}

const E4M3: Format = Format {
    mbits: 3,
    bias: 7,
    max: 448.0,
    max_code: 0x7e,
    infinities: false,
};

const E5M2: Format = Format {
    mbits: 2,
    bias: 15,
    max: 57344.0,
    max_code: 0x7b,
    infinities: true,
};

/// The code CUDA's conversions give NaN (either format).
const NAN_CODE: u8 = 0x7f;

/// 2^k for k in −126..=127, exactly.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

fn decode(b: u8, f: &Format) -> f32 {
    let ebits = 7 - f.mbits;
    let e = ((b >> f.mbits) & ((1 << ebits) - 1)) as i32;
    let m = u32::from(b) & ((1 << f.mbits) - 1);
    let top = (1 << ebits) - 1;
    let mag = if e == top && f.infinities {
        if m == 0 {
            f32::INFINITY
        } else {
            f32::NAN
        }
    } else if e == top && m == (1 << f.mbits) - 1 {
        f32::NAN
    } else if e == 0 {
        m as f32 * pow2(1 - f.bias - f.mbits as i32)
    } else {
        ((1 << f.mbits) | m) as f32 * pow2(e - f.bias - f.mbits as i32)
    };
    if b & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

fn encode(x: f32, f: &Format) -> u8 {
    let w = x.to_bits();
    let sign = ((w >> 24) & 0x80) as u8;
    let a = f32::from_bits(w & 0x7fff_ffff);
    if a.is_nan() {
        return NAN_CODE;
    }
    if a >= f.max {
        return sign | f.max_code;
    }
    // The quantum of a's binade (the subnormal one at least): a / q is exact.
    let emin = 1 - f.bias;
    let e = (((w >> 23) & 0xff) as i32 - 127).max(emin);
    let n = (a / pow2(e - f.mbits as i32)).round_ties_even() as u32;
    let one = 1u32 << f.mbits;
    if n < one {
        return sign | n as u8; // subnormal (or zero): exponent field 0
    }
    // Rounding up may carry into the next binade (never past max: a < max).
    let (e, n) = if n == 2 * one { (e + 1, one) } else { (e, n) };
    sign | ((((e + f.bias) as u32) << f.mbits) | (n - one)) as u8
}

/// e4m3 bits → f32 (exact).
pub fn f8e4m3_to_f32(b: u8) -> f32 {
    decode(b, &E4M3)
}

/// f32 → e4m3 bits: round to nearest even, saturate to ±448, NaN → 0x7f.
pub fn f32_to_f8e4m3(x: f32) -> u8 {
    encode(x, &E4M3)
}

/// e5m2 bits → f32 (exact; ±inf and NaN kept).
pub fn f8e5m2_to_f32(b: u8) -> f32 {
    decode(b, &E5M2)
}

/// f32 → e5m2 bits: round to nearest even, saturate to ±57344 (±inf too), NaN → 0x7f.
pub fn f32_to_f8e5m2(x: f32) -> u8 {
    encode(x, &E5M2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_known_values_decode() {
        for b in 0..=255u8 {
            for (to, from) in [
                (
                    f8e4m3_to_f32 as fn(u8) -> f32,
                    f32_to_f8e4m3 as fn(f32) -> u8,
                ),
                (f8e5m2_to_f32, f32_to_f8e5m2),
            ] {
                let x = to(b);
                if x.is_nan() {
                    assert_eq!(from(x), NAN_CODE);
                } else if x.is_infinite() {
                    assert_eq!(from(x) & 0x7f, 0x7b, "e5m2 inf saturates");
                } else {
                    assert_eq!(from(x), b, "code {b:#x} = {x}");
                }
            }
        }
        assert_eq!(f8e4m3_to_f32(0x7e), 448.0);
        assert_eq!(f8e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(f8e4m3_to_f32(0x38), 1.0);
        assert!(f8e4m3_to_f32(0xff).is_nan());
        assert_eq!(f8e5m2_to_f32(0x7b), 57344.0);
        assert_eq!(f8e5m2_to_f32(0x7c), f32::INFINITY);
        assert_eq!(f8e5m2_to_f32(0x01), 2f32.powi(-16));
        assert_eq!(f8e5m2_to_f32(0xbc), -1.0);
    }

    #[test]
    fn narrowing_rounds_to_nearest_even_and_saturates() {
        // e4m3 near 1: codes 1.0, 1.125, 1.25.
        assert_eq!(f32_to_f8e4m3(1.0625), 0x38, "tie to even (1.0)");
        assert_eq!(f32_to_f8e4m3(1.1875), 0x3a, "tie to even (1.25)");
        assert_eq!(f32_to_f8e4m3(1.07), 0x39);
        assert_eq!(f32_to_f8e4m3(447.0), 0x7e);
        assert_eq!(f32_to_f8e4m3(1e6), 0x7e);
        assert_eq!(f32_to_f8e4m3(f32::NEG_INFINITY), 0xfe);
        assert_eq!(f32_to_f8e4m3(-0.0), 0x80);
        assert_eq!(
            f32_to_f8e4m3(2f32.powi(-11)),
            0x00,
            "a quarter of the smallest subnormal"
        );
        assert_eq!(f32_to_f8e4m3(3.0 * 2f32.powi(-11)), 0x01);
        assert_eq!(f32_to_f8e4m3(0.9999), 0x38, "carry into the next binade");
        assert_eq!(f32_to_f8e5m2(f32::INFINITY), 0x7b);
        assert_eq!(f32_to_f8e5m2(60000.0), 0x7b);
        assert_eq!(f32_to_f8e5m2(1.125), 0x3c, "tie to even (1.0)");
        assert_eq!(f32_to_f8e5m2(f32::NAN), NAN_CODE);
    }

    #[test]
    fn narrowing_matches_exact_rounding_over_every_pairwise_sum() {
        // What NCCL computes (through half) is the exact result rounded once:
        // check f32 arithmetic + narrowing against rounding the exact f64 result.
        for (to, from, f) in [
            (
                f8e4m3_to_f32 as fn(u8) -> f32,
                f32_to_f8e4m3 as fn(f32) -> u8,
                &E4M3,
            ),
            (f8e5m2_to_f32, f32_to_f8e5m2, &E5M2),
        ] {
            for a in 0..=255u8 {
                for b in 0..=255u8 {
                    let (x, y) = (to(a), to(b));
                    if !(x.is_finite() && y.is_finite()) {
                        continue;
                    }
                    let exact = f64::from(x) + f64::from(y);
                    assert_eq!(from(x + y), reference(exact, f), "{x} + {y}");
                    let exact = f64::from(x) * f64::from(y);
                    assert_eq!(from(x * y), reference(exact, f), "{x} * {y}");
                }
            }
        }
    }

    /// Round `v` to the format by nearest-even search over all finite codes.
    fn reference(v: f64, f: &Format) -> u8 {
        let sign = if v.is_sign_negative() { 0x80 } else { 0 };
        let a = v.abs();
        if a >= f64::from(f.max) {
            return sign | f.max_code;
        }
        let mut best = (f64::INFINITY, 0u8);
        for c in 0..=f.max_code {
            let d = (f64::from(decode(c, f)) - a).abs();
            if d < best.0 || (d == best.0 && c & 1 == 0) {
                best = (d, c);
            }
        }
        sign | best.1
    }
}
