//! GPU memory in the core: the device a rank uses (`Gpu`), stream ordering
//! (`order`), device memory and pinned staging (`mem`), local copies (`copy`); the reduction kernels compiled at
//! run time with NVRTC ([`kernels`]) come from the SDK. The CUDA driver
//! is reached only through `ferrocx_sdk::cuda`, which reports a missing driver as an
//! error value instead of panicking: without a GPU everything host-side works and
//! device calls return [`Error::Unsupported`](crate::Error::Unsupported).

mod assign;
pub(crate) mod copy;
mod gpu;
#[cfg(test)]
mod kernel_tests;
pub(crate) mod mem;
pub(crate) mod order;
#[doc(hidden)]
pub mod testdata;

pub use assign::{check_device, choose_device};
/// The reduction kernels live in the SDK, shared with the device collective plugins.
pub use ferrocx_sdk::kernels::{self, nvrtc};

impl From<kernels::Error> for crate::Error {
    fn from(e: kernels::Error) -> Self {
        match e {
            kernels::Error::Unsupported(m) => crate::Error::Unsupported(m),
            kernels::Error::InvalidArgument(m) => crate::Error::InvalidArgument(m),
            kernels::Error::Cuda(m) => crate::Error::Cuda(m),
        }
    }
}
pub(crate) use gpu::Gpu;

/// A raw CUDA stream handle (`CUstream`), as FFI users pass it.
pub type RawStream = ferrocx_sdk::cuda::sys::CUstream;

/// A CUDA stream the device API can order work on: a raw `CUstream`, a cudarc
/// `CudaStream` (or an `Arc` of one, as cudarc hands them out), or the SDK's
/// [`Stream`](ferrocx_sdk::cuda::Stream).
///
/// ```no_run
/// # fn f(comm: &ferrocx::Communicator, buf: u64, n: usize) -> ferrocx::Result<()> {
/// let ctx = cudarc::driver::CudaContext::new(0).unwrap();
/// let stream = ctx.new_stream().unwrap(); // Arc<CudaStream>
/// let spec = ferrocx::CollSpec::new(ferrocx::CollKind::AllReduce, ferrocx::DataType::F32, n);
/// // SAFETY: `buf` is device memory of this rank's GPU, alive until the stream passes.
/// unsafe { comm.collective_in_place_on(&spec, buf, &stream)? };
/// # Ok(()) }
/// ```
pub trait AsStream {
    /// The raw handle (borrowed: the caller keeps the stream alive).
    fn raw_stream(&self) -> RawStream;
}

impl AsStream for RawStream {
    fn raw_stream(&self) -> RawStream {
        *self
    }
}

impl AsStream for ferrocx_sdk::cuda::Stream {
    fn raw_stream(&self) -> RawStream {
        self.raw()
    }
}

impl AsStream for cudarc::driver::CudaStream {
    fn raw_stream(&self) -> RawStream {
        self.cu_stream()
    }
}

impl<T: AsStream + ?Sized> AsStream for &T {
    fn raw_stream(&self) -> RawStream {
        (**self).raw_stream()
    }
}

impl<T: AsStream + ?Sized> AsStream for std::sync::Arc<T> {
    fn raw_stream(&self) -> RawStream {
        (**self).raw_stream()
    }
}
