//! Copies of a message's bytes. Most messages of a latency-bound loop are a
//! few bytes, and a call to the C library's `memmove` for them costs more
//! than the copy (its entry, size dispatch and return: about 20
//! instructions per copy, three copies per 8-byte broadcast between 2
//! ranks); up to 16 bytes are copied inline.

use std::ptr::{read_unaligned, write_unaligned};

/// Copy `len` bytes from `src` to `dst`, as [`std::ptr::copy`] (the two may
/// overlap): up to 16 bytes every load before any store, more through it.
///
/// # Safety
/// As [`std::ptr::copy`]: `src` readable and `dst` writable for `len` bytes.
#[inline(always)]
pub unsafe fn bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract; each access lies in the first or last
    // `len` bytes of its buffer, and the loads come before the stores, so an
    // overlap reads the old bytes.
    unsafe {
        if len > 16 {
            std::ptr::copy(src, dst, len);
        } else if len >= 8 {
            let (a, b) = (
                read_unaligned(src.cast::<u64>()),
                read_unaligned(src.add(len - 8).cast::<u64>()),
            );
            write_unaligned(dst.cast::<u64>(), a);
            write_unaligned(dst.add(len - 8).cast::<u64>(), b);
        } else if len >= 4 {
            let (a, b) = (
                read_unaligned(src.cast::<u32>()),
                read_unaligned(src.add(len - 4).cast::<u32>()),
            );
            write_unaligned(dst.cast::<u32>(), a);
            write_unaligned(dst.add(len - 4).cast::<u32>(), b);
        } else if len > 0 {
            let (a, m, b) = (src.read(), src.add(len / 2).read(), src.add(len - 1).read());
            dst.write(a);
            dst.add(len / 2).write(m);
            dst.add(len - 1).write(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length to 40, at every offset pair within a buffer, overlapping
    /// or not, against `ptr::copy`.
    #[test]
    fn copies_as_memmove_does() {
        let src: Vec<u8> = (0..64).map(|i| i as u8 ^ 0x5a).collect();
        for len in 0..=40 {
            for from in 0..8 {
                for to in 0..8 {
                    let (mut got, mut want) = (src.clone(), src.clone());
                    // SAFETY: from + len and to + len stay inside the 64 bytes.
                    unsafe {
                        bytes(got.as_ptr().add(from), got.as_mut_ptr().add(to + 16), len);
                        std::ptr::copy(
                            want.as_ptr().add(from),
                            want.as_mut_ptr().add(to + 16),
                            len,
                        );
                    }
                    assert_eq!(got, want, "len {len} from {from} to {}", to + 16);
                    let (mut got, mut want) = (src.clone(), src.clone());
                    // SAFETY: as above; the ranges overlap.
                    unsafe {
                        bytes(got.as_ptr().add(from), got.as_mut_ptr().add(to), len);
                        std::ptr::copy(want.as_ptr().add(from), want.as_mut_ptr().add(to), len);
                    }
                    assert_eq!(got, want, "overlapping: len {len} from {from} to {to}");
                }
            }
        }
    }
}
