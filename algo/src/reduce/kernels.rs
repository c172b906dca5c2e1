//! The element-wise loops, monomorphized per element type and operator.

use crate::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use std::marker::PhantomData;
use std::slice;

/// A commutative binary operator on `T`.
pub(super) trait BinOp<T> {
    fn op(a: T, b: T) -> T;
}

pub(super) struct Sum;
pub(super) struct Prod;
pub(super) struct Min;
pub(super) struct Max;

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl BinOp<$t> for Sum {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { a.wrapping_add(b) }
        }
        impl BinOp<$t> for Prod {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { a.wrapping_mul(b) }
        }
        impl BinOp<$t> for Min {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { a.min(b) }
        }
        impl BinOp<$t> for Max {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { a.max(b) }
        }
    )*};
}
int_ops!(i8, u8, i32, u32, i64, u64);

// Float min/max as a compare + select (minps/maxps), not `f32::min`, whose
// NaN rules need extra instructions; NaN behaviour is unspecified.
macro_rules! float_ops {
    ($($t:ty),*) => {$(
        impl BinOp<$t> for Sum {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { a + b }
        }
        impl BinOp<$t> for Prod {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { a * b }
        }
        impl BinOp<$t> for Min {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { if a < b { a } else { b } }
        }
        impl BinOp<$t> for Max {
            #[inline(always)]
            fn op(a: $t, b: $t) -> $t { if a > b { a } else { b } }
        }
    )*};
}
float_ops!(f32, f64);

/// A 16-bit float format stored as `u16` bits, computed on as `f32`.
pub(super) trait Half {
    fn widen(h: u16) -> f32;
    fn narrow(x: f32) -> u16;
}

pub(super) struct F16Fmt;
pub(super) struct Bf16Fmt;

impl Half for F16Fmt {
    #[inline(always)]
    fn widen(h: u16) -> f32 {
        f16_to_f32(h)
    }
    #[inline(always)]
    fn narrow(x: f32) -> u16 {
        f32_to_f16(x)
    }
}

impl Half for Bf16Fmt {
    #[inline(always)]
    fn widen(h: u16) -> f32 {
        bf16_to_f32(h)
    }
    #[inline(always)]
    fn narrow(x: f32) -> u16 {
        f32_to_bf16(x)
    }
}

/// An 8-bit float format stored as `u8` bits, computed on as `f32`.
pub(super) trait Quarter {
    fn widen(q: u8) -> f32;
    fn narrow(x: f32) -> u8;
}

pub(super) struct E4M3Fmt;
pub(super) struct E5M2Fmt;

impl Quarter for E4M3Fmt {
    #[inline(always)]
    fn widen(q: u8) -> f32 {
        crate::fp8::f8e4m3_to_f32(q)
    }
    #[inline(always)]
    fn narrow(x: f32) -> u8 {
        crate::fp8::f32_to_f8e4m3(x)
    }
}

impl Quarter for E5M2Fmt {
    #[inline(always)]
    fn widen(q: u8) -> f32 {
        crate::fp8::f8e5m2_to_f32(q)
    }
    #[inline(always)]
    fn narrow(x: f32) -> u8 {
        crate::fp8::f32_to_f8e5m2(x)
    }
}

/// Operator `O` on an 8-bit float format `F`: widen, combine in f32, round once
/// (saturating, as NCCL's fp8 reductions).
pub(super) struct Q<F, O>(PhantomData<(F, O)>);

impl<F: Quarter, O: BinOp<f32>> BinOp<u8> for Q<F, O> {
    #[inline(always)]
    fn op(a: u8, b: u8) -> u8 {
        F::narrow(O::op(F::widen(a), F::widen(b)))
    }
}

/// Operator `O` on a 16-bit float format `F`: widen, combine in f32, round once.
pub(super) struct H<F, O>(PhantomData<(F, O)>);

impl<F: Half, O: BinOp<f32>> BinOp<u16> for H<F, O> {
    #[inline(always)]
    fn op(a: u16, b: u16) -> u16 {
        F::narrow(O::op(F::widen(a), F::widen(b)))
    }
}

// The four loop shapes. (rustc inlines these before LLVM sees them, which
// loses the slices' no-alias facts: LLVM adds a one-off overlap check per call
// in front of each vector loop, which distinct or identical buffers pass.)

/// `x[i] = x[i] op x[i]` (dst == a == b).
#[inline(always)]
fn self_op<T: Copy, O: BinOp<T>>(x: &mut [T]) {
    for v in x.iter_mut() {
        *v = O::op(*v, *v);
    }
}

/// `x[i] = x[i] op y[i]` (dst == a).
#[inline(always)]
fn acc<T: Copy, O: BinOp<T>>(x: &mut [T], y: &[T]) {
    for (v, s) in x.iter_mut().zip(y) {
        *v = O::op(*v, *s);
    }
}

