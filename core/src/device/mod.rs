//! GPU memory in the core: the device a rank uses (`Gpu`), stream ordering
//! (`order`), device memory and pinned staging (`mem`), and the reduction kernels
//! compiled at run time with NVRTC ([`kernels`]). The CUDA driver
//! is reached only through `ferrocx_sdk::cuda`, which reports a missing driver as an
//! error value instead of panicking: without a GPU everything host-side works and
//! device calls return [`Error::Unsupported`](crate::Error::Unsupported).

mod gpu;
pub mod kernels;
pub(crate) mod mem;
pub mod nvrtc;
pub(crate) mod order;
mod select;

pub(crate) use gpu::Gpu;
pub use select::choose_device;

/// A raw CUDA stream handle (`CUstream`), as FFI users pass it.
pub type RawStream = ferrocx_sdk::cuda::sys::CUstream;
