//! CPU reduction kernels for collectives on host memory.
//!
//! [`reduce`] computes `dst[i] = a[i] op b[i]`, [`finish`] applies the
//! operator's last step (the division of `Avg`). Each (type, operator) pair is
//! its own monomorphized, never-inlined loop (`kernels::<type>::<op>`, e.g.
//! `ferrocx_algo::reduce::kernels::bfloat16::sum`), picked once per call; the loops
//! are plain zips over equal-length slices, which LLVM auto-vectorizes. f16
//! and bf16 are widened to f32, combined, and rounded back once (to nearest
//! even) per element; the conversions ([`f16_to_f32`], [`f32_to_f16`],
//! [`bf16_to_f32`], [`f32_to_bf16`]) are branch-free selects so they
//! vectorize too.
//!
//! ## Vectorization (checked in the x86_64 release build, baseline SSE2)
//!
//! Every kernel's inner loop is packed SIMD on 16-byte vectors; scalar code
//! is only the tail and the short-length path. Per kernel:
//! - `float::sum` (f32): `movups` loads, `addps` (8 elements per iteration,
//!   two `addps`).
//! - `bfloat16::sum`: widen with `pxor` + `punpcklwd`/`punpckhwd` (zero low
//!   halves: the `<< 16`), `addps`, then the rounding in integer lanes —
//!   `psrld $16`, `pand`, `paddd`, the NaN test `pcmpgtd` and a
//!   `pand`/`pandn`/`por` select — and `pslld`/`psrad $16` + `packssdw` to
//!   narrow: 8 elements per iteration, no scalar conversion in the loop.
//! - `half::sum` (f16): also vectorized (conversions through `pcmpeqw`,
//!   `pcmpgtd`, `mulps`, `paddd` and `pand`/`pandn`/`por` selects, `addps`),
//!   but the two widenings and the narrowing cost ~19 instructions per
//!   element, so f16 is compute-bound at about a third of bf16 (SSE2 has no
//!   f16 conversion instruction; an F16C path behind runtime detection would
//!   be the next step).
//! - others: `addpd`/`mulpd`/`minpd`/`maxpd` (f64), `mulps`/`minps`/`maxps`,
//!   `paddb`/`paddd`/`paddq`, `pmullw` (i8 prod), `pmuludq` (32/64-bit prod,
//!   no packed 32×32 low multiply in SSE2), `pminub`/`pmaxub`, `pcmpgt*`
//!   selects for the other integer min/max. Unsigned sum/prod kernels are
//!   folded into the signed ones (identical code).
//!
//! Each vector loop is preceded by a one-off runtime overlap check (rustc
//! inlines the slice loops before LLVM, losing their no-alias facts), which
//! distinct or identical buffers pass. To reproduce:
//!
//! ```text
//! export CARGO_TARGET_DIR=/tmp/tgt-reduce
//! cargo rustc --release -p ferrocx-algo --lib -- --emit asm
//! S=$(ls -t $CARGO_TARGET_DIR/release/deps/ferrocx_algo-*.s | head -1)
//! awk '/^_ZN12ferrocx_algo6reduce7kernels5float3sum.*:$/,/\.cfi_endproc/' $S | grep -c addps
//! awk '/^_ZN12ferrocx_algo6reduce7kernels8bfloat163sum.*:$/,/\.cfi_endproc/' $S \
//!   | grep -oE 'addps|pslld|psrld|paddd|pcmpgtd|packssdw' | sort | uniq -c
//! ```
//! (`4half3sum`, `6double3sum`, `5int323sum`, … for the others.)
//!
//! ## Throughput
//!
//! `reduce_throughput` (ignored test), 2-vCPU AMD EPYC VM shared with other
//! jobs (load 6–7), best of 10 calls on 16 MiB buffers. GB/s of one buffer
//! (bytes of `b` reduced per second; the memory traffic is 3× that), range
//! over three runs:
//!
//! | sum of | `dst = a + b` | `a += b`  |
//! |--------|---------------|-----------|
//! | f32    | 6.0–6.7       | 9.8–12.5  |
//! | bf16   | 4.0–5.0       | 5.2       |
//! | f16    | 1.0–1.5       | 1.0–1.2   |
//! | f64    | 5.6–7.0       | 8.3–13.4  |
//! | i32    | 6.2–7.0       | 8.4–11.0  |
//!
//! f32/f64/i32 are memory-bound, bf16 close to it, f16 compute-bound (see
//! above). Reproduce with
//! `cargo test --release -p ferrocx-algo --lib reduce_throughput -- --ignored --nocapture`.

mod kernels;
#[cfg(test)]
mod tests;

pub use crate::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

