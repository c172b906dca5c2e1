//! Element types and reduction operators of the collectives.

use crate::error::{Invalid, Result};
use std::fmt;

/// Element type of a collective's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DataType {
    /// `i8`
    I8 = 0,
    /// `u8`
    U8 = 1,
    /// `i32`
    I32 = 2,
    /// `u32`
    U32 = 3,
    /// `i64`
    I64 = 4,
    /// `u64`
    U64 = 5,
    /// IEEE 754 binary16 ([`F16`]).
    F16 = 6,
    /// bfloat16 ([`Bf16`]).
    Bf16 = 7,
    /// `f32`
    F32 = 8,
    /// `f64`
    F64 = 9,
    /// OCP FP8 e4m3 ([`F8E4M3`]; NCCL's `ncclFloat8e4m3`).
    F8E4M3 = 10,
    /// OCP FP8 e5m2 ([`F8E5M2`]; NCCL's `ncclFloat8e5m2`).
    F8E5M2 = 11,
}

impl DataType {
    /// Every type, in code order.
    pub const ALL: [DataType; 12] = [
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::Bf16,
        DataType::F32,
        DataType::F64,
        DataType::F8E4M3,
        DataType::F8E5M2,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16
                | DataType::Bf16
                | DataType::F32
                | DataType::F64
                | DataType::F8E4M3
                | DataType::F8E5M2
        )
    }

    /// Name as nccl-tests prints it (`int8`, `float`, `bfloat16`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::I32 => "int32",
            DataType::U32 => "uint32",
            DataType::I64 => "int64",
            DataType::U64 => "uint64",
            DataType::F16 => "half",
            DataType::Bf16 => "bfloat16",
            DataType::F32 => "float",
            DataType::F64 => "double",
            DataType::F8E4M3 => "f8e4m3",
            DataType::F8E5M2 => "f8e5m2",
        }
    }

    /// Parse a name: nccl-tests names (`float`, `half`, `bfloat16`, `int32`…)
    /// or Rust names (`f32`, `f16`, `bf16`, `i32`…).
    pub fn parse(s: &str) -> Result<Self> {
        let t = match s {
            "int8" | "i8" | "char" => DataType::I8,
            "uint8" | "u8" => DataType::U8,
            "int32" | "i32" | "int" => DataType::I32,
            "uint32" | "u32" => DataType::U32,
            "int64" | "i64" => DataType::I64,
            "uint64" | "u64" => DataType::U64,
            "half" | "f16" | "float16" => DataType::F16,
            "bfloat16" | "bf16" => DataType::Bf16,
            "float" | "f32" | "float32" => DataType::F32,
            "double" | "f64" | "float64" => DataType::F64,
            "f8e4m3" | "float8e4m3" | "fp8e4m3" | "e4m3" => DataType::F8E4M3,
            "f8e5m2" | "float8e5m2" | "fp8e5m2" | "e5m2" => DataType::F8E5M2,
            _ => {
                return Err(Invalid(format!(
                    "unknown data type '{s}' (known: {})",
                    Self::ALL.map(|t| t.name()).join(", ")
                )))
            }
        };
        Ok(t)
    }

    /// From the numeric code (C API).
    #[inline]
    pub fn from_code(code: u32) -> Result<Self> {
        Self::ALL
            .get(code as usize)
            .copied()
            .ok_or_else(|| Invalid(format!("unknown data type code {code} (0..=11)")))
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RedOp {
    /// Sum (integers wrap).
    Sum = 0,
    /// Product (integers wrap).
    Prod = 1,
    /// Minimum (floats: NaN handling is unspecified, as in NCCL).
    Min = 2,
    /// Maximum.
    Max = 3,
    /// Average as NCCL defines it: the sum divided by the number of ranks
    /// (integer types: integer division of the wrapped sum, truncating).
    Avg = 4,
}

impl RedOp {
    /// Every operator, in code order.
    pub const ALL: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max, RedOp::Avg];

    /// Name as nccl-tests prints it.
    pub const fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::Avg => "avg",
        }
    }

    /// Parse `sum`, `prod`, `min`, `max`, `avg`.
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                Invalid(format!(
                    "unknown reduction operator '{s}' (known: sum, prod, min, max, avg)"
                ))
            })
    }

    /// From the numeric code (C API).
    #[inline]
    pub fn from_code(code: u32) -> Result<Self> {
        Self::ALL
            .get(code as usize)
            .copied()
            .ok_or_else(|| Invalid(format!("unknown reduction operator code {code} (0..=4)")))
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// IEEE 754 half precision, stored as its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(transparent)]
pub struct F16(pub u16);

/// bfloat16 (the top 16 bits of an `f32`), stored as its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Round to nearest even from `f32` (NaN stays NaN).
    pub fn from_f32(x: f32) -> Self {
        Bf16(crate::half::f32_to_bf16(x))
    }
    /// Exact widening to `f32`.
    pub fn to_f32(self) -> f32 {
        crate::half::bf16_to_f32(self.0)
    }
}

impl F16 {
    /// Round to nearest even from `f32` (overflow → ±inf, NaN stays NaN).
    pub fn from_f32(x: f32) -> Self {
        F16(crate::half::f32_to_f16(x))
    }
    /// Exact widening to `f32`.
    pub fn to_f32(self) -> f32 {
        crate::half::f16_to_f32(self.0)
    }
}

/// OCP FP8 e4m3 (largest 448, no infinities), stored as its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

/// OCP FP8 e5m2 (largest 57344), stored as its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

impl F8E4M3 {
    /// Round to nearest even from `f32`, saturating to ±448 (NaN stays NaN).
    pub fn from_f32(x: f32) -> Self {
        F8E4M3(crate::fp8::f32_to_f8e4m3(x))
    }
    /// Exact widening to `f32`.
    pub fn to_f32(self) -> f32 {
        crate::fp8::f8e4m3_to_f32(self.0)
    }
}

impl F8E5M2 {
    /// Round to nearest even from `f32`, saturating to ±57344 (NaN stays NaN).
    pub fn from_f32(x: f32) -> Self {
        F8E5M2(crate::fp8::f32_to_f8e5m2(x))
    }
    /// Exact widening to `f32`.
    pub fn to_f32(self) -> f32 {
        crate::fp8::f8e5m2_to_f32(self.0)
    }
}

/// A Rust type usable as a collective element.
///
/// # Safety
/// `Self` must have the size and layout of `DTYPE` and every bit pattern must be valid.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The matching [`DataType`].
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        // SAFETY: plain numeric types of the stated size; every bit pattern is valid.
        unsafe impl Element for $t { const DTYPE: DataType = DataType::$d; }
    )*};
}
element!(i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64,
         F16 => F16, Bf16 => Bf16, f32 => F32, f64 => F64,
         F8E4M3 => F8E4M3, F8E5M2 => F8E5M2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(DataType::F16.size(), std::mem::size_of::<F16>());
        assert_eq!(DataType::Bf16.size(), std::mem::size_of::<Bf16>());
        assert_eq!(<f64 as Element>::DTYPE.size(), 8);
        for (i, t) in DataType::ALL.iter().enumerate() {
            assert_eq!(DataType::from_code(i as u32).unwrap(), *t);
            assert_eq!(DataType::parse(t.name()).unwrap(), *t);
        }
        assert!(DataType::from_code(12).is_err());
        assert!(RedOp::parse("xor").unwrap_err().to_string().contains("xor"));
    }
}
