//! Local device-to-device copies (a schedule's `Local::Copy`, in-place inputs set
//! aside) as a kernel on the SMs rather than `cuMemcpyAsync`.
//!
//! Why: the transports move data between GPUs with the copy engines, and a local
//! copy queued with `cuMemcpyAsync` competes with them for the engines. Measured
//! on 2 × H200 (run 9 in `bench/results/2026-11-22-h200-device/`): an all-gather of
//! 16 MiB took 71 µs out of place and 45 µs in place, the only difference being
//! the rank's own 8 MiB block copied beside the transfers. A grid-stride kernel
//! reads and writes HBM at several TB/s and leaves the engines to the transfers.
//!
//! `FERROCX_DEVICE_COPY`: `kernel` (default; falls back to `ce` with a warning
//! when the kernel cannot be built) or `ce` (`cuMemcpyAsync`).

use super::mem::copy_async;
use crate::error::{Error, Result};
use ferrocx_sdk::cuda::{self, sys};

/// Threads per block.
const BLOCK: u32 = 512;

const SOURCE: &str = r#"
typedef unsigned long long fx_size;
/* dst[0..n) = src[0..n), bytes; 16-byte vectors where both pointers share their
   alignment modulo 16, 4-byte words where they share it modulo 4. */
extern "C" __global__ void __launch_bounds__(512)
fx_copy(unsigned char* dst, const unsigned char* src, fx_size n) {
    const fx_size tid = (fx_size)blockIdx.x * blockDim.x + threadIdx.x;
    const fx_size stride = (fx_size)gridDim.x * blockDim.x;
    const fx_size d = (fx_size)dst, s = (fx_size)src;
    const fx_size w = ((d ^ s) & 15ull) == 0 ? 16 : (((d ^ s) & 3ull) == 0 ? 4 : 1);
    fx_size head = (w - (d & (w - 1))) & (w - 1);
    if (head > n) head = n;
    if (tid < head) dst[tid] = src[tid];
    dst += head; src += head; n -= head;
    const fx_size nw = n / w;
    if (w == 16) {
        uint4* D = (uint4*)dst;
        const uint4* S = (const uint4*)src;
        fx_size i = tid;
        for (; i + 3ull * stride < nw; i += 4ull * stride) {
            const uint4 a = S[i], b = S[i + stride], c = S[i + 2ull * stride], e = S[i + 3ull * stride];
            D[i] = a; D[i + stride] = b; D[i + 2ull * stride] = c; D[i + 3ull * stride] = e;
        }
        for (; i < nw; i += stride) D[i] = S[i];
    } else if (w == 4) {
        unsigned int* D = (unsigned int*)dst;
        const unsigned int* S = (const unsigned int*)src;
        for (fx_size i = tid; i < nw; i += stride) D[i] = S[i];
    }
    for (fx_size j = nw * w + tid; j < n; j += stride) dst[j] = src[j];
}
"#;

/// How local device copies run (`FERROCX_DEVICE_COPY`).
pub(crate) struct Copier {
    /// The kernel, or `None` for `cuMemcpyAsync`.
    func: Option<sys::CUfunction>,
    /// Most blocks worth launching: two waves' worth of the device's SMs.
    max_blocks: u32,
}

// SAFETY: a CUfunction handle may be used from any thread of its context's process;
// the struct is immutable after construction.
unsafe impl Send for Copier {}
// SAFETY: as above.
unsafe impl Sync for Copier {}

impl Copier {
    /// Build the copier for `device` (its context current on this thread): may
    /// compile and load a module, so call where synchronizing is harmless.
    pub fn new(device: i32) -> Result<Self> {
        let mode = std::env::var("FERROCX_DEVICE_COPY").unwrap_or_default();
        let mode = mode.trim();
        let func = match mode {
            "ce" => None,
            "" | "kernel" => {
                match super::kernels::load_source(device, SOURCE, "fx_copy.cu", "fx_copy") {
                    Ok(f) => Some(f),
                    Err(e) if mode.is_empty() => {
                        tracing::warn!(target: "ferrocx::device", "local device copies use cuMemcpyAsync, which competes with transfers for the copy engines (no copy kernel: {e})");
                        None
                    }
                    Err(e) => {
                        return Err(Error::Unsupported(format!(
                            "FERROCX_DEVICE_COPY=kernel: {e}"
                        )))
                    }
                }
            }
            other => {
                return Err(Error::Config {
                    var: "FERROCX_DEVICE_COPY".into(),
                    message: format!("'{other}' is not kernel or ce"),
                })
            }
        };
        let mut sms = 0;
        // SAFETY: valid out pointer; a bad ordinal is reported, not undefined.
        let r = unsafe {
            sys::cuDeviceGetAttribute(
                &mut sms,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                device,
            )
        };
        cuda::check(r, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)").map_err(Error::cuda)?;
        Ok(Copier {
            func,
            max_blocks: (sms.max(1) as u32) * 2,
        })
    }

