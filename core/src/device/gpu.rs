//! The device of one communicator: its context, the executor's stream (local steps
//! and staging copies of device collectives), stream-ordering flags, the reduction
//! kernels (compiled on first use) and pools of device scratch and pinned staging.

use super::copy::{Copier, CopyMode};
use super::kernels::Kernels;
use super::mem::DevBuf;
use super::order::Flags;
use crate::error::{Error, Result};
use ferrocx_sdk::cuda::{self, sys, Context, Event, PinnedHost, Stream};
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

/// One communicator's GPU.
///
/// Fields drop in declaration order: every CUDA object (stream, events,
/// flags, kernels, buffers) goes before `ctx`, the retain that keeps the
/// context alive. Destroying a stream of an already released context crashed
/// inside the driver under MPS.
pub(crate) struct Gpu {
    pci: i32,
    stream: Stream,
    flags: Flags,
    copier: Copier,
    kernels: OnceLock<std::result::Result<Kernels, String>>,
    dev_pool: Mutex<Vec<DevBuf>>,
    /// Per channel: device scratch and pinned staging, grown (never shrunk or freed
    /// while the communicator lives) on launching threads. Plans run one after the
    /// other and a channel's runners in order, so one of each per channel suffices.
    chans: Mutex<Vec<ChanBufs>>,
    /// Outgrown buffers a running plan may still use.
    retired: Mutex<(Vec<DevBuf>, Vec<PinnedHost>)>,
    /// Last: released after everything made in it.
    ctx: Context,
}

#[derive(Default)]
struct ChanBufs {
    scratch: Option<DevBuf>,
    stage: Option<PinnedHost>,
}

/// Round an allocation up (to a power of two, at least 1 MiB) so sizes repeat.
fn rounded(bytes: usize) -> usize {
    bytes.max(1 << 20).next_power_of_two()
}

impl Gpu {
    /// Open `device` (its primary context, a stream, the flags).
    pub fn open(device: i32) -> Result<Arc<Self>> {
        let ctx = Context::primary(device).map_err(Error::cuda)?;
        ctx.bind().map_err(Error::cuda)?;
        let pci = cuda::pci_id(device).map_err(Error::cuda)?;
        let stream = Stream::new().map_err(Error::cuda)?;
        let flags = Flags::new(device)?;
        let copier = Copier::new(device, CopyMode::from_env()?)?;
        if std::thread::available_parallelism().is_ok_and(|n| n.get() == 1) {
            tracing::warn!(target: "ferrocx::device",
                "this rank may run on one CPU only: its progress thread and a thread waiting on a CUDA stream will take turns, a scheduler slice (milliseconds) at a time; give each GPU rank two cores or more (fxrun --bind share)");
        }
        let gpu = Arc::new(Gpu {
            pci,
            stream,
            flags,
            copier,
            kernels: OnceLock::new(),
            dev_pool: Mutex::new(Vec::new()),
            chans: Mutex::new(Vec::new()),
            retired: Mutex::new((Vec::new(), Vec::new())),
            ctx,
        });
        gpu.preload();
        Ok(gpu)
    }

    /// Build and load every reduction kernel now, while no operation of this
    /// process can be in flight (see [`Kernels::prepare_all`]). Failures are
    /// logged here and returned by the device reductions that need the kernel.
    fn preload(&self) {
        let t = std::time::Instant::now();
        match self
            .kernels()
            .and_then(|k| k.prepare_all().map_err(Into::into))
        {
            Ok(()) => tracing::debug!(target: "ferrocx::device",
                "reduction kernels loaded in {:.0} ms", t.elapsed().as_secs_f64() * 1e3),
            Err(e) => tracing::info!(target: "ferrocx::device", "{e}"),
        }
    }

    /// Warn once per process, at its first device operation, when CUDA loads modules
    /// lazily: a kernel the application launches for the first time while a ferrocx
    /// operation is in flight makes the driver wait for the device's queued work
    /// while it holds the context, and the progress thread's CUDA calls wait for the
    /// driver: the operation stalls until FERROCX_TIMEOUT (seen with PyTorch, which
    /// sets LAZY; BENCH.md, 2026-11-25).
    pub fn warn_if_lazy_loading(&self) {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            if lazy_loading() {
                tracing::warn!(target: "ferrocx::device",
                    "CUDA_MODULE_LOADING is LAZY: a kernel the application launches for the first time while a ferrocx device operation is in flight can stall that operation until FERROCX_TIMEOUT; set CUDA_MODULE_LOADING=EAGER before CUDA starts (docs/ENV.md)");
            }
        });
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

    /// Queue a local device-to-device copy on `stream` (the executor's, or a
    /// user's): `cuMemcpyAsync`, or a kernel with `FERROCX_DEVICE_COPY=kernel`;
    /// see [`Copier`].
    ///
    /// # Safety
    /// As [`Copier::copy`].
    pub unsafe fn copy_local(
        &self,
        dst: usize,
        src: usize,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.copier.copy(dst, src, bytes, stream) }
    }

    /// An event capturing the executor stream's work so far.
    pub fn mark(&self) -> Result<Event> {
        let e = Event::new().map_err(Error::cuda)?;
        e.record_on(&self.stream).map_err(Error::cuda)?;
        Ok(e)
    }

    /// The reduction kernels (built and loaded when the device was opened).
    pub fn kernels(&self) -> Result<&Kernels> {
        self.kernels
            .get_or_init(|| Kernels::new(&self.ctx).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::Unsupported(format!("device reductions: {e}")))
    }

    /// Make channel `ch`'s scratch hold `scratch` bytes and its staging `stage` bytes.
    /// On the launching thread only: allocating may synchronize the device.
    pub fn ensure_channel(&self, ch: usize, scratch: usize, stage: usize) -> Result<()> {
        let mut chans = self.chans.lock();
        if chans.len() <= ch {
            chans.resize_with(ch + 1, ChanBufs::default);
        }
        let c = &mut chans[ch];
        if scratch > c.scratch.as_ref().map_or(0, DevBuf::len) {
            if let Some(old) = c.scratch.replace(DevBuf::new(rounded(scratch))?) {
                self.retired.lock().0.push(old);
            }
        }
        if stage > c.stage.as_ref().map_or(0, PinnedHost::len) {
            let new = PinnedHost::new(rounded(stage)).map_err(Error::cuda)?;
            if let Some(old) = c.stage.replace(new) {
                self.retired.lock().1.push(old);
            }
        }
        Ok(())
    }

    /// Channel `ch`'s (scratch address, bytes) and (staging host address, bytes),
    /// as made by [`ensure_channel`](Self::ensure_channel). No allocation.
    pub fn channel(&self, ch: usize) -> ((usize, usize), (usize, usize)) {
        let chans = self.chans.lock();
        let Some(c) = chans.get(ch) else {
            return ((0, 0), (0, 0));
        };
        (
            c.scratch.as_ref().map_or((0, 0), |b| (b.ptr(), b.len())),
            c.stage
                .as_ref()
                .map_or((0, 0), |b| (b.host() as usize, b.len())),
        )
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
}

/// Whether the driver loads modules lazily (`CUDA_MODULE_LOADING=LAZY`, the
/// default since CUDA 12.2).
fn lazy_loading() -> bool {
    if super::kernels::driver_version() < 11070 {
        return false;
    }
    let mut mode = sys::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING;
    // SAFETY: valid out pointer; the driver has the call (11.7+).
    let r = unsafe { sys::cuModuleGetLoadingMode(&mut mode) };
    r == sys::CUresult::CUDA_SUCCESS && mode == sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING
}
