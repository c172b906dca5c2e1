//! Element-wise reduction kernels for device memory, compiled at run time with
//! NVRTC ([`nvrtc`]).
//!
//! [`Kernels`] (one per CUDA context) queues `dst[i] = a[i] op b[i]`
//! ([`Kernels::reduce`]) and the operator's last step ([`Kernels::finish`]:
//! avg's division by the rank count) on a stream, for every [`DataType`] ×
//! [`RedOp`].
//!
//! ## Semantics: those of the CPU kernels (the core's `reduce` module)
//!
//! The CUDA C is generated from the same definitions as the core's `reduce` module:
//! integers wrap (computed in the unsigned type of the same width); `Avg`
//! reduces as `Sum` and [`Kernels::finish`] divides once at the end (integers:
//! truncating division of the wrapped sum, signed types through `i64`,
//! unsigned through `u64`, by `nranks` clamped as the CPU clamps it; floats in
//! their own precision, by `nranks as f32` / `nranks as f64`); float min/max
//! are the selects `a < b ? a : b` / `a > b ? a : b` (so a NaN in `a` yields
//! `b`, a NaN in `b` yields the NaN, and `min(-0, +0)` is `+0`, as on the CPU);
//! f16 and bf16 are widened to f32 on their raw `u16` bits, combined, and
//! narrowed once with the very conversions of `reduce/half.rs`, written again
//! in CUDA C (no `cuda_fp16.h`: NVRTC may not find headers). Compiled with
//! `--fmad=false --ftz=false --prec-div=true --prec-sqrt=true`: no fused
//! multiply-adds (the f16 narrowing relies on a separately rounded multiply
//! and add), subnormals kept, IEEE division.
//!
//! The results are therefore identical bit for bit to the CPU's, with one
//! exception: the payload and sign of a NaN *produced by arithmetic* (sum,
//! prod, avg of a NaN or of inf − inf, 0 × inf): the GPU returns its canonical
//! NaN, x86 propagates an operand's payload or returns its own default NaN;
//! both are NaN (and stay NaN through f16/bf16). Min/max only select, and are
//! identical including NaN bits.
//!
//! ## Kernels
//!
//! One CUDA source per (type, operator) — `sum`, `prod`, `min`, `max` (avg
//! uses `sum`) — and one per type for the finish step; see [`reduce_source`]
//! and [`finish_source`]. Entry points are named
//! `ferrocx_reduce_<type>_<op>` and `ferrocx_finish_<type>` (type names as
//! nccl-tests prints them: `ferrocx_reduce_bfloat16_sum`), so profilers show
//! what ran. Each is a grid-stride loop over 16-byte vectors (`ld.global.v4`)
//! when the three pointers have the same alignment modulo 16 (a scalar head
//! brings them to a 16-byte boundary, a scalar tail finishes), unrolled four
//! vectors deep for large arrays; other alignments take a scalar grid-stride
//! loop. Blocks of [`BLOCK`] threads; the grid is the device's SM count ×
//! the kernel's occupancy (blocks per SM) — one full wave — or fewer blocks
//! when there is less work than that.
//!
//! ## Compilation and caching
//!
//! Every source is compiled and loaded when a communicator opens its device
//! ([`Kernels::prepare_all`], several compiles at once), so that no module is
//! loaded once operations can be in flight (a load waits for the device's queued
//! work); a kernel a standalone [`Kernels`] has not prepared is built at first use.
//! Compiles happen once per process for each compute capability, and images are
//! kept on disk between processes (`FERROCX_KERNEL_CACHE`, `kernels/kcache.rs`):
//! by default ([`Image::Auto`]) to a CUBIN for the device's real architecture
//! (`--gpu-architecture=sm_90`: no driver JIT, whatever PTX version the driver
//! accepts), falling back to PTX (`compute_90`, or the newest virtual
//! architecture this NVRTC knows that is not newer than the device) for the
//! driver to JIT when NVRTC cannot target the device. Images are kept in a
//! process-wide cache; modules are loaded once per context and shared by every
//! `Kernels` of that context (they live while one does: each holds a retain
//! of the primary context, so a context handle is never reused under a cached
//! module).
//!
//! ## Errors
//!
//! [`Error::Unsupported`]: no CUDA driver or device, no NVRTC, or a kernel
//! that NVRTC or the driver would not build or load (the message names the
//! kernel, type, operator, architecture and NVRTC's or the JIT's log);
//! [`Error::InvalidArgument`]: a null pointer or one not aligned to the
//! element size (checked before anything is queued); [`Error::Cuda`]: a
//! failed driver call (`cuLaunchKernel`, …; the message names the call, the kernel
//! and the driver's code).
//!
//! ## Environment
//!
//! `FERROCX_KERNEL_CACHE`: where compiled images are kept (`kernels/kcache.rs`);
//! NVRTC is found as [`nvrtc`] says (`FERROCX_NVRTC_LIB`, `CUDA_HOME`).

pub mod graph_wait;
pub mod kcache;
pub mod ll;
pub mod ll128;
pub mod moves;
pub mod nvrtc;
pub mod p2p;
pub mod simple;

use crate::cuda::{self, sys, Context};
pub use ferrocx_algo::types::{DataType, RedOp};
use nvrtc::Nvrtc;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock, Weak};

/// Threads per block of every kernel.
pub const BLOCK: u32 = 256;

/// NVRTC options of every compile (besides the architecture).
pub const NVRTC_OPTIONS: [&str; 6] = [
    "-default-device",
    "--std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
];

/// Which code image the kernels are built as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Image {
    /// CUBIN for the device's architecture, else PTX (the default).
    #[default]
    Auto,
    /// CUBIN only (an error when NVRTC cannot target the device).
    Cubin,
    /// PTX only, compiled by the driver's JIT at module load.
    Ptx,
}

/// The kernels of one source: the four binary operators, and the finish step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[doc(hidden)]
pub enum Kind {
    Sum,
    Prod,
    Min,
    Max,
    Finish,
}

const KINDS: usize = 5;
const SLOTS: usize = DataType::ALL.len() * KINDS;

impl Kind {
    /// The kernel that does `op`'s reduction steps (avg reduces as sum).
    #[doc(hidden)]
    pub fn of(op: RedOp) -> Kind {
        match op {
            RedOp::Sum | RedOp::Avg => Kind::Sum,
            RedOp::Prod => Kind::Prod,
            RedOp::Min => Kind::Min,
            RedOp::Max => Kind::Max,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Sum => "sum",
            Kind::Prod => "prod",
            Kind::Min => "min",
            Kind::Max => "max",
            Kind::Finish => "finish",
        }
    }
}

#[doc(hidden)]
pub fn slot(dtype: DataType, kind: Kind) -> usize {
    dtype as usize * KINDS + kind.index()
}

// ---------------------------------------------------------------------------
// CUDA C generation
// ---------------------------------------------------------------------------