    /// Whether copies run as a kernel.
    #[cfg(test)]
    fn is_kernel(&self) -> bool {
        self.func.is_some()
    }

    /// Queue `dst[..bytes] = src[..bytes]` on `stream`. Nothing for an empty copy
    /// or one onto itself.
    ///
    /// # Safety
    /// Both ranges are device-accessible memory of the stream's context, valid
    /// (and not written by anyone else) until the stream has run the copy; they do
    /// not overlap unless equal.
    pub unsafe fn copy(
        &self,
        dst: usize,
        src: usize,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        if bytes == 0 || dst == src {
            return Ok(());
        }
        let Some(func) = self.func else {
            // SAFETY: the caller's contract.
            return unsafe { copy_async(dst, src, bytes, stream) };
        };
        // Four 16-byte vectors per thread per pass; at most two waves.
        let per_block = BLOCK as usize * 64;
        let blocks = bytes.div_ceil(per_block).clamp(1, self.max_blocks as usize) as u32;
        let (mut d, mut s, mut n) = (dst as u64, src as u64, bytes as u64);
        let mut params = [
            &mut d as *mut u64 as *mut std::ffi::c_void,
            &mut s as *mut u64 as *mut std::ffi::c_void,
            &mut n as *mut u64 as *mut std::ffi::c_void,
        ];
        // SAFETY: a loaded kernel taking (pointer, pointer, u64); the parameters
        // live for the call; the memory is valid by the caller's contract.
        let r = unsafe {
            sys::cuLaunchKernel(
                func,
                blocks,
                1,
                1,
                BLOCK,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        cuda::check(r, "cuLaunchKernel(fx_copy)").map_err(Error::cuda)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::cuda::{skip_notice, Context, Stream};

    /// Every alignment of source and destination modulo 16 (the kernel picks
    /// 16-byte, 4-byte or byte moves from them), lengths around those widths and
    /// one of several blocks; bytes outside the target stay untouched.
    #[test]
    fn copies_every_alignment_and_length_exactly() {
        if let Err(why) = cuda::available() {
            return skip_notice(&format!("no CUDA: {why}"));
        }
        let ctx = Context::primary(0).unwrap();
        ctx.bind().unwrap();
        let copier = Copier::new(0).unwrap();
        if !copier.is_kernel() {
            return skip_notice("the copy kernel could not be built (NVRTC missing?)");
        }
        let stream = Stream::new().unwrap();
        const N: usize = (3 << 20) + 64;
        let src_host: Vec<u8> = (0..N).map(|i| (i * 131 + i / 251) as u8).collect();
        let (src, dst) = (
            super::super::mem::DevBuf::new(N).unwrap(),
            super::super::mem::DevBuf::new(N).unwrap(),
        );
        let poison = 0xA5u8;
        let mut back = vec![0u8; N];
        // SAFETY: both buffers hold N bytes; the host vectors too.
        unsafe {
            cuda::check(
                sys::cuMemcpyHtoD_v2(src.ptr() as _, src_host.as_ptr().cast(), N),
                "HtoD",
            )
            .unwrap();
        }
        for so in 0..16 {
            for doff in [0, 1, 3, 4, 8, 12, 15] {
                for len in [1usize, 3, 15, 16, 17, 64, 1000, 4099, (3 << 20) - 5] {
                    // SAFETY: every range lies inside the N-byte buffers (offsets
                    // below 16, lengths at most N - 64); synchronized before reuse.
                    unsafe {
                        cuda::check(sys::cuMemsetD8_v2(dst.ptr() as _, poison, N), "memset")
                            .unwrap();
                        copier
                            .copy(dst.ptr() + doff, src.ptr() + so, len, stream.raw())
                            .unwrap();
                        cuda::check(sys::cuStreamSynchronize(stream.raw()), "sync").unwrap();
                        cuda::check(
                            sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dst.ptr() as _, N),
                            "DtoH",
                        )
                        .unwrap();
                    }
                    let what = format!("src+{so} -> dst+{doff}, {len} bytes");
                    assert!(back[..doff].iter().all(|&b| b == poison), "{what}: before");
                    assert!(
                        back[doff..doff + len] == src_host[so..so + len],
                        "{what}: data"
                    );
                    assert!(
                        back[doff + len..].iter().all(|&b| b == poison),
                        "{what}: after"
                    );
                }
            }
        }
    }
}
