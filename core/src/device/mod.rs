//! GPU memory in the core: the device a rank uses, and the device-side executor
//! pieces (reduction kernels compiled at run time with NVRTC). The CUDA driver is
//! reached only through `ferrocx_sdk::cuda`, which reports a missing driver as an
//! error value instead of panicking.

pub mod kernels;
pub mod nvrtc;
