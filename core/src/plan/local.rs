//! Local steps of a schedule on real memory: copies, reductions, the final
//! average. The only place the executor dereferences schedule addresses.

use crate::algo::{Buf, Local, Region};
use crate::device::Gpu;
use crate::error::Result;
use crate::reduce;
use crate::types::{DataType, RedOp};

/// Where a runner's three buffers start, and how big an element is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bases {
    pub send: usize,
    pub recv: usize,
    pub scratch: usize,
    pub esize: usize,
}

impl Bases {
    /// Regions that hold absolute addresses and byte lengths (point-to-point
    /// operations, call checks).
    pub fn absolute() -> Self {
        Bases {
            send: 0,
            recv: 0,
            scratch: 0,
            esize: 1,
        }
    }

    /// Address and byte length of a region.
    pub fn addr(&self, r: &Region) -> (usize, usize) {
        let base = match r.buf {
            Buf::Send => self.send,
            Buf::Recv => self.recv,
            Buf::Scratch => self.scratch,
        };
        (base + r.off * self.esize, r.len * self.esize)
    }

    /// The half-open address range `[start, end)` of a region.
    pub fn span(&self, r: &Region) -> (usize, usize) {
        let (p, n) = self.addr(r);
        (p, p + n)
    }
}

/// Whether two half-open address ranges share a byte.
pub(crate) fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Run local steps in order.
///
/// # Safety
/// Every region must lie inside memory that the task's owner keeps valid
/// (validated buffers, or scratch owned by the runner) and that no one
/// else writes while the step runs.
pub(crate) unsafe fn run(locals: &[Local], b: &Bases, dtype: DataType, op: RedOp, nranks: usize) {
    for l in locals {
        match *l {
            Local::Copy { dst, src } => {
                let (d, n) = b.addr(&dst);
                let (s, _) = b.addr(&src);
                if d != s && n > 0 {
                    // SAFETY: the caller guarantees both ranges are valid;
                    // schedules never partially overlap, `copy` tolerates it anyway.
                    unsafe { std::ptr::copy(s as *const u8, d as *mut u8, n) };
                }
            }
            Local::Reduce { dst, a, b: src } => {
                let (d, _) = b.addr(&dst);
                let (x, _) = b.addr(&a);
                let (y, _) = b.addr(&src);
                // SAFETY: valid, aligned (validated buffers, u64-aligned scratch),
                // dst equal to a source or disjoint (schedule invariant).
                unsafe {
                    reduce::reduce(
                        dtype,
                        op,
                        d as *mut u8,
                        x as *const u8,
                        y as *const u8,
                        dst.len,
                    )
                };
            }
            Local::Finish { dst } => {
                let (d, _) = b.addr(&dst);
                // SAFETY: as above.
                unsafe { reduce::finish(dtype, op, d as *mut u8, dst.len, nranks) };
            }
        }
    }
}

/// Queue local steps on the GPU's executor stream: copies with [`Gpu::copy_local`],
/// reductions and the final average as NVRTC kernels. Nothing runs on the host.
/// Returns whether anything was queued (copies onto themselves and the final
/// step of anything but an average queue nothing).
///
/// # Safety
/// As [`run`], with device addresses; the memory must stay valid until the stream
/// has run the work (the runner waits for an event recorded after it).
pub(crate) unsafe fn run_device(
    locals: &[Local],
    b: &Bases,
    dtype: DataType,
    op: RedOp,
    nranks: usize,
    gpu: &Gpu,
) -> Result<bool> {
    let stream = gpu.stream();
    let mut queued = false;
    for l in locals {
        match *l {
            Local::Copy { dst, src } => {
                let (d, n) = b.addr(&dst);
                let (s, _) = b.addr(&src);
                // SAFETY: the caller's contract.
                unsafe { gpu.copy_local(d, s, n, stream)? };
                queued |= d != s && n > 0;
            }
            Local::Reduce { dst, a, b: src } => {
                let (d, _) = b.addr(&dst);
                let (x, _) = b.addr(&a);
                let (y, _) = b.addr(&src);
                // SAFETY: the caller's contract; dst equals a source or is disjoint.
                unsafe {
                    gpu.kernels()?
                        .reduce(dtype, op, d as u64, x as u64, y as u64, dst.len, stream)?
                };
                queued = true;
            }
            Local::Finish { dst } => {
                if op == RedOp::Avg {
                    let (d, _) = b.addr(&dst);
                    // SAFETY: the caller's contract.
                    unsafe {
                        gpu.kernels()?
                            .finish(dtype, op, d as u64, dst.len, nranks, stream)?
                    };
                    queued = true;
                }
            }
        }
    }
    Ok(queued)
}

/// Copy `bytes` from `src` into `buf` at byte `at` (staging an in-place input).
pub(crate) fn copy_in(buf: &mut [u64], at: usize, src: usize, bytes: usize) {
    assert!(buf.len() * 8 >= at + bytes);
    if bytes > 0 {
        // SAFETY: `src` is a validated task buffer of at least `bytes` bytes;
        // `buf` is ours and holds `at + bytes` (asserted).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src as *const u8,
                buf.as_mut_ptr().cast::<u8>().add(at),
                bytes,
            )
        };
    }
}

/// Copy `bytes` from host address `src` to `dst` (a send to this rank itself
/// into its receive; the two may overlap or be the same buffer).
///
/// # Safety
/// `src..src+bytes` readable and `dst..dst+bytes` writable (validated task buffers).
pub(crate) unsafe fn copy_host(dst: usize, src: usize, bytes: usize) {
    if bytes > 0 && dst != src {
        // SAFETY: the caller's contract; `copy` allows overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
    }
}
