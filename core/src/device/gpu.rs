//! The device of one communicator: its context, the executor's stream (local steps
//! and staging copies of device collectives), stream-ordering flags, the reduction
//! kernels (compiled on first use) and pools of device scratch and pinned staging.

use super::kernels::Kernels;
use super::mem::DevBuf;
use super::order::Flags;
use crate::error::{Error, Result};
use ferrocx_sdk::cuda::{self, sys, Context, Event, PinnedHost, Stream};
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

/// One communicator's GPU.
pub(crate) struct Gpu {
    ctx: Context,
    pci: i32,
    stream: Stream,
    flags: Flags,
    kernels: OnceLock<std::result::Result<Kernels, String>>,
    dev_pool: Mutex<Vec<DevBuf>>,
    host_pool: Mutex<Vec<PinnedHost>>,
}

impl Gpu {
    /// Open `device` (its primary context, a stream, the flags).
    pub fn open(device: i32) -> Result<Arc<Self>> {
        let ctx = Context::primary(device).map_err(Error::cuda)?;
        ctx.bind().map_err(Error::cuda)?;
        let pci = cuda::pci_id(device).map_err(Error::cuda)?;
        let stream = Stream::new().map_err(Error::cuda)?;
        let flags = Flags::new()?;
        Ok(Arc::new(Gpu {
            ctx,
            pci,
            stream,
            flags,
            kernels: OnceLock::new(),
            dev_pool: Mutex::new(Vec::new()),
            host_pool: Mutex::new(Vec::new()),
        }))
    }

    /// Make the context current on the calling thread (every thread that touches CUDA).
    pub fn bind(&self) -> Result<()> {
        self.ctx.bind().map_err(Error::cuda)
    }

    /// The device ordinal in this process.
    pub fn device(&self) -> i32 {
        self.ctx.device()
    }

    /// Its PCI location (`cuda::pci_id`).
    pub fn pci(&self) -> i32 {
        self.pci
    }

    /// The executor's stream.
    pub fn stream(&self) -> sys::CUstream {
        self.stream.raw()
    }

    /// The stream-ordering flags.
    pub fn flags(&self) -> &Flags {
        &self.flags
    }

    /// An event capturing the executor stream's work so far.
    pub fn mark(&self) -> Result<Event> {
        let e = Event::new().map_err(Error::cuda)?;
        e.record_on(&self.stream).map_err(Error::cuda)?;
        Ok(e)
    }

    /// The reduction kernels, compiled on first use.
    pub fn kernels(&self) -> Result<&Kernels> {
        self.kernels
            .get_or_init(|| Kernels::new(&self.ctx).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::Unsupported(format!("device reductions: {e}")))
    }

    /// Device memory of at least `bytes`, from the pool when one fits (the smallest).
    /// Call on the launching thread: a new allocation may synchronize the device.
    pub fn dev_buf(&self, bytes: usize) -> Result<DevBuf> {
        let mut p = self.dev_pool.lock();
        if let Some(i) = (0..p.len())
            .filter(|&i| p[i].len() >= bytes)
            .min_by_key(|&i| p[i].len())
        {
            return Ok(p.swap_remove(i));
        }
        drop(p);
        DevBuf::new(bytes)
    }

    /// Return device memory to the pool. Never freed before the communicator is:
    /// `cuMemFree` synchronizes the device, and on the progress thread (while a user
    /// stream waits for a plan) that would deadlock.
    pub fn put_dev(&self, b: DevBuf) {
        self.dev_pool.lock().push(b);
    }

    /// Pinned host memory of at least `bytes`, from the pool when one fits (the
    /// smallest). Call on the launching thread, as [`dev_buf`](Self::dev_buf).
    pub fn pinned(&self, bytes: usize) -> Result<PinnedHost> {
        let mut p = self.host_pool.lock();
        if let Some(i) = (0..p.len())
            .filter(|&i| p[i].len() >= bytes)
            .min_by_key(|&i| p[i].len())
        {
            return Ok(p.swap_remove(i));
        }
        drop(p);
        PinnedHost::new(bytes.max(4096)).map_err(Error::cuda)
    }

    /// Return pinned memory to the pool (kept, like device memory: freeing synchronizes).
    pub fn put_pinned(&self, b: PinnedHost) {
        self.host_pool.lock().push(b);
    }
}
