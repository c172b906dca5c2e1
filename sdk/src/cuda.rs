//! Guarded access to the CUDA driver API, shared by the core and the plugins that move
//! GPU memory (feature `cuda`).
//!
//! The driver (`libcuda.so.1`) is loaded at run time through `cudarc`'s raw bindings
//! ([`sys`]); nothing is needed at build time. `cudarc` panics when a function is called
//! and the library is missing, so every entry point here first asks [`available`], which
//! checks for the library, runs `cuInit` once and counts devices — a machine without a
//! GPU gets an error value, never a panic.
//!
//! ```
//! use ferrocx_sdk::cuda;
//! match cuda::available() {
//!     Ok(n) => println!("{n} CUDA device(s)"),
//!     Err(why) => println!("no GPU support: {why}"),
//! }
//! // Host memory is never reported as device memory.
//! let v = vec![0u8; 16];
//! assert_eq!(cuda::device_of(v.as_ptr() as usize), None);
//! ```

use crate::error::{PluginError, PluginResult};
pub use cudarc::driver::sys;
use std::ffi::CStr;
use std::sync::OnceLock;

static STATE: OnceLock<Result<usize, String>> = OnceLock::new();

/// Number of CUDA devices, or why CUDA cannot be used here (no driver library,
/// `cuInit` failed, no device). Computed once per process.
pub fn available() -> Result<usize, String> {
    STATE
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the library; calls nothing in it.
            if !unsafe { sys::is_culib_present() } {
                return Err("no CUDA driver (libcuda.so.1 not found)".to_string());
            }
            // SAFETY: the library is present (checked above); cuInit takes flags 0.
            let r = unsafe { sys::cuInit(0) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuInit failed: {}", name(r)));
            }
            let mut n = 0;
            // SAFETY: initialized driver; `n` is a valid out pointer.
            let r = unsafe { sys::cuDeviceGetCount(&mut n) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuDeviceGetCount failed: {}", name(r)));
            }
            if n <= 0 {
                return Err("the CUDA driver reports no device".to_string());
            }
            Ok(n as usize)
        })
        .clone()
}

fn need() -> PluginResult<()> {
    available().map(|_| ()).map_err(PluginError::unsupported)
}

/// The driver's name for a result code, e.g. `CUDA_ERROR_INVALID_VALUE`.
pub fn name(r: sys::CUresult) -> String {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName only writes a pointer to a static string; it is called
    // only once the library is known to be loaded (every caller got `r` from it).
    let ok = unsafe { sys::cuGetErrorName(r, &mut p) } == sys::CUresult::CUDA_SUCCESS;
    if ok && !p.is_null() {
        // SAFETY: the driver returns a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("{r:?}")
    }
}

/// `Ok` for `CUDA_SUCCESS`, else an error naming the call and the driver's code.
pub fn check(r: sys::CUresult, what: &str) -> PluginResult<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(PluginError::system(format!("{what} failed: {}", name(r))))
    }
}

/// The device ordinal owning `ptr` when it is CUDA device memory; `None` for host
/// memory (pageable or pinned), for addresses CUDA does not know, and without CUDA.
pub fn device_of(ptr: usize) -> Option<i32> {
    device_span(ptr).map(|s| s.device)
}

/// Where a device address lies: its GPU and its allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSpan {
    /// The device ordinal.
    pub device: i32,
    /// The allocation's first byte.
    pub base: usize,
    /// Its bytes.
    pub size: usize,
}

/// [`device_of`] with the allocation, from one driver call (calls on device
/// buffers ask this per buffer: one `cuPointerGetAttributes`, which answers
/// defaults rather than errors for host memory, instead of three queries).
pub fn device_span(ptr: usize) -> Option<DeviceSpan> {
    if ptr == 0 || available().is_err() {
        return None;
    }
    use sys::CUpointer_attribute as A;
    let mut kind: u32 = 0;
    let mut device: i32 = -1;
    let mut base: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: the driver is initialized (`available` above); each out pointer
    // addresses a value as large as its attribute's type (memory type: 32
    // bits, ordinal: int, range: a CUdeviceptr and a size_t).
    let ok = unsafe {
        pointer_attributes(
            ptr as u64,
            [
                (
                    A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                    &mut kind as *mut u32 as _,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    &mut device as *mut i32 as _,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                    &mut base as *mut u64 as _,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                    &mut size as *mut usize as _,
                ),
            ],
        )
    };
    if !ok || kind != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 || device < 0 || size == 0 {
        return None;
    }
    Some(DeviceSpan {
        device,
        base: base as usize,
        size,
    })
}

