//! Conversions between `f32` and the two 16-bit float formats.
//!
//! All four are written as straight-line integer/float arithmetic followed by
//! selects (no data-dependent branches, no table), so that a loop over them
//! can be if-converted and vectorized by LLVM.

/// bf16 bits → f32 (exact).
#[inline]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 → bf16 bits, round to nearest even; ±inf stays ±inf, finite values
/// past the largest bf16 round to ±inf, NaN becomes a quiet NaN (sign and the
/// top payload bits kept).
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    // Add half an ulp of the result (minus one when the kept part is even, so
    // that exact ties go to even); carries roll into the exponent, up to inf.
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = (b >> 16) | 0x40;
    let r = if b & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    };
    r as u16
}

/// f16 bits → f32 (exact: normals, subnormals, ±0, ±inf; NaN keeps its sign
/// and payload, quieted).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    // The method of Maratyszcza's FP16 library (one select, one multiply).
    let w = (h as u32) << 16;
    let sign = w & 0x8000_0000;
    let two_w = w.wrapping_add(w); // exponent and mantissa at the top
                                   // Normal, inf, NaN: move exponent/mantissa into f32 position with the
                                   // exponent biased by 15 + 224 (so f16 exponent 31 lands on 255, inf/NaN),
                                   // then scale by 2⁻¹¹² (exact) to rebias to 127.
    let normal = f32::from_bits((two_w >> 4) + (0xe0 << 23)) * f32::from_bits((127 - 112) << 23);
    // Subnormal and zero: m·2⁻²⁴ = (0.5 + m·2⁻²⁴) − 0.5, all exact.
    let sub = f32::from_bits((two_w >> 17) | (126 << 23)) - 0.5;
    let r = if h & 0x7c00 == 0 { sub } else { normal };
    f32::from_bits(sign | r.to_bits())
}

/// f32 → f16 bits, IEEE round to nearest even: values from 65520 up become
/// ±inf, small values round to subnormals or ±0 correctly, NaN becomes a
/// quiet NaN (sign kept, payload dropped).
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    // The method of Maratyszcza's FP16 library: the FPU does the rounding.
    let w = x.to_bits();
    let a = w & 0x7fff_ffff;
    // |x|·4, except that |x| ≥ 2¹⁶ overflows to inf on the way.
    let base =
        f32::from_bits(a) * f32::from_bits((127 + 112) << 23) * f32::from_bits((127 - 110) << 23);
    // Add 2^(e+15) (e: x's exponent, at least −14, the f16 subnormal one):
    // the sum's ulp is x's f16 ulp (scaled by 4), so the addition rounds x to
    // f16 precision, to nearest even; the sum's low exponent bits and the
    // mantissa then read as the f16 encoding (a mantissa carry rolls into
    // the exponent, up to 0x7c00 = inf; inf stays inf).
    let e = ((a & 0x7f80_0000) as i32).max(113 << 23) as u32;
    let bits = (f32::from_bits(e + (15 << 23)) + base).to_bits();
    let nonsign = ((bits >> 13) & 0x7c00) + (bits & 0x0fff);
    let r = if a > 0x7f80_0000 { 0x7e00 } else { nonsign };
    (r | ((w >> 16) & 0x8000)) as u16
}