/// `x[i] = y[i] op x[i]` (dst == b).
#[inline(always)]
fn acc_rev<T: Copy, O: BinOp<T>>(x: &mut [T], y: &[T]) {
    for (v, s) in x.iter_mut().zip(y) {
        *v = O::op(*s, *v);
    }
}

/// `d[i] = a[i] op b[i]` (three distinct buffers).
#[inline(always)]
fn three<T: Copy, O: BinOp<T>>(d: &mut [T], a: &[T], b: &[T]) {
    for ((v, s), t) in d.iter_mut().zip(a).zip(b) {
        *v = O::op(*s, *t);
    }
}

/// `dst[i] = a[i] op b[i]`, with `dst` distinct from, or exactly equal to,
/// `a` and/or `b`. Never a `&mut` and a `&` slice over the same memory: the
/// aliased forms run as an accumulate over one `&mut` slice.
///
/// # Safety
/// As [`super::reduce`], for `T`-typed pointers.
#[inline(always)]
unsafe fn binary<T: Copy, O: BinOp<T>>(dst: *mut T, a: *const T, b: *const T, n: usize) {
    if n == 0 {
        return;
    }
    let d = dst as *const T;
    // SAFETY: (all branches) the caller guarantees each pointer is valid and
    // aligned for `n` elements; a shared slice is created only over memory
    // that no `&mut` slice covers (distinct pointers never partially overlap).
    unsafe {
        let x = slice::from_raw_parts_mut(dst, n);
        if d == a && d == b {
            self_op::<T, O>(x);
        } else if d == a {
            acc::<T, O>(x, slice::from_raw_parts(b, n));
        } else if d == b {
            acc_rev::<T, O>(x, slice::from_raw_parts(a, n));
        } else {
            three::<T, O>(x, slice::from_raw_parts(a, n), slice::from_raw_parts(b, n));
        }
    }
}

/// `dst[i] = f(dst[i])`.
///
/// # Safety
/// `dst` valid and aligned for `n` elements.
#[inline(never)]
pub(super) unsafe fn unary<T: Copy, F: Fn(T) -> T>(dst: *mut T, n: usize, f: F) {
    if n == 0 {
        return;
    }
    // SAFETY: the caller guarantees `dst` is valid and aligned for `n` elements.
    let x = unsafe { slice::from_raw_parts_mut(dst, n) };
    for v in x.iter_mut() {
        *v = f(*v);
    }
}

/// Signature of every element-wise reduction kernel (untyped pointers).
pub(super) type Kernel = unsafe fn(*mut u8, *const u8, *const u8, usize);

// One module per element type (named as nccl-tests names the type) with one
// non-generic, never-inlined function per operator, so that each kernel is a
// separate symbol with a readable name, e.g.
// `ferrocx_algo::reduce::kernels::bfloat16::sum`.
macro_rules! instances {
    ($($m:ident: $t:ty => $sum:ty, $prod:ty, $min:ty, $max:ty;)*) => {$(
        pub(super) mod $m {
            #[allow(unused_imports)]
            use super::*;
            instances!(@op $t, sum, $sum);
            instances!(@op $t, prod, $prod);
            instances!(@op $t, min, $min);
            instances!(@op $t, max, $max);
        }
    )*};
    (@op $t:ty, $name:ident, $o:ty) => {
        /// # Safety
        /// As [`crate::reduce::reduce`].
        #[inline(never)]
        pub unsafe fn $name(d: *mut u8, a: *const u8, b: *const u8, n: usize) {
            // SAFETY: forwarded from the caller; the pointers are aligned for `$t`.
            unsafe { super::binary::<$t, $o>(d.cast(), a.cast(), b.cast(), n) }
        }
    };
}

instances! {
    int8: i8 => Sum, Prod, Min, Max;
    uint8: u8 => Sum, Prod, Min, Max;
    int32: i32 => Sum, Prod, Min, Max;
    uint32: u32 => Sum, Prod, Min, Max;
    int64: i64 => Sum, Prod, Min, Max;
    uint64: u64 => Sum, Prod, Min, Max;
    half: u16 => H<F16Fmt, Sum>, H<F16Fmt, Prod>, H<F16Fmt, Min>, H<F16Fmt, Max>;
    bfloat16: u16 => H<Bf16Fmt, Sum>, H<Bf16Fmt, Prod>, H<Bf16Fmt, Min>, H<Bf16Fmt, Max>;
    float: f32 => Sum, Prod, Min, Max;
    double: f64 => Sum, Prod, Min, Max;
    f8e4m3: u8 => Q<E4M3Fmt, Sum>, Q<E4M3Fmt, Prod>, Q<E4M3Fmt, Min>, Q<E4M3Fmt, Max>;
    f8e5m2: u8 => Q<E5M2Fmt, Sum>, Q<E5M2Fmt, Prod>, Q<E5M2Fmt, Min>, Q<E5M2Fmt, Max>;
}