/// Several attributes of the address `ptr` from one `cuPointerGetAttributes`
/// (which answers defaults, not errors, for host memory); whether the call
/// succeeded.
///
/// # Safety
/// The driver is initialized; each pointer addresses a writable value at
/// least as large as its attribute's type.
pub(crate) unsafe fn pointer_attributes<const N: usize>(
    ptr: u64,
    attrs: [(sys::CUpointer_attribute, *mut std::ffi::c_void); N],
) -> bool {
    let mut which = attrs.map(|a| a.0);
    let mut data = attrs.map(|a| a.1);
    // SAFETY: the caller's contract; the two arrays have N entries.
    let r = unsafe {
        sys::cuPointerGetAttributes(
            which.len() as u32,
            which.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr as sys::CUdeviceptr,
        )
    };
    r == sys::CUresult::CUDA_SUCCESS
}

/// A device's PCI location packed into 32 bits (domain 16, bus 8, device 5,
/// function 3): the same GPU has the same value in every process, whatever
/// `CUDA_VISIBLE_DEVICES` says.
pub fn pci_id(device: i32) -> PluginResult<i32> {
    need()?;
    let attr = |a: sys::CUdevice_attribute| -> PluginResult<i32> {
        let mut v = 0;
        check(
            // SAFETY: initialized driver; `v` is a valid out pointer.
            unsafe { sys::cuDeviceGetAttribute(&mut v, a, device) },
            "cuDeviceGetAttribute",
        )?;
        Ok(v)
    };
    use sys::CUdevice_attribute as A;
    let domain = attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
    let bus = attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    let dev = attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
    Ok(((domain & 0xffff) << 16) | ((bus & 0xff) << 8) | ((dev & 0x1f) << 3))
}

/// The ordinal, in this process, of the device at packed PCI location `pci`.
pub fn device_by_pci(pci: i32) -> Option<i32> {
    let n = available().ok()?;
    (0..n as i32).find(|&d| pci_id(d).ok() == Some(pci))
}

/// Whether the GPUs at packed PCI locations `a` and `b` (`pci_id`) are
/// distinct, both visible in this process, and reach each other with native
/// atomics (`CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`): NVLink peers
/// have them, PCIe peers do not. `false` whenever it cannot tell.
pub fn native_peer_atomics(a: i32, b: i32) -> bool {
    if a == b {
        return false;
    }
    let (Some(da), Some(db)) = (device_by_pci(a), device_by_pci(b)) else {
        return false;
    };
    let mut v = 0;
    use sys::CUdevice_P2PAttribute as P;
    // SAFETY: initialized driver (device_by_pci found both); valid ordinals;
    // `v` is a valid out pointer.
    let r = unsafe {
        sys::cuDeviceGetP2PAttribute(
            &mut v,
            P::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            da,
            db,
        )
    };
    r == sys::CUresult::CUDA_SUCCESS && v == 1
}

/// Whether the driver was loaded and initialized already (by [`available`]):
/// entry points that must not start CUDA in a host-only process ask this.
fn initialized() -> bool {
    matches!(STATE.get(), Some(Ok(_)))
}

/// Swap the calling thread's capture interaction mode for `mode`; the old
/// one, or `None` where the driver is not initialized (nothing to relax).
fn exchange_capture_mode(mode: sys::CUstreamCaptureMode) -> Option<sys::CUstreamCaptureMode> {
    if !initialized() {
        return None;
    }
    let mut m = mode;
    // SAFETY: the driver is initialized (checked); `m` is a valid in/out pointer.
    let r = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut m) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(m)
}

