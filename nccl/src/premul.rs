//! `ncclRedOpCreatePreMulSum`'s operators (the entry points are in `redop.rs`):
//! each rank's input multiplied by a scalar, then summed. On host buffers the input is scaled into a copy
//! and summed; on device buffers ferrocx has no scaling kernel yet, so such
//! calls return ncclInvalidUsage (docs/NCCL.md).

use crate::codes::{self, Type};
use ferrocx::{Bf16, DataType, Error, Result, F16, F8E4M3, F8E5M2};
use std::ffi::c_void;
use std::sync::Mutex;

/// Where the scalar is.
#[derive(Debug, Clone, Copy)]
enum Scalar {
    /// `ncclScalarHostImmediate`: its bytes, read at creation.
    Value([u8; 8]),
    /// `ncclScalarDevice`: an address read at each call (host-visible memory only).
    At(usize),
}

/// One operator of a communicator.
#[derive(Debug, Clone, Copy)]
pub struct PreMul {
    /// NCCL's type code the operator was made for.
    dtype: i32,
    scalar: Scalar,
}

fn mul<const N: usize>(src: &[u8], s: [u8; N], f: impl Fn([u8; N], [u8; N]) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    for c in src.chunks_exact(N) {
        out.extend_from_slice(&f(c.try_into().expect("chunk of N"), s));
    }
    out
}

/// `src` (elements of `t`) times the scalar `s` (bytes of one element), as
/// NCCL's pre-multiplication: integers wrap, 16- and 8-bit floats compute in f32
/// (fp8 saturating).
pub fn scale(t: DataType, src: &[u8], s: [u8; 8]) -> Vec<u8> {
    macro_rules! int {
        ($ty:ty, $n:literal) => {
            mul::<$n>(src, s[..$n].try_into().expect("n bytes"), |a, b| {
                <$ty>::from_le_bytes(a)
                    .wrapping_mul(<$ty>::from_le_bytes(b))
                    .to_le_bytes()
            })
        };
    }
    match t {
        DataType::I8 => int!(i8, 1),
        DataType::U8 => int!(u8, 1),
        DataType::I32 => int!(i32, 4),
        DataType::U32 => int!(u32, 4),
        DataType::I64 => int!(i64, 8),
        DataType::U64 => int!(u64, 8),
        DataType::F32 => mul::<4>(src, s[..4].try_into().expect("4"), |a, b| {
            (f32::from_le_bytes(a) * f32::from_le_bytes(b)).to_le_bytes()
        }),
        DataType::F64 => mul::<8>(src, s, |a, b| {
            (f64::from_le_bytes(a) * f64::from_le_bytes(b)).to_le_bytes()
        }),
        DataType::F16 => mul::<2>(src, s[..2].try_into().expect("2"), |a, b| {
            let x = F16(u16::from_le_bytes(a)).to_f32() * F16(u16::from_le_bytes(b)).to_f32();
            F16::from_f32(x).0.to_le_bytes()
        }),
        DataType::Bf16 => mul::<2>(src, s[..2].try_into().expect("2"), |a, b| {
            let x = Bf16(u16::from_le_bytes(a)).to_f32() * Bf16(u16::from_le_bytes(b)).to_f32();
            Bf16::from_f32(x).0.to_le_bytes()
        }),
        DataType::F8E4M3 => mul::<1>(src, [s[0]], |a, b| {
            [F8E4M3::from_f32(F8E4M3(a[0]).to_f32() * F8E4M3(b[0]).to_f32()).0]
        }),
        DataType::F8E5M2 => mul::<1>(src, [s[0]], |a, b| {
            [F8E5M2::from_f32(F8E5M2(a[0]).to_f32() * F8E5M2(b[0]).to_f32()).0]
        }),
    }
}

impl PreMul {
    /// The scaled copy of `src` (host memory) for a call of type `t` (NCCL code `raw`).
    pub fn apply(&self, raw: i32, t: &Type, src: &[u8]) -> Result<Vec<u8>> {
        if raw != self.dtype {
            return Err(Error::InvalidArgument(format!(
                "the operator was made for {} but the call is on {}",
                codes::dtype(self.dtype).map_or("?", |t| t.name),
                t.name
            )));
        }
        let s = match self.scalar {
            Scalar::Value(v) => v,
            Scalar::At(p) => read_scalar(p, t.size)?,
        };
        Ok(scale(t.fx, src, s))
    }
}

