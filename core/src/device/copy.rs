//! Local device-to-device copies (a schedule's `Local::Copy`, in-place inputs set
//! aside): `cuMemcpyAsync` on the executor stream (default), or a grid-stride
//! kernel on the SMs (`FERROCX_DEVICE_COPY=kernel`).
//!
//! The kernel exists to test one hypothesis: that a local copy on a copy engine
//! delays the transfers to the other GPU, which use the engines too. On 2 × H200
//! it did not hold (run 10 in `bench/results/2026-11-22-h200-device/`: all-gather,
//! all-to-all and broadcast at 4–64 MiB were as fast or faster with
//! `cuMemcpyAsync`), so the copy engine stays the default; the kernel remains for
//! hosts where the engines are the bottleneck.

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
    /* Whole words of the vector loops; with w == 1 the byte loop below does all. */
    const fx_size nw = w == 1 ? 0 : n / w;
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

/// How local device copies run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyMode {
    /// `cuMemcpyAsync` (a copy engine).
    Engine,
    /// The grid-stride kernel.
    Kernel,
}

impl CopyMode {
    /// `FERROCX_DEVICE_COPY`: `ce` (default) or `kernel`.
    pub fn from_env() -> Result<Self> {
        let v = std::env::var("FERROCX_DEVICE_COPY").unwrap_or_default();
        match v.trim() {
            "" | "ce" => Ok(CopyMode::Engine),
            "kernel" => Ok(CopyMode::Kernel),
            other => Err(Error::Config {
                var: "FERROCX_DEVICE_COPY".into(),
                message: format!("'{other}' is not ce or kernel"),
            }),
        }
    }
}

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
    /// Build the copier for `device` (its context current on this thread): the
    /// kernel mode compiles and loads a module, so call where synchronizing is
    /// harmless.
    pub fn new(device: i32, mode: CopyMode) -> Result<Self> {
        let func = match mode {
            CopyMode::Engine => None,
            CopyMode::Kernel => Some(
                super::kernels::load_source(device, SOURCE, "fx_copy.cu", "fx_copy")
                    .map_err(|e| Error::Unsupported(format!("FERROCX_DEVICE_COPY=kernel: {e}")))?,
            ),
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
        let r = unsafe { super::kernels::launch(func, blocks, BLOCK, stream, &mut params) };
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
        let copier = match Copier::new(0, CopyMode::Kernel) {
            Ok(c) => c,
            Err(e) => return skip_notice(&e.to_string()),
        };
        assert!(copier.is_kernel());
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