/// For a thread ferrocx starts (watchdogs, progress and service threads):
/// its driver calls (event queries, flag reads, handle closes) are never
/// part of a user's capture, so a capture in global mode on another thread
/// (the driver's default, and torch.cuda.graph's) must not forbid them —
/// the driver then fails them and invalidates the capture. Sets this
/// thread's mode to relaxed for its life; a no-op before the driver is
/// initialized.
pub fn relax_capture_checks_on_this_thread() {
    let _ = exchange_capture_mode(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
}

/// The same for a user's thread while it is inside a ferrocx device call:
/// relaxed until dropped, then the thread's own mode again (push/pop, as the
/// driver's documentation recommends), so the call's own queries and reads
/// are allowed during the user's capture in global or thread-local mode
/// and the user's other calls are still checked.
pub struct RelaxedCapture(Option<sys::CUstreamCaptureMode>);

impl RelaxedCapture {
    /// Relax the calling thread until the value is dropped.
    pub fn enter() -> Self {
        RelaxedCapture(exchange_capture_mode(
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        ))
    }

    /// One that changes nothing, to be replaced by [`enter`](Self::enter)
    /// later (a struct's last field, relaxed while its other fields drop).
    pub const fn inactive() -> Self {
        RelaxedCapture(None)
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            let _ = exchange_capture_mode(m);
        }
    }
}

/// Tell the person reading the test log why a GPU test did not run: writes
/// `skipping: <why>` straight to the process's standard error, which the test
/// harness does not capture (`eprintln!` inside a passing test is swallowed), so
/// a CI log without a GPU shows the reason for every skipped GPU test.
pub fn skip_notice(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipping: {why}");
}

/// A device's primary context, retained for as long as this value lives.
pub struct Context {
    ctx: sys::CUcontext,
    device: i32,
}

// SAFETY: a CUcontext handle may be used from any thread (after cuCtxSetCurrent).
unsafe impl Send for Context {}
// SAFETY: as above; the handle itself is immutable.
unsafe impl Sync for Context {}

impl Context {
    /// Retain `device`'s primary context (the one the CUDA runtime uses too).
    pub fn primary(device: i32) -> PluginResult<Self> {
        let n = available().map_err(PluginError::unsupported)?;
        if device < 0 || device as usize >= n {
            return Err(PluginError::invalid(format!(
                "CUDA device {device} does not exist ({n} visible)"
            )));
        }
        let mut ctx = std::ptr::null_mut();
        check(
            // SAFETY: valid ordinal (checked); `ctx` is a valid out pointer.
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) },
            "cuDevicePrimaryCtxRetain",
        )?;
        Ok(Context { ctx, device })
    }

    /// Make it the calling thread's current context (cheap when it already is).
    pub fn bind(&self) -> PluginResult<()> {
        // SAFETY: a live retained context.
        check(unsafe { sys::cuCtxSetCurrent(self.ctx) }, "cuCtxSetCurrent")
    }

    /// The device ordinal.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::CUcontext {
        self.ctx
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained in `primary`, released once.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// A non-blocking stream of the current context.
pub struct Stream(sys::CUstream);

// SAFETY: stream handles may be used from any thread of the process.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    /// A new stream that does not synchronize with the legacy default stream.
    pub fn new() -> PluginResult<Self> {
        need()?;
        let mut s = std::ptr::null_mut();
        check(
            // SAFETY: the caller bound a context; `s` is a valid out pointer.
            unsafe {
                sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
            },
            "cuStreamCreate",
        )?;
        Ok(Stream(s))
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::CUstream {
        self.0
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe { sys::cuStreamDestroy_v2(self.0) };
    }
}

/// An event without timing, for polling completion of stream work.
pub struct Event(sys::CUevent);