/// The scalar at `p` (`size` bytes) now; host-visible memory only.
fn read_scalar(p: usize, size: usize) -> Result<[u8; 8]> {
    if ferrocx_sdk::cuda::device_of(p).is_some() {
        return Err(Error::Unsupported(
            "a pre-multiplication scalar in device memory (ncclScalarDevice) is not supported by ferrocx: pass ncclScalarHostImmediate".into(),
        ));
    }
    let mut v = [0u8; 8];
    // SAFETY: the C caller's contract: `p` holds one element of the operator's type.
    v[..size].copy_from_slice(unsafe { std::slice::from_raw_parts(p as *const u8, size) });
    Ok(v)
}

impl PreMul {
    /// An operator for NCCL type `datatype` whose scalar is at `scalar`, resident
    /// as `residence` says (`ncclScalarDevice` 0, `ncclScalarHostImmediate` 1).
    pub fn new(scalar: *mut c_void, datatype: i32, residence: i32) -> Result<PreMul> {
        let t = codes::dtype(datatype).map_err(Error::InvalidArgument)?;
        if scalar.is_null() {
            return Err(Error::InvalidArgument("scalar is NULL".into()));
        }
        let scalar = match residence {
            1 => Scalar::Value(read_scalar(scalar as usize, t.size)?),
            0 => Scalar::At(scalar as usize),
            r => {
                return Err(Error::InvalidArgument(format!(
                    "residence {r} (ncclScalarDevice 0, ncclScalarHostImmediate 1)"
                )))
            }
        };
        Ok(PreMul {
            dtype: datatype,
            scalar,
        })
    }
}

/// A communicator's operators (number = ncclNumOps + index; freed slots are reused).
#[derive(Default)]
pub struct Ops(Mutex<Vec<Option<PreMul>>>);

impl Ops {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Option<PreMul>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `p`; its operator number.
    pub fn add(&self, p: PreMul) -> i32 {
        let mut ops = self.slots();
        let i = match ops.iter().position(Option::is_none) {
            Some(i) => {
                ops[i] = Some(p);
                i
            }
            None => {
                ops.push(Some(p));
                ops.len() - 1
            }
        };
        codes::NUM_OPS + i as i32
    }

    /// Forget operator `op`.
    pub fn remove(&self, op: i32) -> Result<()> {
        let mut ops = self.slots();
        let slot = usize::try_from(op - codes::NUM_OPS)
            .ok()
            .and_then(|i| ops.get_mut(i))
            .filter(|s| s.is_some())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "operator {op} was not made by ncclRedOpCreatePreMulSum on this communicator"
                ))
            })?;
        *slot = None;
        Ok(())
    }

    /// The operator of index `i` (op − ncclNumOps).
    pub fn get(&self, i: usize) -> Result<PreMul> {
        self.slots().get(i).copied().flatten().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "reduction operator {} was not made on this communicator (or was destroyed)",
                i as i32 + codes::NUM_OPS
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_follows_each_type() {
        let s = |v: &[u8]| {
            let mut a = [0u8; 8];
            a[..v.len()].copy_from_slice(v);
            a
        };
        let f: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let got = scale(DataType::F32, &f, s(&0.5f32.to_le_bytes()));
        assert_eq!(
            got,
            [0.75f32, -1.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>()
        );
        let i: Vec<u8> = [200u8, 3].to_vec();
        assert_eq!(scale(DataType::U8, &i, s(&[2])), vec![144, 6]); // 400 wraps to 144
        let h: Vec<u8> = F16::from_f32(3.0).0.to_le_bytes().to_vec();
        let got = scale(DataType::F16, &h, s(&F16::from_f32(0.25).0.to_le_bytes()));
        assert_eq!(F16(u16::from_le_bytes([got[0], got[1]])).to_f32(), 0.75);
        let d: Vec<u8> = 10i64.to_le_bytes().to_vec();
        assert_eq!(
            scale(DataType::I64, &d, (-3i64).to_le_bytes()),
            (-30i64).to_le_bytes()
        );
    }
}
