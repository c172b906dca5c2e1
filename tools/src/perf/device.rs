//! `--mem cuda`: device buffers mirrored from fxperf's host buffers (filled and
//! checked on the host), calls queued on one CUDA stream.

use ferrocx::{Error, Result};
use ferrocx_sdk::cuda::{self, sys, Stream};

fn cuda_err(e: ferrocx_sdk::PluginError) -> Error {
    Error::Cuda(e.message().to_string())
}

/// Device memory (freed on drop).
pub struct DevMem {
    /// Device address.
    pub ptr: u64,
    len: usize,
}

impl DevMem {
    /// `len` bytes on the current context's device.
    pub fn new(len: usize) -> Result<Self> {
        let mut ptr = 0;
        cuda::check(
            // SAFETY: the communicator bound its context on this thread; valid out pointer.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) },
            "cuMemAlloc",
        )
        .map_err(cuda_err)?;
        Ok(DevMem { ptr, len })
    }

    /// Copy `data` to the start. A copy from pageable memory may return before the
    /// bytes reach the device; the context synchronization makes them visible to
    /// work on any stream and to peers writing the buffer.
    pub fn upload(&self, data: &[u8]) -> Result<()> {
        assert!(data.len() <= self.len);
        cuda::check(
            // SAFETY: `data` is readable for its length; the allocation is at least as long.
            unsafe { sys::cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), data.len()) },
            "cuMemcpyHtoD",
        )
        .map_err(cuda_err)?;
        // SAFETY: no arguments; the communicator's context is current.
        cuda::check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize").map_err(cuda_err)
    }

    /// Copy the start into `out`.
    pub fn download(&self, out: &mut [u8]) -> Result<()> {
        assert!(out.len() <= self.len);
        cuda::check(
            // SAFETY: `out` is writable for its length; the allocation is at least as long.
            unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, out.len()) },
            "cuMemcpyDtoH",
        )
        .map_err(cuda_err)
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// A rank's device side: its stream and two buffers of the largest size.
pub struct DevBufs {
    /// The stream every call is queued on.
    pub stream: Stream,
    /// Send buffer.
    pub send: DevMem,
    /// Receive (and in-place) buffer.
    pub recv: DevMem,
}

impl DevBufs {
    /// Buffers of `cap` bytes on the communicator's device.
    pub fn new(comm: &ferrocx::Communicator, cap: usize) -> Result<Self> {
        if comm.device().is_none() {
            return Err(Error::Unsupported(format!(
                "--mem cuda: rank {} has no GPU ({})",
                comm.rank(),
                cuda::available()
                    .err()
                    .unwrap_or_else(|| "FERROCX_DEVICE=-1".into())
            )));
        }
        Ok(DevBufs {
            stream: Stream::new().map_err(cuda_err)?,
            send: DevMem::new(cap)?,
            recv: DevMem::new(cap)?,
        })
    }

    /// Wait for everything queued on the stream.
    pub fn sync(&self) -> Result<()> {
        cuda::check(
            // SAFETY: a live stream.
            unsafe { sys::cuStreamSynchronize(self.stream.raw()) },
            "cuStreamSynchronize",
        )
        .map_err(cuda_err)
    }
}