// SAFETY: event handles may be used from any thread of the process.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// A new event of the current context.
    pub fn new() -> PluginResult<Self> {
        need()?;
        let mut e = std::ptr::null_mut();
        check(
            // SAFETY: the caller bound a context; `e` is a valid out pointer.
            unsafe {
                sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
            },
            "cuEventCreate",
        )?;
        Ok(Event(e))
    }

    /// Capture the work queued on `stream` so far.
    pub fn record_on(&self, stream: &Stream) -> PluginResult<()> {
        // SAFETY: `stream` is a live stream owned by a `Stream`.
        unsafe { self.record(stream.raw()) }
    }

    /// Capture the work queued on a raw stream so far.
    ///
    /// # Safety
    /// `stream` must be a live stream (or null, the legacy default stream) of the
    /// context the event was made in.
    pub unsafe fn record(&self, stream: sys::CUstream) -> PluginResult<()> {
        check(
            // SAFETY: a live event; the stream is live by the caller's contract.
            unsafe { sys::cuEventRecord(self.0, stream) },
            "cuEventRecord",
        )
    }

    /// Whether the captured work is done (never blocks).
    pub fn done(&self) -> PluginResult<bool> {
        // SAFETY: a live event.
        match unsafe { sys::cuEventQuery(self.0) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery").map(|_| false),
        }
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::CUevent {
        self.0
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// Page-locked host memory mapped into the device's address space (for staging and
/// for flags the GPU waits on).
pub struct PinnedHost {
    host: *mut u8,
    dev: sys::CUdeviceptr,
    len: usize,
}

// SAFETY: plain memory owned by this value.
unsafe impl Send for PinnedHost {}
// SAFETY: as above; callers synchronize their own accesses.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    /// `len` bytes (zeroed), portable to every context and mapped for the device.
    pub fn new(len: usize) -> PluginResult<Self> {
        need()?;
        let mut p = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        check(
            // SAFETY: the caller bound a context; `p` is a valid out pointer.
            unsafe { sys::cuMemHostAlloc(&mut p, len.max(1), flags) },
            "cuMemHostAlloc",
        )?;
        let mut dev = 0;
        // SAFETY: `p` was just allocated with DEVICEMAP.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) };
        if let Err(e) = check(r, "cuMemHostGetDevicePointer") {
            // SAFETY: allocated above, freed once.
            unsafe { sys::cuMemFreeHost(p) };
            return Err(e);
        }
        // SAFETY: `len` bytes were allocated.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
        Ok(PinnedHost {
            host: p as *mut u8,
            dev,
            len,
        })
    }

    /// Host address.
    pub fn host(&self) -> *mut u8 {
        self.host
    }

    /// Device address of the same bytes.
    pub fn device(&self) -> sys::CUdeviceptr {
        self.dev
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { sys::cuMemFreeHost(self.host as *mut std::ffi::c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On any machine: no panic, and host memory is host memory. With a GPU (the
    /// device runs), a device allocation is reported on its device.
    #[test]
    fn detection_never_panics() {
        match available() {
            Err(why) => {
                eprintln!("no CUDA here: {why}");
                assert!(Stream::new().is_err() && Event::new().is_err());
                assert!(PinnedHost::new(64).is_err());
                assert!(Context::primary(0).is_err());
            }
            Ok(n) => {
                assert!(n >= 1);
                let ctx = Context::primary(0).unwrap();
                ctx.bind().unwrap();
                let mut d = 0;
                // SAFETY: bound context; valid out pointer.
                check(unsafe { sys::cuMemAlloc_v2(&mut d, 4096) }, "cuMemAlloc").unwrap();
                assert_eq!(device_of(d as usize), Some(0));
                assert_eq!(device_of(d as usize + 100), Some(0));
                let pinned = PinnedHost::new(64).unwrap();
                assert_eq!(device_of(pinned.host() as usize), None);
                assert_eq!(device_by_pci(pci_id(0).unwrap()), Some(0));
                // SAFETY: allocated above.
                unsafe { sys::cuMemFree_v2(d) };
            }
        }
        let v = [1u8; 8];
        assert_eq!(device_of(v.as_ptr() as usize), None);
    }
}