/// Shared by every source: the function qualifier, bit casts, and the four
/// f16/bf16 conversions of `reduce/half.rs`, statement for statement. Also
/// valid host C++ (without `__CUDACC__`), which the unit tests compile with
/// the system's C++ compiler to check the translation against the CPU kernels.
#[doc(hidden)]
pub const PRELUDE: &str = r#"
#ifdef __CUDACC__
#define FX_FN static __device__ __forceinline__
FX_FN float fx_u2f(unsigned int u) { return __uint_as_float(u); }
FX_FN unsigned int fx_f2u(float f) { return __float_as_uint(f); }
#else
#include <math.h>
#include <string.h>
#define FX_FN static inline
FX_FN float fx_u2f(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
FX_FN unsigned int fx_f2u(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
#endif

/* bf16 bits -> f32 (exact). */
FX_FN float fx_bf16_to_f32(unsigned short h) {
    return fx_u2f((unsigned int)h << 16);
}

/* f32 -> bf16 bits, round to nearest even; NaN quieted, sign and top payload kept. */
FX_FN unsigned short fx_f32_to_bf16(float x) {
    const unsigned int b = fx_f2u(x);
    const unsigned int rounded = (b + (0x7fffu + ((b >> 16) & 1u))) >> 16;
    const unsigned int nan = (b >> 16) | 0x40u;
    const unsigned int r = (b & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
    return (unsigned short)r;
}

/* f16 bits -> f32 (exact; the method of Maratyszcza's FP16 library). */
FX_FN float fx_f16_to_f32(unsigned short h) {
    const unsigned int w = (unsigned int)h << 16;
    const unsigned int sign = w & 0x80000000u;
    const unsigned int two_w = w + w;
    const float normal = fx_u2f((two_w >> 4) + (0xe0u << 23)) * fx_u2f((127u - 112u) << 23);
    const float sub = fx_u2f((two_w >> 17) | (126u << 23)) - 0.5f;
    const float r = (h & 0x7c00u) == 0u ? sub : normal;
    return fx_u2f(sign | fx_f2u(r));
}

/* f32 -> f16 bits, IEEE round to nearest even; NaN -> quiet NaN, sign kept. */
FX_FN unsigned short fx_f32_to_f16(float x) {
    const unsigned int w = fx_f2u(x);
    const unsigned int a = w & 0x7fffffffu;
    const float base = fx_u2f(a) * fx_u2f((127u + 112u) << 23) * fx_u2f((127u - 110u) << 23);
    int ei = (int)(a & 0x7f800000u);
    if (ei < (113 << 23)) ei = 113 << 23;
    const unsigned int e = (unsigned int)ei;
    const unsigned int bits = fx_f2u(fx_u2f(e + (15u << 23)) + base);
    const unsigned int nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
    const unsigned int r = a > 0x7f800000u ? 0x7e00u : nonsign;
    return (unsigned short)(r | ((w >> 16) & 0x8000u));
}

/* The two fp8 formats (algo/src/fp8.rs, statement for statement): mantissa
   bits, bias, largest finite value and its code; e5m2 has infinities. */
FX_FN float fx_pow2(int k) { return fx_u2f((unsigned int)(k + 127) << 23); }

FX_FN float fx_fp8_decode(unsigned char b, int mbits, int bias, int infinities) {
    const int ebits = 7 - mbits;
    const int e = (b >> mbits) & ((1 << ebits) - 1);
    const unsigned int m = b & ((1u << mbits) - 1u);
    const int top = (1 << ebits) - 1;
    float mag;
    if (e == top && infinities) mag = m == 0u ? fx_u2f(0x7f800000u) : fx_u2f(0x7fc00000u);
    else if (e == top && m == (1u << mbits) - 1u) mag = fx_u2f(0x7fc00000u);
    else if (e == 0) mag = (float)m * fx_pow2(1 - bias - mbits);
    else mag = (float)((1u << mbits) | m) * fx_pow2(e - bias - mbits);
    return (b & 0x80u) ? -mag : mag;
}

FX_FN unsigned char fx_fp8_encode(float x, int mbits, int bias, float max, unsigned int max_code) {
    const unsigned int w = fx_f2u(x);
    const unsigned int sign = (w >> 24) & 0x80u;
    const float a = fx_u2f(w & 0x7fffffffu);
    if (a != a) return 0x7f;
    if (a >= max) return (unsigned char)(sign | max_code);
    const int emin = 1 - bias;
    int e = (int)((w >> 23) & 0xffu) - 127;
    if (e < emin) e = emin;
    unsigned int n = (unsigned int)rintf(a / fx_pow2(e - mbits));
    const unsigned int one = 1u << mbits;
    if (n < one) return (unsigned char)(sign | n);
    if (n == 2u * one) { e += 1; n = one; }
    return (unsigned char)(sign | (((unsigned int)(e + bias) << mbits) | (n - one)));
}

FX_FN float fx_e4m3_to_f32(unsigned char b) { return fx_fp8_decode(b, 3, 7, 0); }
FX_FN unsigned char fx_f32_to_e4m3(float x) { return fx_fp8_encode(x, 3, 7, 448.0f, 0x7eu); }
FX_FN float fx_e5m2_to_f32(unsigned char b) { return fx_fp8_decode(b, 2, 15, 1); }
FX_FN unsigned char fx_f32_to_e5m2(float x) { return fx_fp8_encode(x, 2, 15, 57344.0f, 0x7bu); }
"#;

/// How a type is declared and computed on in CUDA C.
enum CType {
    /// Integer: its C type and the unsigned type of the same width.
    Int {
        c: &'static str,
        unsigned: &'static str,
        signed: bool,
    },
    /// A 16- or 8-bit float on its bits (`storage`): widen and narrow functions.
    Half {
        storage: &'static str,
        widen: &'static str,
        narrow: &'static str,
    },
    /// `float` or `double`.
    Float {
        c: &'static str,
        divisor: &'static str,
    },
}

fn ctype(dtype: DataType) -> CType {
    let int = |c, unsigned, signed| CType::Int {
        c,
        unsigned,
        signed,
    };
    match dtype {
        DataType::I8 => int("signed char", "unsigned char", true),
        DataType::U8 => int("unsigned char", "unsigned char", false),
        DataType::I32 => int("int", "unsigned int", true),
        DataType::U32 => int("unsigned int", "unsigned int", false),
        DataType::I64 => int("long long", "unsigned long long", true),
        DataType::U64 => int("unsigned long long", "unsigned long long", false),
        DataType::F16 => CType::Half {
            storage: "unsigned short",
            widen: "fx_f16_to_f32",
            narrow: "fx_f32_to_f16",
        },
        DataType::Bf16 => CType::Half {
            storage: "unsigned short",
            widen: "fx_bf16_to_f32",
            narrow: "fx_f32_to_bf16",
        },
        DataType::F32 => CType::Float {
            c: "float",
            divisor: "f",
        },
        DataType::F64 => CType::Float {
            c: "double",
            divisor: "d",
        },
        DataType::F8E4M3 => CType::Half {
            storage: "unsigned char",
            widen: "fx_e4m3_to_f32",
            narrow: "fx_f32_to_e4m3",
        },
        DataType::F8E5M2 => CType::Half {
            storage: "unsigned char",
            widen: "fx_e5m2_to_f32",
            narrow: "fx_f32_to_e5m2",
        },
    }
}

/// `typedef elem_t` and the element function of `kind`: `fx_op(a, b)` for an
/// operator, `fx_fin(x, si, ui, f, d)` for the finish step (divisors: `si`
/// for signed integers, `ui` unsigned, `f` f32/f16/bf16, `d` f64).
#[doc(hidden)]
pub fn element_source(dtype: DataType, kind: Kind) -> String {
    const FIN: &str =
        "FX_FN elem_t fx_fin(elem_t x, long long si, unsigned long long ui, float f, double d)";
    const OP: &str = "FX_FN elem_t fx_op(elem_t a, elem_t b)";
    let sel = |k: Kind| match k {
        Kind::Min => "a < b ? a : b",
        _ => "a > b ? a : b",
    };
    let mut s = String::new();
    match ctype(dtype) {
        CType::Int {
            c,
            unsigned,
            signed,
        } => {
            let _ = writeln!(s, "typedef {c} elem_t;\ntypedef {unsigned} uelem_t;");
            let body = match kind {
                Kind::Sum => "(elem_t)((uelem_t)a + (uelem_t)b)".to_string(),
                Kind::Prod => "(elem_t)((uelem_t)a * (uelem_t)b)".to_string(),
                Kind::Min | Kind::Max => sel(kind).to_string(),
                Kind::Finish if signed => "(elem_t)((long long)x / si)".to_string(),
                Kind::Finish => "(elem_t)((unsigned long long)x / ui)".to_string(),
            };
            let head = if kind == Kind::Finish { FIN } else { OP };
            let _ = writeln!(s, "{head} {{ return {body}; }}");
        }
        CType::Half {
            storage,
            widen,
            narrow,
        } => {
            let _ = writeln!(s, "typedef {storage} elem_t;");
            let body = match kind {
                Kind::Sum => format!("return {narrow}({widen}(a) + {widen}(b));"),
                Kind::Prod => format!("return {narrow}({widen}(a) * {widen}(b));"),
                Kind::Min => format!(
                    "const float x = {widen}(a), y = {widen}(b); return {narrow}(x < y ? x : y);"
                ),
                Kind::Max => format!(
                    "const float x = {widen}(a), y = {widen}(b); return {narrow}(x > y ? x : y);"
                ),
                Kind::Finish => format!("return {narrow}({widen}(x) / f);"),
            };
            let head = if kind == Kind::Finish { FIN } else { OP };
            let _ = writeln!(s, "{head} {{ {body} }}");
        }
        CType::Float { c, divisor } => {
            let _ = writeln!(s, "typedef {c} elem_t;");
            let body = match kind {
                Kind::Sum => "a + b".to_string(),
                Kind::Prod => "a * b".to_string(),
                Kind::Min | Kind::Max => sel(kind).to_string(),
                Kind::Finish => format!("x / {divisor}"),
            };
            let head = if kind == Kind::Finish { FIN } else { OP };
            let _ = writeln!(s, "{head} {{ return {body}; }}");
        }
    }
    s
}

/// The vector type and helpers every kernel uses (after `elem_t`).
const VECTOR: &str = r#"
#define FX_V (16 / sizeof(elem_t))
struct alignas(16) fx_u4 { unsigned int x, y, z, w; };
union fx_vec { fx_u4 u; elem_t e[FX_V]; };
typedef unsigned long long fx_size;
"#;

/// The entry point's name for `kind` on `dtype`.
#[doc(hidden)]
pub fn kernel_name(dtype: DataType, kind: Kind) -> String {
    match kind {
        Kind::Finish => format!("ferrocx_finish_{}", dtype.name()),
        k => format!("ferrocx_reduce_{}_{}", dtype.name(), k.name()),
    }
}

fn source(dtype: DataType, kind: Kind) -> String {
    let name = kernel_name(dtype, kind);
    let mut s = format!(
        "/* ferrocx: {name} (generated by sdk/src/kernels/mod.rs) */\n#define FX_BLOCK {BLOCK}\n"
    );
    s.push_str(PRELUDE);
    s.push_str(&element_source(dtype, kind));
    s.push_str(VECTOR);
    let body = if kind == Kind::Finish {
        FINISH_KERNEL
    } else {
        REDUCE_KERNEL
    };
    s.push_str(&body.replace("FX_NAME", &name));
    if let Some(ll) = ll_name(dtype, kind) {
        s.push_str(&ll::SOURCE.replace("FX_LL_NAME", &ll));
        s.push_str(&ll128::SOURCE.replace(
            "FX_LL128_NAME",
            &ll128_name(dtype, kind).expect("as ll_name"),
        ));
        s.push_str(
            &simple::SOURCE
                .replace("FX_SP_NAME", &simple_name(dtype, kind).expect("as ll_name"))
                .replace("FX_SP_SLOTS_ULL", &format!("{}ull", simple::SLOTS))
                .replace("FX_SP_MAX_RANKS", &ll::MAX_RANKS.to_string())
                .replace("FX_SP_ERR_WINDOW", &format!("{}ull", simple::ERR_WINDOW))
                .replace(
                    "FX_SP_DIRECT_MAGIC",
                    &format!("{}ull", simple::DIRECT_MAGIC),
                ),
        );
    }
    if let Some(p2p) = p2p_name(dtype, kind) {
        s.push_str(
            &p2p::SOURCE
                .replace("FX_P2P_NAME", &p2p)
                .replace(
                    "FX_P2P_ERR_SIZE_SENT",
                    &format!("{}ull", p2p::ERR_SIZE_SENT),
                )
                .replace("FX_P2P_ERR_SIZE", &format!("{}ull", p2p::ERR_SIZE))
                .replace("FX_SP_MAX_RANKS", &ll::MAX_RANKS.to_string()),
        );
        // The graph barrier wait only compares words: beside the point-to-point kernel.
        s.push_str(&graph_wait::source());
    }
    s
}

/// The point-to-point kernel's entry point ([`p2p`]): it only moves bytes,
/// so one module has it, `u8` sum's (beside the Simple kernel it builds on).
#[doc(hidden)]
pub fn p2p_name(dtype: DataType, kind: Kind) -> Option<String> {
    (dtype == DataType::U8 && kind == Kind::Sum).then(|| "ferrocx_p2p".to_string())
}

/// The LL exchange kernel's entry point in the module of `kind` on `dtype`
/// (every module but the finish step's has one: [`ll`]).
#[doc(hidden)]
pub fn ll_name(dtype: DataType, kind: Kind) -> Option<String> {
    (kind != Kind::Finish).then(|| format!("ferrocx_ll_{}_{}", dtype.name(), kind.name()))
}

/// The LL128 exchange kernel's entry point in the module of `kind` on
/// `dtype` (beside the LL kernel, whose helpers it uses: [`ll128`]).
#[doc(hidden)]
pub fn ll128_name(dtype: DataType, kind: Kind) -> Option<String> {
    (kind != Kind::Finish).then(|| format!("ferrocx_ll128_{}_{}", dtype.name(), kind.name()))
}

/// The Simple exchange kernel's entry point in the module of `kind` on
/// `dtype` (beside the LL kernel: [`simple`]).
#[doc(hidden)]
pub fn simple_name(dtype: DataType, kind: Kind) -> Option<String> {
    (kind != Kind::Finish).then(|| format!("ferrocx_simple_{}_{}", dtype.name(), kind.name()))
}

const REDUCE_KERNEL: &str = r#"
FX_FN fx_u4 fx_vop(const fx_u4 x, const fx_u4 y) {
    fx_vec p, q, r;
    p.u = x;
    q.u = y;
#pragma unroll
    for (int k = 0; k < (int)FX_V; ++k) r.e[k] = fx_op(p.e[k], q.e[k]);
    return r.u;
}

/* dst[i] = a[i] op b[i] for i < n; dst may be a or b (each element is read
   before it is written, by the same thread). */
extern "C" __global__ void __launch_bounds__(FX_BLOCK)
FX_NAME(elem_t* dst, const elem_t* a, const elem_t* b, fx_size n) {
    const fx_size tid = (fx_size)blockIdx.x * blockDim.x + threadIdx.x;
    const fx_size stride = (fx_size)gridDim.x * blockDim.x;
    const fx_size mis = (fx_size)dst & 15ull;
    if (((fx_size)a & 15ull) != mis || ((fx_size)b & 15ull) != mis) {
        for (fx_size i = tid; i < n; i += stride) dst[i] = fx_op(a[i], b[i]);
        return;
    }
    fx_size head = ((16ull - mis) & 15ull) / sizeof(elem_t);
    if (head > n) head = n;
    if (tid < head) dst[tid] = fx_op(a[tid], b[tid]);
    dst += head;
    a += head;
    b += head;
    n -= head;
    fx_u4* D = (fx_u4*)dst;
    const fx_u4* A = (const fx_u4*)a;
    const fx_u4* B = (const fx_u4*)b;
    const fx_size nv = n / FX_V;
    fx_size i = tid;
    for (; i + 3ull * stride < nv; i += 4ull * stride) {
        const fx_u4 a0 = A[i], a1 = A[i + stride], a2 = A[i + 2ull * stride], a3 = A[i + 3ull * stride];
        const fx_u4 b0 = B[i], b1 = B[i + stride], b2 = B[i + 2ull * stride], b3 = B[i + 3ull * stride];
        D[i] = fx_vop(a0, b0);
        D[i + stride] = fx_vop(a1, b1);
        D[i + 2ull * stride] = fx_vop(a2, b2);
        D[i + 3ull * stride] = fx_vop(a3, b3);
    }
    for (; i < nv; i += stride) D[i] = fx_vop(A[i], B[i]);
    for (fx_size j = nv * FX_V + tid; j < n; j += stride) dst[j] = fx_op(a[j], b[j]);
}
"#;

const FINISH_KERNEL: &str = r#"
FX_FN fx_u4 fx_vfin(const fx_u4 x, long long si, unsigned long long ui, float f, double d) {
    fx_vec p, r;
    p.u = x;
#pragma unroll
    for (int k = 0; k < (int)FX_V; ++k) r.e[k] = fx_fin(p.e[k], si, ui, f, d);
    return r.u;
}

/* dst[i] = dst[i] / nranks for i < n (the divisor in each type's form). */
extern "C" __global__ void __launch_bounds__(FX_BLOCK)
FX_NAME(elem_t* dst, fx_size n, long long si, unsigned long long ui, float f, double d) {
    const fx_size tid = (fx_size)blockIdx.x * blockDim.x + threadIdx.x;
    const fx_size stride = (fx_size)gridDim.x * blockDim.x;
    const fx_size mis = (fx_size)dst & 15ull;
    fx_size head = ((16ull - mis) & 15ull) / sizeof(elem_t);
    if (head > n) head = n;
    if (tid < head) dst[tid] = fx_fin(dst[tid], si, ui, f, d);
    dst += head;
    n -= head;
    fx_u4* D = (fx_u4*)dst;
    const fx_size nv = n / FX_V;
    fx_size i = tid;
    for (; i + 3ull * stride < nv; i += 4ull * stride) {
        const fx_u4 x0 = D[i], x1 = D[i + stride], x2 = D[i + 2ull * stride], x3 = D[i + 3ull * stride];
        D[i] = fx_vfin(x0, si, ui, f, d);
        D[i + stride] = fx_vfin(x1, si, ui, f, d);
        D[i + 2ull * stride] = fx_vfin(x2, si, ui, f, d);
        D[i + 3ull * stride] = fx_vfin(x3, si, ui, f, d);
    }
    for (; i < nv; i += stride) D[i] = fx_vfin(D[i], si, ui, f, d);
    for (fx_size j = nv * FX_V + tid; j < n; j += stride) dst[j] = fx_fin(dst[j], si, ui, f, d);
}
"#;

/// The CUDA C source of `op`'s reduction kernel on `dtype` (avg's is sum's).
pub fn reduce_source(dtype: DataType, op: RedOp) -> String {
    source(dtype, Kind::of(op))
}

/// The CUDA C source of the finish (avg division) kernel on `dtype`.
pub fn finish_source(dtype: DataType) -> String {
    source(dtype, Kind::Finish)
}

// ---------------------------------------------------------------------------
// Compilation (process-wide) and modules (per context)
// ---------------------------------------------------------------------------

/// What went wrong building or launching a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No CUDA driver or device, no NVRTC, or a kernel that would not build or load.
    Unsupported(String),
    /// A null or misaligned pointer (checked before anything is queued).
    InvalidArgument(String),
    /// A failed driver call (the message names it).
    Cuda(String),
}

impl Error {
    fn invalid(m: impl Into<String>) -> Self {
        Error::InvalidArgument(m.into())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Cuda(m) => write!(f, "CUDA error: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The result of kernel calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A compiled image and how it was made.
#[doc(hidden)]
pub struct Compiled {
    /// The CUBIN or PTX.
    pub bytes: Vec<u8>,
    /// e.g. `CUBIN sm_90` or `PTX compute_90`.
    pub what: String,
}

/// Compile `kind` on `dtype` for compute capability `cc` (e.g. 90), once per
/// process.
fn compiled(
    nvrtc: &Nvrtc,
    cc: i32,
    pref: Image,
    dtype: DataType,
    kind: Kind,
) -> Result<Arc<Compiled>, String> {
    type Cache = HashMap<(i32, Image, usize), Result<Arc<Compiled>, String>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (cc, pref, slot(dtype, kind));
    if let Some(r) = cache.lock().get(&key) {
        return r.clone();
    }
    // Compiled without the lock, so that several kernels compile at once
    // ([`Kernels::prepare_all`]); a rare duplicate compile keeps the first result.
    let r = compile(nvrtc, cc, pref, dtype, kind).map(Arc::new);
    cache.lock().entry(key).or_insert(r).clone()
}

#[doc(hidden)]
pub fn compile(
    nvrtc: &Nvrtc,
    cc: i32,
    pref: Image,
    dtype: DataType,
    kind: Kind,
) -> Result<Compiled, String> {
    let src = source(dtype, kind);
    let file = format!("{}.cu", kernel_name(dtype, kind));
    compile_source(nvrtc, cc, pref, &src, &file)
}

/// Compile CUDA C `src` for compute capability `cc`: a CUBIN for `sm_<cc>` unless
/// `pref` says PTX, else (or if that fails, with `Image::Auto`) PTX for the newest
/// virtual architecture this NVRTC knows that is not newer than the device.
fn compile_source(
    nvrtc: &Nvrtc,
    cc: i32,
    pref: Image,
    src: &str,
    file: &str,
) -> Result<Compiled, String> {
    let (maj, min) = nvrtc.version();
    let key_cc = cc.to_string();
    let key_nvrtc = format!("{maj}.{min}");
    let key_pref = format!("{pref:?}");
    let key: [&str; 5] = [
        src,
        &key_cc,
        &key_nvrtc,
        &key_pref,
        &NVRTC_OPTIONS.join(" "),
    ];
    if let Some((what, bytes)) = kcache::get(&key) {
        return Ok(Compiled { bytes, what });
    }
    let c = compile_uncached(nvrtc, cc, pref, src, file)?;
    kcache::put(&key, &c.what, &c.bytes);
    Ok(c)
}

fn compile_uncached(
    nvrtc: &Nvrtc,
    cc: i32,
    pref: Image,
    src: &str,
    file: &str,
) -> Result<Compiled, String> {
    let opts = |arch: String| {
        let mut v = vec![arch];
        v.extend(NVRTC_OPTIONS.iter().map(|s| s.to_string()));
        v
    };
    let (maj, min) = nvrtc.version();
    let mut cubin_err = None;
    if pref != Image::Ptx {
        let o = opts(format!("--gpu-architecture=sm_{cc}"));
        let o: Vec<&str> = o.iter().map(String::as_str).collect();
        match nvrtc.compile_cubin(src, file, &o) {
            Ok(bytes) => {
                return Ok(Compiled {
                    bytes,
                    what: format!("CUBIN sm_{cc} (NVRTC {maj}.{min})"),
                })
            }
            Err(e) if pref == Image::Cubin => return Err(e),
            Err(e) => cubin_err = Some(e),
        }
    }
    // PTX for the device's virtual architecture, or the newest one this NVRTC
    // knows that is not newer (the driver JITs it forward).
    let virt = match nvrtc.supported_archs() {
        Some(archs) => archs
            .into_iter()
            .filter(|&a| a <= cc)
            .max()
            .ok_or_else(|| {
                format!("NVRTC {maj}.{min} supports no architecture up to compute_{cc}")
            })?,
        None => cc,
    };
    let o = opts(format!("--gpu-architecture=compute_{virt}"));
    let o: Vec<&str> = o.iter().map(String::as_str).collect();
    match nvrtc.compile(src, file, &o) {
        Ok(bytes) => Ok(Compiled {
            bytes,
            what: format!("PTX compute_{virt} (NVRTC {maj}.{min})"),
        }),
        Err(e) => Err(match cubin_err {
            Some(c) => format!("{e}\n(CUBIN for sm_{cc} failed first: {c})"),
            None => e,
        }),
    }
}

/// A loaded kernel.
struct Func {
    module: sys::CUmodule,
    func: sys::CUfunction,
    /// The module's LL exchange kernel (null where it has none).
    ll: sys::CUfunction,
    /// Resident blocks of `BLOCK` threads of it per SM.
    ll_blocks_per_sm: u32,
    /// The module's LL128 exchange kernel (null where it has none).
    ll128: sys::CUfunction,
    /// Resident blocks of `BLOCK` threads of it per SM.
    ll128_blocks_per_sm: u32,
    /// The module's Simple exchange kernel (null where it has none).
    simple: sys::CUfunction,
    /// Resident blocks of `BLOCK` threads of it per SM.
    simple_blocks_per_sm: u32,
    /// The module's point-to-point kernel (null where it has none).
    p2p: sys::CUfunction,
    /// The graph barrier wait ([`graph_wait`]), beside it.
    graph_wait: sys::CUfunction,
    /// Resident blocks of `BLOCK` threads of it per SM.
    p2p_blocks_per_sm: u32,
    /// Resident blocks of `BLOCK` threads per SM.
    blocks_per_sm: u32,
    info: KernelInfo,
}

impl Func {
    /// `entry` (one of this module's kernels), or that the module lacks `what`.
    fn has(&self, entry: sys::CUfunction, what: &str) -> Result<()> {
        if entry.is_null() {
            return Err(Error::Unsupported(format!(
                "{} has no {what}",
                self.info.name
            )));
        }
        Ok(())
    }
}

// SAFETY: module and function handles may be used from any thread (with their
// context current); they are immutable after loading.
unsafe impl Send for Func {}
// SAFETY: as above.
unsafe impl Sync for Func {}

/// What was built for one kernel (for logs and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// Entry point, e.g. `ferrocx_reduce_float_sum`.
    pub name: String,
    /// The image loaded, e.g. `CUBIN sm_90 (NVRTC 13.0)`.
    pub image: String,
    /// Registers per thread.
    pub registers: i32,
    /// Local memory per thread in bytes (spills; 0 expected).
    pub local_bytes: i32,
    /// Resident blocks of [`BLOCK`] threads per SM.
    pub blocks_per_sm: u32,
}

/// Modules of one context, shared by every [`Kernels`] of it.
struct Shared {
    /// A retain of the (primary) context: it outlives the modules.
    ctx: Context,
    slots: Vec<OnceLock<std::result::Result<Func, String>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let loaded: Vec<sys::CUmodule> = self
            .slots
            .iter()
            .filter_map(|s| s.get()?.as_ref().ok().map(|f| f.module))
            .collect();
        if loaded.is_empty() {
            return;
        }
        // SAFETY: the context is retained by `self.ctx`; every module was
        // loaded into it and is unloaded once; the push is undone by the pop.
        unsafe {
            if sys::cuCtxPushCurrent_v2(self.ctx.raw()) != sys::CUresult::CUDA_SUCCESS {
                return;
            }
            for m in loaded {
                sys::cuModuleUnload(m);
            }
            let mut old = std::ptr::null_mut();
            sys::cuCtxPopCurrent_v2(&mut old);
        }
    }
}

/// Load `image` into the current context and get its entry point `name`.
/// Compile `src` for `device` (as the reduction kernels are: CUBIN, else PTX)
/// and load its entry point `name` into the current context, which must be
/// `device`'s. The module stays loaded for the life of the process. Used for the
/// stream-wait kernel, and by diagnostics that need a kernel of their own.
pub fn load_source(
    device: i32,
    src: &str,
    file: &str,
    name: &str,
) -> std::result::Result<sys::CUfunction, String> {
    let nvrtc = Nvrtc::get()?;
    let attr = |a: sys::CUdevice_attribute| {
        let mut v = 0;
        // SAFETY: valid out pointer; a bad ordinal is reported, not undefined.
        cuda::check(
            unsafe { sys::cuDeviceGetAttribute(&mut v, a, device) },
            "cuDeviceGetAttribute",
        )
        .map(|_| v)
        .map_err(|e| e.to_string())
    };
    use sys::CUdevice_attribute as A;
    let cc = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? * 10
        + attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let image = compile_source(nvrtc, cc, Image::Auto, src, file)?;
    let f = load(&image, name, None, None)?;
    tracing::debug!(target: "ferrocx::device", kernel = name, image = %f.info.image, "kernel loaded");
    Ok(f.func)
}

/// Launch `func` on a one-dimensional grid of `grid` blocks of `block` threads, no
/// dynamic shared memory, on `stream`. Returns the driver's code (callers name the
/// kernel in their error).
///
/// # Safety
/// `func` belongs to the current context; `params` holds one pointer per kernel
/// parameter, each to a value of that parameter's type living through the call;
/// the memory the kernel touches and `stream` are valid as the kernel needs.
pub unsafe fn launch(
    func: sys::CUfunction,
    grid: u32,
    block: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> sys::CUresult {
    let _span = crate::spans::enter(crate::spans::Point::KernelLaunch);
    // SAFETY: the caller's contract; no `extra` launch options.
    unsafe {
        sys::cuLaunchKernel(
            func,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

/// The driver's version (e.g. 12080), 0 when it cannot be asked.
pub fn driver_version() -> i32 {
    static V: OnceLock<i32> = OnceLock::new();
    *V.get_or_init(|| {
        let mut v = 0;
        // SAFETY: valid out pointer; callers hold a context, so the driver is loaded.
        let r = unsafe { sys::cuDriverGetVersion(&mut v) };
        if r == sys::CUresult::CUDA_SUCCESS {
            v
        } else {
            0
        }
    })
}

/// `exchange`: the module's LL, LL128 and Simple kernels' entry points, if it has them.
fn load(
    image: &Compiled,
    name: &str,
    exchange: Option<(&str, &str, &str)>,
    p2p: Option<&str>,
) -> std::result::Result<Func, String> {
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut log = vec![0u8; 8192];
    let mut opts = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut vals = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    // SAFETY: the caller made the context current; `image` is a complete
    // CUBIN or NUL-terminated PTX; the JIT options are the error log buffer
    // and its size (passed by value in the pointer, as the API specifies),
    // both live for the call.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            image.bytes.as_ptr() as *const c_void,
            opts.len() as u32,
            opts.as_mut_ptr(),
            vals.as_mut_ptr(),
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        return Err(format!(
            "cuModuleLoadDataEx of {name} ({}) failed: {}{}",
            image.what,
            cuda::name(r),
            if end > 0 {
                format!("; JIT log: {}", String::from_utf8_lossy(&log[..end]).trim())
            } else {
                String::new()
            }
        ));
    }
    let unload = |e: String| {
        // SAFETY: loaded above, unloaded once on this error path.
        unsafe { sys::cuModuleUnload(module) };
        e
    };
    let entry = |name: &str| -> std::result::Result<sys::CUfunction, String> {
        let cname = CString::new(name).expect("kernel names have no NUL");
        let mut func: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: a loaded module; NUL-terminated name; valid out pointer.
        let r = unsafe { sys::cuModuleGetFunction(&mut func, module, cname.as_ptr()) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!(
                "cuModuleGetFunction({name}) failed: {}",
                cuda::name(r)
            ));
        }
        if driver_version() >= 12040 {
            // Under lazy module loading (CUDA's default) the code would otherwise be
            // loaded at its first launch, and a load waits for the device's queued work:
            // that work may be an operation waiting for this very process.
            // SAFETY: a function of a loaded module; the driver has cuFuncLoad (12.4+).
            let r = unsafe { sys::cuFuncLoad(func) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuFuncLoad({name}) failed: {}", cuda::name(r)));
            }
        }
        Ok(func)
    };
    let func = entry(name).map_err(unload)?;
    let (ll, ll128, simple) = match exchange {
        Some((l, l8, sp)) => (
            entry(l).map_err(unload)?,
            entry(l8).map_err(unload)?,
            entry(sp).map_err(unload)?,
        ),
        None => (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ),
    };
    let (p2p, graph_wait) = match p2p {
        Some(p) => (
            entry(p).map_err(unload)?,
            entry(graph_wait::NAME).map_err(unload)?,
        ),
        None => (std::ptr::null_mut(), std::ptr::null_mut()),
    };
    let attr = |a: sys::CUfunction_attribute| {
        let mut v = 0;
        // SAFETY: a valid function; valid out pointer.
        let r = unsafe { sys::cuFuncGetAttribute(&mut v, a, func) };
        if r == sys::CUresult::CUDA_SUCCESS {
            v
        } else {
            -1
        }
    };
    let mut blocks = 0;
    // SAFETY: a valid function; valid out pointer; no dynamic shared memory.
    let r = unsafe {
        sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, func, BLOCK as i32, 0)
    };
    if r != sys::CUresult::CUDA_SUCCESS || blocks <= 0 {
        return Err(unload(format!(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor({name}) failed: {} ({blocks} blocks)",
            cuda::name(r)
        )));
    }
    let occupancy = |f: sys::CUfunction, what: &str| -> std::result::Result<u32, String> {
        if f.is_null() {
            return Ok(0);
        }
        let mut blocks = 0;
        // SAFETY: as above, for the module's exchange kernel `f`.
        let r = unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, f, BLOCK as i32, 0)
        };
        if r != sys::CUresult::CUDA_SUCCESS || blocks <= 0 {
            return Err(format!(
                "cuOccupancyMaxActiveBlocksPerMultiprocessor({what} kernel of {name}) failed: {} ({blocks} blocks)",
                cuda::name(r)
            ));
        }
        Ok(blocks as u32)
    };
    let ll_blocks = occupancy(ll, "LL").map_err(unload)?;
    let ll128_blocks = occupancy(ll128, "LL128").map_err(unload)?;
    let simple_blocks = occupancy(simple, "Simple").map_err(unload)?;
    let p2p_blocks = occupancy(p2p, "point-to-point").map_err(unload)?;
    use sys::CUfunction_attribute as FA;
    Ok(Func {
        module,
        func,
        ll,
        ll_blocks_per_sm: ll_blocks,
        ll128,
        ll128_blocks_per_sm: ll128_blocks,
        simple,
        simple_blocks_per_sm: simple_blocks,
        p2p,
        p2p_blocks_per_sm: p2p_blocks,
        graph_wait,
        blocks_per_sm: blocks as u32,
        info: KernelInfo {
            name: name.to_string(),
            image: image.what.clone(),
            registers: attr(FA::CU_FUNC_ATTRIBUTE_NUM_REGS),
            local_bytes: attr(FA::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            blocks_per_sm: blocks as u32,
        },
    })
}

// ---------------------------------------------------------------------------
// The API
// ---------------------------------------------------------------------------

/// The reduction kernels of one CUDA context (cheap to make: kernels are
/// compiled and loaded on first use; see the module docs).
pub struct Kernels {
    shared: Arc<Shared>,
    ctx: sys::CUcontext,
    device: i32,
    cc: (i32, i32),
    sms: u32,
    /// Ranks whose kernels share this GPU at once (the waiting kernels'
    /// one wave is split between them).
    share: u32,
    image: Image,
    nvrtc: &'static Nvrtc,
}

// SAFETY: the context handle may be used from any thread; everything else is
// immutable or synchronized (`Shared`'s slots are `OnceLock`s).
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Kernels(device {}, sm_{}{}, {} SMs, {} ranks sharing it, {:?}, {:?})",
            self.device, self.cc.0, self.cc.1, self.sms, self.share, self.image, self.nvrtc
        )
    }
}

