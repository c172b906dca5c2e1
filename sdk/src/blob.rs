//! Blobs and the [`Shareable`] marker: what may cross a process boundary.

use crate::abi::{FxBlob, FX_BLOB_BYTES};
use crate::error::PluginError;

/// A plain-old-data value whose bytes mean the same thing in any process.
///
/// # Safety
/// The type must be `repr(C)` or a primitive, have no padding, no pointers,
/// references, handles or file descriptors, and every bit pattern must be a
/// valid value. Implement it with [`shareable!`](crate::shareable), which
/// checks field types and padding at compile time, rather than by hand.
pub unsafe trait Shareable: Copy + 'static {}

macro_rules! shareable_prims {
    ($($t:ty),*) => { $(
        // SAFETY: primitive integers have no padding and every bit pattern is valid.
        unsafe impl Shareable for $t {}
    )* };
}
shareable_prims!(u8, u16, u32, u64, i8, i16, i32, i64, u128, i128);
// SAFETY: an array of Shareable values has no padding between elements.
unsafe impl<T: Shareable, const N: usize> Shareable for [T; N] {}

/// Define a `repr(C)` struct that may travel in a blob.
///
/// Every field must itself be [`Shareable`] (so a pointer, `File` or CUDA
/// stream is refused by the compiler) and the struct must have no padding.
///
/// ```
/// ferrocx_sdk::shareable! {
///     /// What the receiver tells the sender.
///     pub struct RingInfo {
///         pub pid: u32,
///         pub slots: u32,
///         pub name: [u8; 48],
///     }
/// }
/// let mut blob = ferrocx_sdk::Blob::new();
/// blob.write(&RingInfo { pid: 7, slots: 8, name: [0; 48] }).unwrap();
/// let back: RingInfo = blob.read().unwrap();
/// assert_eq!(back.pid, 7);
/// ```
#[macro_export]
macro_rules! shareable {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($(#[$fm:meta])* $fvis:vis $field:ident : $fty:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis struct $name { $($(#[$fm])* $fvis $field: $fty),* }
        // SAFETY: every field is Shareable (checked below) and the size equals
        // the sum of the field sizes, so there is no padding.
        unsafe impl $crate::Shareable for $name {}
        const _: () = {
            const fn must_be_shareable<T: $crate::Shareable>() {}
            $( must_be_shareable::<$fty>(); )*
            assert!(
                ::std::mem::size_of::<$name>() == 0 $(+ ::std::mem::size_of::<$fty>())*,
                "shareable struct has padding: reorder fields or add explicit reserved fields"
            );
        };
    };
}

/// Alias used by Rust plugins.
pub type Blob = FxBlob;

impl FxBlob {
    /// An empty blob.
    pub fn new() -> Self {
        FxBlob {
            len: 0,
            reserved: 0,
            bytes: [0; FX_BLOB_BYTES],
        }
    }

    /// The meaningful bytes (clamped to the capacity, so a corrupt `len` is harmless).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..(self.len as usize).min(FX_BLOB_BYTES)]
    }

    /// Replace the contents with raw bytes.
    pub fn set_bytes(&mut self, data: &[u8]) -> Result<(), PluginError> {
        if data.len() > FX_BLOB_BYTES {
            return Err(PluginError::invalid(format!(
                "blob payload of {} bytes exceeds the {FX_BLOB_BYTES}-byte blob",
                data.len()
            )));
        }
        self.bytes[..data.len()].copy_from_slice(data);
        self.bytes[data.len()..].fill(0);
        self.len = data.len() as u32;
        Ok(())
    }

    /// Store a [`Shareable`] value.
    pub fn write<T: Shareable>(&mut self, value: &T) -> Result<(), PluginError> {
        let size = std::mem::size_of::<T>();
        // SAFETY: T is Shareable: no padding, so all `size` bytes are initialized.
        let bytes = unsafe { std::slice::from_raw_parts(value as *const T as *const u8, size) };
        self.set_bytes(bytes)
    }

    /// Read back a [`Shareable`] value; fails when the length does not match.
    pub fn read<T: Shareable>(&self) -> Result<T, PluginError> {
        let size = std::mem::size_of::<T>();
        if self.len as usize != size {
            return Err(PluginError::invalid(format!(
                "peer blob holds {} bytes, expected {size} (mismatched plugin versions?)",
                self.len
            )));
        }
        // SAFETY: T is Shareable, so any bit pattern of the right size is a valid T;
        // read_unaligned because the byte array has alignment 1.
        Ok(unsafe { std::ptr::read_unaligned(self.bytes.as_ptr() as *const T) })
    }
}

impl Default for FxBlob {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FxBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FxBlob({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::shareable! {
        struct Pair { a: u32, b: u32, tag: [u8; 8] }
    }

    #[test]
    fn round_trip_and_length_check() {
        let mut blob = Blob::new();
        blob.write(&Pair {
            a: 1,
            b: u32::MAX,
            tag: *b"abcdefgh",
        })
        .unwrap();
        assert_eq!(blob.len, 16);
        let p: Pair = blob.read().unwrap();
        assert_eq!((p.a, p.b, &p.tag), (1, u32::MAX, b"abcdefgh"));
        let err = blob.read::<u64>().unwrap_err();
        assert!(
            err.message().contains("holds 16 bytes, expected 8"),
            "{err}"
        );
        assert!(blob.set_bytes(&[0u8; FX_BLOB_BYTES + 1]).is_err());
    }
}
