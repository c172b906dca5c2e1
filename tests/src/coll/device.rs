//! The collectives on CUDA device memory: the same cases and checks as on host
//! memory, with every buffer (and its canary tail) copied to the GPU, the collective
//! queued on a stream with the stream-ordered API, and the results copied back.

use super::{ABuf, Prepared};
use ferrocx::Communicator;
use ferrocx_sdk::cuda::{self, sys, Stream};

/// Device memory for the tests (freed on drop).
pub struct DevMem {
    pub ptr: u64,
    pub len: usize,
}

impl DevMem {
    pub fn new(len: usize) -> Result<Self, String> {
        let mut ptr = 0;
        // SAFETY: the communicator bound its context on this thread; valid out pointer.
        cuda::check(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) },
            "cuMemAlloc",
        )
        .map_err(|e| e.to_string())?;
        Ok(DevMem { ptr, len })
    }

    pub fn upload(&self, data: &[u8]) -> Result<(), String> {
        assert!(data.len() <= self.len);
        // SAFETY: `data` is readable for its length, the allocation at least as long.
        cuda::check(
            unsafe { sys::cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), data.len()) },
            "cuMemcpyHtoD",
        )
        .map_err(|e| e.to_string())
    }

    pub fn download(&self, out: &mut [u8]) -> Result<(), String> {
        assert!(out.len() <= self.len);
        // SAFETY: `out` is writable for its length, the allocation at least as long.
        cuda::check(
            unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, out.len()) },
            "cuMemcpyDtoH",
        )
        .map_err(|e| e.to_string())
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Wait for everything queued on `s`.
pub fn sync(s: &Stream) -> Result<(), String> {
    // SAFETY: a live stream.
    cuda::check(
        unsafe { sys::cuStreamSynchronize(s.raw()) },
        "cuStreamSynchronize",
    )
    .map_err(|e| e.to_string())
}

/// An ABuf mirrored on the device, tail included.
fn mirror(b: &ABuf) -> Result<Option<DevMem>, String> {
    if b.len() == 0 {
        return Ok(None);
    }
    let d = DevMem::new(b.all().len())?;
    d.upload(b.all())?;
    Ok(Some(d))
}

impl Prepared {
    /// Run it on device copies of its buffers, ordered on `stream`, and copy the
    /// results (tails included) back for [`verify`](Self::verify).
    pub fn run_device(&mut self, comm: &Communicator, stream: &Stream) -> Result<(), String> {
        let send = mirror(&self.send)?;
        let buf = mirror(&self.buf)?;
        let p = |d: &Option<DevMem>| d.as_ref().map_or(0, |d| d.ptr);
        // SAFETY: a live stream of the communicator's device; the buffers outlive the
        // stream synchronization below.
        let r = unsafe {
            if self.case.in_place {
                comm.collective_in_place_on(&self.spec, p(&buf), stream.raw())
            } else {
                comm.collective_on(&self.spec, p(&send), p(&buf), stream.raw())
            }
        };
        r.map_err(|e| e.to_string())?;
        sync(stream)?;
        comm.device_error().map_err(|e| e.to_string())?;
        if let Some(d) = &send {
            d.download(self.send.all_mut())?;
        }
        if let Some(d) = &buf {
            d.download(self.buf.all_mut())?;
        }
        Ok(())
    }
}