fn driver(r: sys::CUresult, what: impl FnOnce() -> String) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda(format!("{} failed: {}", what(), cuda::name(r))))
    }
}

impl Kernels {
    /// The kernels of `ctx`'s device (its primary context), built as
    /// [`Image::Auto`]. Fails with [`Error::Unsupported`] when CUDA or NVRTC
    /// cannot be used here (the message says why).
    pub fn new(ctx: &Context) -> Result<Self> {
        Self::with_image(ctx, Image::Auto)
    }

    /// The kernels of device `device`'s primary context; [`Error::Unsupported`]
    /// without CUDA, without that device, or without NVRTC.
    pub fn for_device(device: i32) -> Result<Self> {
        cuda::available()
            .map_err(|e| Error::Unsupported(format!("device reduction kernels need CUDA: {e}")))?;
        let ctx = Context::primary(device).map_err(|e| {
            Error::Unsupported(format!(
                "device reduction kernels: no context for CUDA device {device}: {e}"
            ))
        })?;
        Self::with_image(&ctx, Image::Auto)
    }

    /// [`Kernels::new`] with the image kind chosen (tests and diagnostics;
    /// modules are shared per (context, image kind)).
    pub fn with_image(ctx: &Context, image: Image) -> Result<Self> {
        cuda::available()
            .map_err(|e| Error::Unsupported(format!("device reduction kernels need CUDA: {e}")))?;
        let nvrtc = Nvrtc::get()
            .map_err(|e| Error::Unsupported(format!("device reduction kernels need NVRTC: {e}")))?;
        let device = ctx.device();
        let attr = |a: sys::CUdevice_attribute, what: &str| -> Result<i32> {
            let mut v = 0;
            driver(
                // SAFETY: initialized driver (available() above); valid ordinal
                // (from a live context); valid out pointer.
                unsafe { sys::cuDeviceGetAttribute(&mut v, a, device) },
                || format!("cuDeviceGetAttribute({what}) of device {device}"),
            )?;
            Ok(v)
        };
        use sys::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "major")?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "minor")?;
        let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?.max(1) as u32;
        let shared = {
            type Map = HashMap<(usize, Image), Weak<Shared>>;
            static CONTEXTS: OnceLock<Mutex<Map>> = OnceLock::new();
            let mut map = CONTEXTS.get_or_init(Default::default).lock();
            map.retain(|_, w| w.strong_count() > 0);
            let key = (ctx.raw() as usize, image);
            match map.get(&key).and_then(Weak::upgrade) {
                Some(s) => s,
                None => {
                    let retained = Context::primary(device).map_err(|e| {
                        Error::Unsupported(format!(
                            "device reduction kernels: cannot retain the context of device {device}: {e}"
                        ))
                    })?;
                    if retained.raw() != ctx.raw() {
                        return Err(Error::invalid(format!(
                            "device reduction kernels: the context given is not device {device}'s primary context"
                        )));
                    }
                    let s = Arc::new(Shared {
                        ctx: retained,
                        slots: (0..SLOTS).map(|_| OnceLock::new()).collect(),
                    });
                    map.insert(key, Arc::downgrade(&s));
                    s
                }
            }
        };
        Ok(Kernels {
            ctx: ctx.raw(),
            shared,
            device,
            cc: (major, minor),
            sms,
            share: 1,
            image,
            nvrtc,
        })
    }

    /// These kernels' ranks share their GPU with `ranks - 1` others (ranks as
    /// processes under MPS). The kernels that wait for peers (LL, Simple,
    /// point-to-point) need all their blocks resident at once, and so do the
    /// peers' kernels on the same GPU: each then takes at most its share of
    /// one wave, or the ranks' kernels wait for each other's blocks that never
    /// get an SM. Every rank must pass the same number (grids are sized alike).
    pub fn with_share(mut self, ranks: u32) -> Self {
        self.share = ranks.max(1);
        self
    }

    /// The blocks of one wave of a waiting kernel with `per_sm` resident
    /// blocks per SM, this rank's share of it.
    fn wave(&self, per_sm: u32) -> u64 {
        u64::from(self.sms * per_sm) / u64::from(self.share)
    }

    /// The device ordinal.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The device's compute capability (`major`, `minor`).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// The device's SM count.
    pub fn sms(&self) -> u32 {
        self.sms
    }

    /// The NVRTC in use.
    pub fn nvrtc(&self) -> &'static Nvrtc {
        self.nvrtc
    }

    /// Make this context current on the calling thread when it is not.
    fn bind(&self) -> Result<()> {
        let mut cur: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: initialized driver; valid out pointer.
        let r = unsafe { sys::cuCtxGetCurrent(&mut cur) };
        if r == sys::CUresult::CUDA_SUCCESS && cur == self.ctx {
            return Ok(());
        }
        // SAFETY: the context is alive (retained by `self.shared`).
        driver(unsafe { sys::cuCtxSetCurrent(self.ctx) }, || {
            format!("cuCtxSetCurrent (device {})", self.device)
        })
    }

    /// The loaded kernel for `kind` on `dtype` (compiled and loaded on first
    /// use; the context must be current).
    fn func(&self, dtype: DataType, kind: Kind) -> Result<&Func> {
        let slot = &self.shared.slots[slot(dtype, kind)];
        // The name only where it is needed (loading, errors): not per launch.
        let r = slot.get_or_init(|| {
            let name = kernel_name(dtype, kind);
            let cc = self.cc.0 * 10 + self.cc.1;
            let image = compiled(self.nvrtc, cc, self.image, dtype, kind)?;
            let exchange = ll_name(dtype, kind)
                .zip(ll128_name(dtype, kind))
                .zip(simple_name(dtype, kind));
            let f = load(
                &image,
                &name,
                exchange
                    .as_ref()
                    .map(|((l, l8), sp)| (l.as_str(), l8.as_str(), sp.as_str())),
                p2p_name(dtype, kind).as_deref(),
            )?;
            tracing::debug!(
                kernel = %name,
                image = %f.info.image,
                registers = f.info.registers,
                local_bytes = f.info.local_bytes,
                blocks_per_sm = f.blocks_per_sm,
                "device reduction kernel loaded"
            );
            Ok(f)
        });
        r.as_ref().map_err(|e| {
            Error::Unsupported(format!(
                "device reduction kernel {} ({} {}) unavailable on device {} (sm_{}{}): {e}",
                kernel_name(dtype, kind),
                dtype,
                kind.name(),
                self.device,
                self.cc.0,
                self.cc.1
            ))
        })
    }

    /// Compile and load the kernels `op` on `dtype` needs (its reduction, and
    /// for avg the finish step) now rather than at first use. Makes this
    /// context current on the calling thread.
    pub fn prepare(&self, dtype: DataType, op: RedOp) -> Result<()> {
        self.bind()?;
        self.func(dtype, Kind::of(op))?;
        if op == RedOp::Avg {
            self.func(dtype, Kind::Finish)?;
        }
        Ok(())
    }

    /// Compile (several at once, or from the on-disk cache) and load every kernel
    /// of every type and operator now. A communicator calls it when it opens its
    /// device, before any operation can be in flight: loading a module later waits
    /// for the device's queued work, which may wait for this process (a deadlock
    /// until the timeout). Every kernel is tried; the first failure is returned
    /// (each failed kernel also reports its error when used).
    pub fn prepare_all(&self) -> Result<()> {
        self.bind()?;
        let cc = self.cc.0 * 10 + self.cc.1;
        let kinds = [Kind::Sum, Kind::Prod, Kind::Min, Kind::Max, Kind::Finish];
        let todo: Vec<(DataType, Kind)> = DataType::ALL
            .iter()
            .flat_map(|&d| kinds.iter().map(move |&k| (d, k)))
            .filter(|&(d, k)| self.shared.slots[slot(d, k)].get().is_none())
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8)
            .min(todo.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(d, k)) = todo.get(i) else { break };
                    // Errors are kept in the process-wide cache and reported below.
                    let _ = compiled(self.nvrtc, cc, self.image, d, k);
                });
            }
        });
        let mut first = None;
        for (d, k) in todo {
            if let Err(e) = self.func(d, k) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// What was built for `op`'s reduction kernel on `dtype` (compiling and
    /// loading it if needed; makes this context current).
    pub fn reduce_info(&self, dtype: DataType, op: RedOp) -> Result<KernelInfo> {
        self.bind()?;
        Ok(self.func(dtype, Kind::of(op))?.info.clone())
    }

    /// What was built for the finish kernel on `dtype` (as
    /// [`Kernels::reduce_info`]).
    pub fn finish_info(&self, dtype: DataType) -> Result<KernelInfo> {
        self.bind()?;
        Ok(self.func(dtype, Kind::Finish)?.info.clone())
    }

    /// Blocks for `items` units of work (16-byte vectors or elements) of `f`.
    fn grid(&self, f: &Func, items: usize) -> u32 {
        let wave = self.sms as usize * f.blocks_per_sm as usize;
        items.div_ceil(BLOCK as usize).clamp(1, wave.max(1)) as u32
    }

    fn check_ptrs(&self, what: &str, dtype: DataType, ptrs: &[sys::CUdeviceptr]) -> Result<()> {
        for &p in ptrs {
            if p == 0 {
                return Err(Error::invalid(format!(
                    "{what} on {dtype}: null device pointer"
                )));
            }
            if p & (dtype.size() as u64 - 1) != 0 {
                return Err(Error::invalid(format!(
                    "{what} on {dtype}: device pointer {p:#x} is not aligned to {} bytes",
                    dtype.size()
                )));
            }
        }
        Ok(())
    }

    /// `dst[i] = a[i] op b[i]` for `i < count` (`Avg` reduces like `Sum`),
    /// queued on `stream`. `count == 0` queues nothing. Makes this context
    /// current on the calling thread; the first use of a (type, operator)
    /// compiles its kernel (see [`Kernels::prepare`]).
    ///
    /// # Safety
    /// `dst`, `a` and `b` must be device-accessible memory of this context,
    /// valid for `count` elements of `dtype` until the queued work completes;
    /// `dst` may equal `a` and/or `b` exactly but must not partially overlap
    /// either. `stream` must be a live stream of this context (or null, the
    /// legacy default stream).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        dtype: DataType,
        op: RedOp,
        dst: sys::CUdeviceptr,
        a: sys::CUdeviceptr,
        b: sys::CUdeviceptr,
        count: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        self.check_ptrs("device reduction", dtype, &[dst, a, b])?;
        self.bind()?;
        let f = self.func(dtype, Kind::of(op))?;
        let mis = dst & 15;
        let items = if a & 15 == mis && b & 15 == mis {
            count.saturating_mul(dtype.size()).div_ceil(16)
        } else {
            count
        };
        let grid = self.grid(f, items);
        let (mut d, mut x, mut y, mut n) = (dst, a, b, count as u64);
        let mut params = [
            &mut d as *mut u64 as *mut c_void,
            &mut x as *mut u64 as *mut c_void,
            &mut y as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
        ];
        // SAFETY: a loaded function of this (current) context whose parameters
        // are (T*, const T*, const T*, unsigned long long), each passed by a
        // pointer to an 8-byte value living through the call; the memory and
        // stream contracts are the caller's.
        let r = unsafe { launch(f.func, grid, BLOCK, stream, &mut params) };
        driver(r, || {
            format!(
                "cuLaunchKernel({}, {count} elements, grid {grid}×{BLOCK})",
                f.info.name
            )
        })
    }

    /// The module whose exchange kernel (`what`: LL or Simple) runs a call of
    /// `mode` on `dtype` with `op` (the fold's module, else the sum's: the
    /// other modes only move bytes), after the checks both kernels share;
    /// makes this context current.
    fn exchange_module(
        &self,
        what: &str,
        dtype: DataType,
        op: RedOp,
        rank: i32,
        nranks: i32,
        mode: i32,
    ) -> Result<&Func> {
        if nranks <= 0 || nranks as usize > ll::MAX_RANKS || rank < 0 || rank >= nranks {
            return Err(Error::invalid(format!(
                "{what} kernel: rank {rank} of {nranks} (at most {} ranks)",
                ll::MAX_RANKS
            )));
        }
        // The modes that fold (the Simple kernel's two-shot and direct fold
        // too) need the operator's module.
        let folds = mode == ll::MODE_FOLD
            || mode == simple::MODE_TWO_SHOT
            || mode == simple::MODE_DIRECT_FOLD;
        if op == RedOp::Avg && folds {
            return Err(Error::invalid(format!(
                "{what} kernel: avg folds as sum, then divides: not here"
            )));
        }
        self.bind()?;
        let kind = if folds { Kind::of(op) } else { Kind::Sum };
        self.func(dtype, kind)
    }

    /// Queue the LL exchange kernel ([`ll`]) on `stream`: a whole small
    /// collective, `args` saying which. `dtype` and `op` pick the fold
    /// ([`ll::MODE_FOLD`]; `Avg` is not an LL operator: its division is a
    /// separate step); the other modes only move bytes (any type). Makes this
    /// context current on the calling thread.
    ///
    /// # Safety
    /// Every address in `args` is device-accessible memory of this context
    /// (the regions and notes as mapped here), valid for what the mode reads
    /// and writes until the kernel ends; every rank of the call launches it
    /// with the same `nranks`, `mode`, `root`, `seg` and `area`, in the same
    /// order as its other LL calls on these regions; `stream` is a live
    /// stream of this context (or null).
    pub unsafe fn ll(
        &self,
        dtype: DataType,
        op: RedOp,
        args: &ll::LlArgs,
        stream: sys::CUstream,
    ) -> Result<()> {
        if args.area < args.lines() * ll::LINE as u64 {
            return Err(Error::invalid(format!(
                "LL kernel: {} bytes per segment do not fit an area of {} bytes",
                args.seg, args.area
            )));
        }
        let f = self.exchange_module("LL", dtype, op, args.rank, args.nranks, args.mode)?;
        f.has(f.ll, "LL kernel")?;
        // SAFETY: the module's LL kernel, one thread per line; the caller's contract.
        unsafe {
            self.launch_lines(
                "LL",
                f,
                f.ll,
                f.ll_blocks_per_sm,
                args.lines(),
                args,
                stream,
            )
        }
    }

    /// Launch `func`, `f`'s LL or LL128 kernel (`what`), with `threads`
    /// threads (at most one wave of blocks) and `args` as its one parameter.
    ///
    /// # Safety
    /// `func` is `f`'s kernel taking `fx_ll_args` and `per_sm` its resident
    /// blocks per SM; the contracts of [`ll`](Self::ll) are the caller's.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_lines(
        &self,
        what: &str,
        f: &Func,
        func: sys::CUfunction,
        per_sm: u32,
        threads: u64,
        args: &ll::LlArgs,
        stream: sys::CUstream,
    ) -> Result<()> {
        let wave = self.wave(per_sm).max(1);
        let grid = threads.div_ceil(u64::from(BLOCK)).clamp(1, wave) as u32;
        let mut a = *args;
        let mut params = a.params();
        // SAFETY: the module's kernel `func`, of this (current) context, whose
        // one parameter is `fx_ll_args`, laid out as `LlArgs` (#[repr(C)]),
        // passed by a pointer to a copy living through the call; at most one
        // wave of blocks; the memory and stream contracts are the caller's.
        let r = unsafe { launch(func, grid, BLOCK, stream, &mut params) };
        driver(r, || {
            format!(
                "cuLaunchKernel({what} kernel of {}, {} bytes per segment, grid {grid}×{BLOCK})",
                f.info.name, args.seg
            )
        })
    }

    /// Queue the LL128 exchange kernel ([`ll128`]) on `stream`: the LL
    /// kernel's call (the same `args`, with this kernel's region and areas)
    /// in 128-byte lines. Only for ranks on distinct GPUs joined by NVLink
    /// (the module's doc says why); the caller decides that.
    ///
    /// # Safety
    /// As [`ll`](Self::ll), with the LL128 regions for the LL regions: every
    /// region and area 128-byte aligned, every rank of the call launching it
    /// with the same `nranks`, `mode`, `root`, `seg` and `area`, in the same
    /// order as its other LL and LL128 calls on these control words.
    pub unsafe fn ll128(
        &self,
        dtype: DataType,
        op: RedOp,
        args: &ll::LlArgs,
        stream: sys::CUstream,
    ) -> Result<()> {
        let seg = usize::try_from(args.seg).unwrap_or(usize::MAX);
        if args.area < ll128::area_bytes(seg) as u64
            || !args.area.is_multiple_of(ll128::LINE as u64)
            || !args.region_off.is_multiple_of(ll128::LINE as u64)
        {
            return Err(Error::invalid(format!(
                "LL128 kernel: {} bytes per segment do not fit an area of {} bytes at offset {} (128-byte lines)",
                args.seg, args.area, args.region_off
            )));
        }
        let f = self.exchange_module("LL128", dtype, op, args.rank, args.nranks, args.mode)?;
        f.has(f.ll128, "LL128 kernel")?;
        let threads = ll128::threads(seg) as u64;
        // SAFETY: the module's LL128 kernel, 8 threads per line; the caller's contract.
        unsafe {
            self.launch_lines(
                "LL128",
                f,
                f.ll128,
                f.ll128_blocks_per_sm,
                threads,
                args,
                stream,
            )
        }
    }

    /// Queue the Simple exchange kernel ([`simple`]) on `stream`: a whole
    /// mid-size collective in chunks through the slot rings, `args` saying
    /// which (the modes, types and operators of [`ll`](Self::ll)). Its grid
    /// is a sending and a receiving block per chunk, at most `blocks` of
    /// each (0: [`simple::TARGET_BLOCKS`]) and one wave. Makes this context
    /// current on the calling thread.
    ///
    /// # Safety
    /// As [`ll`](Self::ll), with the Simple regions (of `slot` bytes per slot
    /// on every rank) for the LL regions: every rank of the call launches it
    /// with the same `nranks`, `mode`, `root`, `seg`, `chunk` and `slot`, in
    /// the same order as its other Simple calls on these regions.
    pub unsafe fn simple(
        &self,
        dtype: DataType,
        op: RedOp,
        args: &simple::SimpleArgs,
        blocks: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        if args.seg == 0
            || args.chunk == 0
            || !args.chunk.is_multiple_of(16)
            || !args.slot.is_multiple_of(16)
        {
            return Err(Error::invalid(format!(
                "Simple kernel: segment {}, chunk {} and slot {} bytes (chunks and slots are multiples of 16)",
                args.seg, args.chunk, args.slot
            )));
        }
        if args.chunk > args.slot {
            return Err(Error::invalid(format!(
                "Simple kernel: chunks of {} bytes do not fit slots of {}",
                args.chunk, args.slot
            )));
        }
        let f = self.exchange_module("Simple", dtype, op, args.rank, args.nranks, args.mode)?;
        f.has(f.simple, "Simple kernel")?;
        let grid = self.ring_grid("Simple", f, f.simple_blocks_per_sm, args.items(), blocks)?;
        let mut a = *args;
        let mut params = a.params();
        // SAFETY: the module's Simple kernel, of this (current) context, whose
        // one parameter is `fx_sp_args`, laid out as `SimpleArgs` (#[repr(C)]),
        // passed by a pointer to a copy living through the call; at most one
        // wave of blocks; the memory and stream contracts are the caller's.
        let r = unsafe { launch(f.simple, grid, BLOCK, stream, &mut params) };
        driver(r, || {
            format!(
                "cuLaunchKernel(Simple kernel of {}, {} bytes per segment, grid {grid}×{BLOCK})",
                f.info.name, args.seg
            )
        })
    }

    /// The grid of a ring kernel (Simple, point-to-point): a sending and a
    /// receiving block per chunk of its longest segment, at most `blocks` of
    /// each (0: [`simple::TARGET_BLOCKS`]), all resident at once (this rank's
    /// share of one wave of `per_sm` blocks per SM).
    fn ring_grid(
        &self,
        what: &str,
        f: &Func,
        per_sm: u32,
        chunks: u64,
        blocks: usize,
    ) -> Result<u32> {
        let wave = self.wave(per_sm);
        if wave < 2 {
            return Err(Error::Unsupported(format!(
                "{}: the {what} kernel needs two resident blocks ({wave} fit, {} ranks sharing the GPU)",
                f.info.name, self.share
            )));
        }
        let most = if blocks == 0 {
            simple::TARGET_BLOCKS
        } else {
            blocks
        };
        Ok((2 * chunks.clamp(1, (most as u64).min(wave / 2))) as u32)
    }

    /// Queue the point-to-point kernel ([`p2p`]) on `stream`: this rank's
    /// sends and receives of one group, at most one each way per peer, `args`
    /// saying which. Its grid is a sending and a receiving block per chunk (or
    /// per [`BLOCK`] LL lines) of the longest message, at most `blocks` of each (0:
    /// [`simple::TARGET_BLOCKS`]) and one wave. Makes this context current on
    /// the calling thread.
    ///
    /// # Safety
    /// Every address in `args` is device-accessible memory of this context
    /// (the regions as mapped here, the user's buffers for the bytes each
    /// side names), valid until the kernel ends; the peers launch their
    /// matching messages with the same byte counts, slot, LL limit and line
    /// rings, in the same order per pair as their other point-to-point
    /// kernels on these regions;
    /// `stream` is a live stream of this context (or null).
    pub unsafe fn p2p(
        &self,
        args: &p2p::P2pArgs,
        blocks: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        if args.slot <= p2p::HEADER as u64 || !args.slot.is_multiple_of(16) {
            return Err(Error::invalid(format!(
                "point-to-point kernel: slots of {} bytes (a multiple of 16, above the {}-byte header)",
                args.slot,
                p2p::HEADER
            )));
        }
        let n = args.nranks;
        if n <= 0 || n as usize > ll::MAX_RANKS || args.rank < 0 || args.rank >= n {
            return Err(Error::invalid(format!(
                "point-to-point kernel: rank {} of {n} (at most {} ranks)",
                args.rank,
                ll::MAX_RANKS
            )));
        }
        let me = args.rank as usize;
        for (what, sides) in [("send", &args.send), ("recv", &args.recv)] {
            for (r, s) in sides.iter().enumerate() {
                let chunks_ok = s.chunk != 0
                    && s.chunk.is_multiple_of(16)
                    && s.chunk + p2p::HEADER as u64 <= args.slot
                    && s.chunks == simple::chunks(s.bytes as usize, s.chunk as usize) as u64
                    // A chunk's index shares its header word with a count.
                    && s.chunks <= u64::from(u32::MAX);
                // Lines: never to itself, never more than a ring holds.
                // The header line holds the size in 32 bits.
                let lines_ok = r != me
                    && s.chunks == 0
                    && s.bytes <= u64::from(u32::MAX)
                    && s.lines <= args.ll_lines
                    && usize::try_from(s.bytes)
                        .is_ok_and(|b| s.lines == p2p::message_lines(b) as u64);
                let bad = if r >= n as usize {
                    s.is_some()
                } else {
                    (s.chunks != 0 && !chunks_ok)
                        || (s.lines != 0 && !lines_ok)
                        || (s.is_some() && s.bytes > 0 && s.ptr == 0)
                };
                if bad {
                    return Err(Error::invalid(format!(
                        "point-to-point kernel: the {what} side of rank {r} is inconsistent ({s:?}, rank {} of {n}, slot {}, rings of {} lines)",
                        args.rank, args.slot, args.ll_lines
                    )));
                }
            }
        }
        // The rank's own block: a send to itself exactly where a receive from
        // itself of as many bytes is (the kernel copies one into the other).
        let (to_me, from_me) = (args.send[me], args.recv[me]);
        if (to_me.chunks != 0) != (from_me.chunks != 0)
            || (to_me.chunks != 0 && (to_me.bytes != from_me.bytes || to_me.chunk != from_me.chunk))
        {
            return Err(Error::invalid(format!(
                "point-to-point kernel: rank {me}'s send to itself ({to_me:?}) does not meet its receive from itself ({from_me:?})"
            )));
        }
        self.bind()?;
        let f = self.func(DataType::U8, Kind::Sum)?;
        f.has(f.p2p, "point-to-point kernel")?;
        let grid = self.ring_grid(
            "point-to-point",
            f,
            f.p2p_blocks_per_sm,
            args.most_blocks(BLOCK as u64),
            blocks,
        )?;
        let mut a = *args;
        let mut params = a.params();
        // SAFETY: the module's point-to-point kernel, of this (current)
        // context, whose one parameter is `fx_p2p_args`, laid out as `P2pArgs`
        // (#[repr(C)]), passed by a pointer to a copy living through the call;
        // at most one wave of blocks; the memory and stream contracts are the
        // caller's.
        let r = unsafe { launch(f.p2p, grid, BLOCK, stream, &mut params) };
        driver(r, || {
            format!(
                "cuLaunchKernel(point-to-point kernel, {} blocks' work at most, grid {grid}×{BLOCK})",
                args.most_blocks(BLOCK as u64)
            )
        })
    }

    /// Queue the graph barrier wait ([`graph_wait`]) on `stream`: one warp
    /// polling `args.n` flag words until each holds `args.value`, at most
    /// `args.timeout_ns`. Makes this context current on the calling thread.
    ///
    /// # Safety
    /// `args.ctl` is this rank's LL control words and every `args.addr[..n]`
    /// a 4-byte word, all device memory of this context valid until the
    /// kernel ends; `stream` is a live stream of this context (or null).
    pub unsafe fn graph_wait(
        &self,
        args: &graph_wait::GraphWaitArgs,
        stream: sys::CUstream,
    ) -> Result<()> {
        if args.n as usize > ll::MAX_RANKS {
            return Err(Error::invalid(format!(
                "graph barrier wait: {} words, at most {}",
                args.n,
                ll::MAX_RANKS
            )));
        }
        self.bind()?;
        let f = self.func(DataType::U8, Kind::Sum)?;
        f.has(f.graph_wait, "graph barrier wait")?;
        let mut a = *args;
        let mut params = a.params();
        // SAFETY: the module's graph wait kernel, of this (current) context,
        // whose one parameter is `fx_gw_args`, laid out as `GraphWaitArgs`
        // (#[repr(C)]), passed by a pointer to a copy living through the call;
        // the memory and stream contracts are the caller's.
        let r = unsafe { launch(f.graph_wait, 1, graph_wait::THREADS, stream, &mut params) };
        driver(r, || {
            format!("cuLaunchKernel(graph barrier wait, {} words)", args.n)
        })
    }

    /// The operator's last step on fully reduced elements, queued on
    /// `stream`: for `Avg`, `dst[i] /= nranks` exactly as
    /// the core's `reduce::finish` does; nothing for the other operators, for
    /// `count == 0`, or for `nranks <= 1`.
    ///
    /// # Safety
    /// `dst` must be device-accessible memory of this context, valid for
    /// `count` elements of `dtype` until the queued work completes; `stream`
    /// a live stream of this context (or null).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn finish(
        &self,
        dtype: DataType,
        op: RedOp,
        dst: sys::CUdeviceptr,
        count: usize,
        nranks: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        if op != RedOp::Avg || count == 0 || nranks <= 1 {
            return Ok(());
        }
        self.check_ptrs("device avg division", dtype, &[dst])?;
        self.bind()?;
        let f = self.func(dtype, Kind::Finish)?;
        let grid = self.grid(f, count.saturating_mul(dtype.size()).div_ceil(16));
        // The divisors as the core's reduce::finish computes them.
        let mut si: i64 = i64::try_from(nranks).unwrap_or(i64::MAX);
        let mut ui: u64 = u64::try_from(nranks).unwrap_or(u64::MAX);
        let mut fl: f32 = nranks as f32;
        let mut db: f64 = nranks as f64;
        let (mut d, mut n) = (dst, count as u64);
        let mut params = [
            &mut d as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
            &mut si as *mut i64 as *mut c_void,
            &mut ui as *mut u64 as *mut c_void,
            &mut fl as *mut f32 as *mut c_void,
            &mut db as *mut f64 as *mut c_void,
        ];
        // SAFETY: a loaded function of this (current) context whose parameters
        // are (T*, unsigned long long, long long, unsigned long long, float,
        // double), each passed by a pointer to a value of that type living
        // through the call; the memory and stream contracts are the caller's.
        let r = unsafe { launch(f.func, grid, BLOCK, stream, &mut params) };
        driver(r, || {
            format!(
                "cuLaunchKernel({}, {count} elements / {nranks}, grid {grid}×{BLOCK})",
                f.info.name
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel of a module (reductions, LL, Simple with its direct
    /// modes, point-to-point) compiles for an H100 (`sm_90`) where NVRTC
    /// loads: a machine without a GPU still finds the CUDA C's mistakes.
    #[test]
    fn module_sources_compile_where_nvrtc_loads() {
        let nvrtc = match Nvrtc::get() {
            Ok(n) => n,
            Err(why) => {
                println!("skipping: {why}");
                return;
            }
        };
        // u8 sum's module also holds the point-to-point kernel.
        for (dtype, kind) in [
            (DataType::F32, Kind::Sum),
            (DataType::Bf16, Kind::Max),
            (DataType::U8, Kind::Sum),
        ] {
            let src = source(dtype, kind);
            let file = format!("{}.cu", kernel_name(dtype, kind));
            if let Err(e) = compile_uncached(nvrtc, 90, Image::Auto, &src, &file) {
                panic!("{file}: {e}");
            }
        }
    }
}