use crate::types::{DataType, RedOp};
use kernels::{Bf16Fmt, E4M3Fmt, E5M2Fmt, F16Fmt, Half, Kernel, Quarter};

/// The kernel for `(dtype, op)` (`Avg` reduces like `Sum`).
fn kernel(dtype: DataType, op: RedOp) -> Kernel {
    macro_rules! by_op {
        ($m:ident) => {
            match op {
                RedOp::Sum | RedOp::Avg => kernels::$m::sum,
                RedOp::Prod => kernels::$m::prod,
                RedOp::Min => kernels::$m::min,
                RedOp::Max => kernels::$m::max,
            }
        };
    }
    match dtype {
        DataType::I8 => by_op!(int8),
        DataType::U8 => by_op!(uint8),
        DataType::I32 => by_op!(int32),
        DataType::U32 => by_op!(uint32),
        DataType::I64 => by_op!(int64),
        DataType::U64 => by_op!(uint64),
        DataType::F16 => by_op!(half),
        DataType::Bf16 => by_op!(bfloat16),
        DataType::F32 => by_op!(float),
        DataType::F64 => by_op!(double),
        DataType::F8E4M3 => by_op!(f8e4m3),
        DataType::F8E5M2 => by_op!(f8e5m2),
    }
}

/// `dst[i] = a[i] op b[i]` for `n` elements of `dtype` (`Avg` reduces like `Sum`).
///
/// # Safety
/// Each pointer must be valid for `n` elements and aligned to the element size;
/// `dst` may equal `a` or `b` exactly but must not partially overlap either.
pub unsafe fn reduce(
    dtype: DataType,
    op: RedOp,
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    n: usize,
) {
    debug_assert!(
        n == 0 || (dst as usize | a as usize | b as usize) & (dtype.size() - 1) == 0,
        "reduce: misaligned {dtype} pointer"
    );
    // SAFETY: forwarded from the caller.
    unsafe { kernel(dtype, op)(dst, a, b, n) }
}

/// The operator's final step on fully reduced elements: for `Avg`, divide by
/// `nranks` (floats: in their own precision, f16/bf16 through f32; integers:
/// truncating division of the wrapped sum); nothing for the other operators.
/// `nranks == 0` is treated as 1 (nothing to do).
///
/// # Safety
/// `dst` must be valid for `n` elements and aligned.
pub unsafe fn finish(dtype: DataType, op: RedOp, dst: *mut u8, n: usize, nranks: usize) {
    if op != RedOp::Avg || n == 0 || nranks <= 1 {
        return;
    }
    debug_assert!(
        dst as usize & (dtype.size() - 1) == 0,
        "finish: misaligned {dtype} pointer"
    );
    // Integer divisors, clamped to the type used for the division: exact for
    // every rank count below 2⁶³ (past that only i64::MIN would come out
    // wrong, as -1 instead of 0).
    let si = i64::try_from(nranks).unwrap_or(i64::MAX);
    let ui = u64::try_from(nranks).unwrap_or(u64::MAX);
    let f = nranks as f32;
    let d = nranks as f64;
    let p = dst;
    // SAFETY: (all arms) forwarded from the caller; `p` is aligned for the type.
    unsafe {
        match dtype {
            DataType::I8 => kernels::unary(p.cast::<i8>(), n, |x| (x as i64 / si) as i8),
            DataType::U8 => kernels::unary(p.cast::<u8>(), n, |x| (x as u64 / ui) as u8),
            DataType::I32 => kernels::unary(p.cast::<i32>(), n, |x| (x as i64 / si) as i32),
            DataType::U32 => kernels::unary(p.cast::<u32>(), n, |x| (x as u64 / ui) as u32),
            DataType::I64 => kernels::unary(p.cast::<i64>(), n, |x| x / si),
            DataType::U64 => kernels::unary(p.cast::<u64>(), n, |x| x / ui),
            DataType::F16 => {
                kernels::unary(p.cast::<u16>(), n, |x| F16Fmt::narrow(F16Fmt::widen(x) / f))
            }
            DataType::Bf16 => kernels::unary(p.cast::<u16>(), n, |x| {
                Bf16Fmt::narrow(Bf16Fmt::widen(x) / f)
            }),
            DataType::F32 => kernels::unary(p.cast::<f32>(), n, |x| x / f),
            DataType::F64 => kernels::unary(p.cast::<f64>(), n, |x| x / d),
            DataType::F8E4M3 => kernels::unary(p, n, |x| E4M3Fmt::narrow(E4M3Fmt::widen(x) / f)),
            DataType::F8E5M2 => kernels::unary(p, n, |x| E5M2Fmt::narrow(E5M2Fmt::widen(x) / f)),
        }
    }
}
