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
    // SAFETY: the caller's contract, passed on: `ends` reads and writes the
    // first and last word of `len` ≥ the word's bytes; the last branch each
    // byte's place below `len`, loads first.
    unsafe {
        if len > 16 {
            std::ptr::copy(src, dst, len);
        } else if len >= 8 {
            ends::<u64>(src, dst, len);
        } else if len >= 4 {
            ends::<u32>(src, dst, len);
        } else if len > 0 {
            let (a, m, b) = (src.read(), src.add(len / 2).read(), src.add(len - 1).read());
            dst.write(a);
            dst.add(len / 2).write(m);
            dst.add(len - 1).write(b);
        }
    }
}

/// Copy `len` bytes as two words of `W`, the first and the last (overlapping
/// where `len` is under two words), both loaded before either is stored.
///
/// # Safety
/// As [`bytes`], with `size_of::<W>() ≤ len`.
#[inline(always)]
unsafe fn ends<W: Copy>(src: *const u8, dst: *mut u8, len: usize) {
    let tail = len - std::mem::size_of::<W>();
    // SAFETY: both words lie in the first `len` bytes of each buffer (the
    // caller's contract); the loads come before the stores, so an overlap
    // reads the old bytes.
    unsafe {
        let (a, b) = (
            read_unaligned(src.cast::<W>()),
            read_unaligned(src.add(tail).cast::<W>()),
        );
        write_unaligned(dst.cast::<W>(), a);
        write_unaligned(dst.add(tail).cast::<W>(), b);
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
