//! CPU reduction kernels (filled in below).

/// bf16 bits → f32.
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}
/// f32 → bf16 bits, round to nearest even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}
/// f16 bits → f32.
pub fn f16_to_f32(_h: u16) -> f32 {
    todo!()
}
/// f32 → f16 bits.
pub fn f32_to_f16(_x: f32) -> u16 {
    todo!()
}

use crate::types::{DataType, RedOp};

/// `dst[i] = a[i] op b[i]` for `n` elements of `dtype` (`Avg` reduces like `Sum`).
///
/// # Safety
/// Each pointer must be valid for `n` elements and aligned to the element size;
/// `dst` may equal `a` or `b` exactly but must not partially overlap either.
pub unsafe fn reduce(
    _dtype: DataType,
    _op: RedOp,
    _dst: *mut u8,
    _a: *const u8,
    _b: *const u8,
    _n: usize,
) {
    todo!()
}

/// The operator's final step on fully reduced elements: for `Avg`, divide by
/// `nranks` (floats: in their own precision, f16/bf16 through f32; integers:
/// truncating division of the wrapped sum); nothing for the other operators.
///
/// # Safety
/// `dst` must be valid for `n` elements and aligned.
pub unsafe fn finish(_dtype: DataType, _op: RedOp, _dst: *mut u8, _n: usize, _nranks: usize) {
    todo!()
}
