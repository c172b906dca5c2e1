//! The CUDA driver: primary contexts, `cuMemAlloc` allocations, legacy CUDA
//! IPC (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle` / `cuIpcCloseMemHandle`),
//! and copy queues driven by `cuMemcpyAsync` on plugin-owned non-blocking
//! streams, completion polled with events. No kernel is ever launched, and no
//! multicast object is ever created.
//!
//! Every driver call goes through [`crate::cuda`] (guarded: a machine without
//! a driver gets errors, never a panic). Devices are shared process-wide
//! while any plugin context uses them, so a handle is opened once per process
//! whatever the number of communicators or plugins.

use super::open::OpenTable;
use super::{pci_name, BindGuard, Device, Driver, IpcHandle, Located, Queue, Reach, HANDLE_BYTES};
use crate::abi::FxPeerInfo;
use crate::copy::Mark;
use crate::cuda::{self, check, sys, Context, Event, Stream};
use crate::error::{PluginError, PluginResult};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Events (marks) one engine may have in flight.
const MAX_MARKS: usize = 1024;

/// Live devices of this process, by ordinal.
static DEVICES: Mutex<Option<HashMap<i32, Weak<CudaDevice>>>> = Mutex::new(None);

/// `cuDeviceCanAccessPeer` answers, by (my PCI id, peer PCI id).
static REACH: Mutex<Option<HashMap<(i32, i32), Reach>>> = Mutex::new(None);

/// The CUDA driver (stateless; devices live in a process-wide table).
#[derive(Default)]
pub struct CudaDriver;

impl Driver for CudaDriver {
    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn available(&self) -> Result<(), String> {
        cuda::available().map(|_| ())
    }

    fn device(&self, ordinal: i32) -> PluginResult<Arc<dyn Device>> {
        let mut guard = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
        let devs = guard.get_or_insert_with(HashMap::new);
        if let Some(d) = devs.get(&ordinal).and_then(Weak::upgrade) {
            return Ok(d);
        }
        let d = Arc::new(CudaDevice {
            ctx: Context::primary(ordinal)?,
            opens: OpenTable::default(),
        });
        devs.insert(ordinal, Arc::downgrade(&d));
        Ok(d)
    }

    fn reach(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> Reach {
        let key = (me.cuda_pci, peer.cuda_pci);
        let mut guard = REACH.lock().unwrap_or_else(PoisonError::into_inner);
        let cache = guard.get_or_insert_with(HashMap::new);
        if let Some(r) = cache.get(&key) {
            return r.clone();
        }
        let r = reach(me, peer);
        cache.insert(key, r.clone());
        r
    }

    fn locate(&self, addr: u64) -> Option<Located> {
        locate(addr)
    }

    fn open_handles(&self) -> usize {
        let guard = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_ref().map_or(0, |m| {
            m.values()
                .filter_map(Weak::upgrade)
                .map(|d| d.opens.open_count())
                .sum()
        })
    }
}

fn reach(me: &FxPeerInfo, peer: &FxPeerInfo) -> Reach {
    if let Err(why) = cuda::available() {
        return Reach::No(why);
    }
    if me.cuda_pci == peer.cuda_pci {
        return Reach::Yes; // the same GPU: IPC needs no peer access
    }
    let Some(mine) =
        cuda::device_by_pci(me.cuda_pci).or((me.cuda_device >= 0).then_some(me.cuda_device))
    else {
        return Reach::No(format!(
            "this rank's GPU {} is not visible in its own process",
            pci_name(me.cuda_pci)
        ));
    };
    let Some(theirs) = cuda::device_by_pci(peer.cuda_pci) else {
        return Reach::Invisible(format!(
            "the peer's GPU {} is not visible in this process (CUDA_VISIBLE_DEVICES)",
            pci_name(peer.cuda_pci)
        ));
    };
    let mut ok = 0;
    // SAFETY: initialized driver (checked); valid ordinals; `ok` is a valid out pointer.
    let r = unsafe { sys::cuDeviceCanAccessPeer(&mut ok, mine, theirs) };
    match check(r, "cuDeviceCanAccessPeer") {
        Ok(()) if ok != 0 => Reach::Yes,
        Ok(()) => Reach::No(format!(
            "cuDeviceCanAccessPeer says GPU {} cannot access GPU {}",
            pci_name(me.cuda_pci),
            pci_name(peer.cuda_pci)
        )),
        Err(e) => Reach::No(e.message().to_string()),
    }
}

/// The allocation of a device address, from one `cuPointerGetAttributes`
/// call (which answers defaults, not errors, for host memory).
fn locate(addr: u64) -> Option<Located> {
    if addr == 0 || cuda::available().is_err() {
        return None;
    }
    use sys::CUpointer_attribute as A;
    let mut mem_type: u32 = 0;
    let mut ordinal: i32 = -1;
    let mut base: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    let mut id: u64 = 0;
    let mut ipc: u32 = 0;
    let mut managed: u32 = 0;
    // SAFETY: initialized driver; each pointer addresses a value at least as
    // large as its attribute's type (booleans land in zero-initialized u32s).
    let ok = unsafe {
        cuda::pointer_attributes(
            addr,
            [
                (
                    A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                    &mut mem_type as *mut u32 as *mut c_void,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    &mut ordinal as *mut i32 as *mut c_void,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                    &mut base as *mut u64 as *mut c_void,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                    &mut size as *mut usize as *mut c_void,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
                    &mut id as *mut u64 as *mut c_void,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                    &mut ipc as *mut u32 as *mut c_void,
                ),
                (
                    A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    &mut managed as *mut u32 as *mut c_void,
                ),
            ],
        )
    };
    if !ok || mem_type != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 || ordinal < 0 || size == 0
    {
        return None;
    }
    Some(Located {
        base,
        size: size as u64,
        id,
        device: ordinal,
        ipc: ipc != 0 && managed == 0,
    })
}

/// One GPU: its retained primary context and the handles opened on it.
pub struct CudaDevice {
    ctx: Context,
    opens: OpenTable,
}

impl Drop for CudaDevice {
    /// The last user let go: finish the closes queued for any device before
    /// this context is released, so none races the process's exit (a CUDA
    /// call on the closing thread while the driver tears down crashes, seen
    /// under MPS).
    fn drop(&mut self) {
        closer().flush();
    }
}

fn restore_context(prev: usize) {
    // SAFETY: `prev` is the context that was current on this thread before a
    // bind; the caller still holds it (a context is never destroyed under its user).
    unsafe { sys::cuCtxSetCurrent(prev as sys::CUcontext) };
}

impl Device for CudaDevice {
    fn ordinal(&self) -> i32 {
        self.ctx.device()
    }

    fn bind(&self) -> PluginResult<BindGuard> {
        let mut cur: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the driver is initialized (a Context exists); valid out pointer.
        check(unsafe { sys::cuCtxGetCurrent(&mut cur) }, "cuCtxGetCurrent")?;
        if cur == self.ctx.raw() {
            return Ok(BindGuard::noop());
        }
        self.ctx.bind()?;
        // A thread that had no context (the core's progress thread) keeps ours:
        // the next hook then finds it bound. One that had another gets it back.
        Ok(if cur.is_null() {
            BindGuard::noop()
        } else {
            BindGuard::restoring(cur as usize, restore_context)
        })
    }

    fn queue(&self) -> PluginResult<Box<dyn Queue>> {
        Ok(Box::new(CudaQueue {
            stream: Stream::new()?,
            events: Vec::new(),
            free: Vec::new(),
        }))
    }

    fn alloc(&self, bytes: usize) -> PluginResult<(u64, IpcHandle)> {
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: the caller bound this device's context; valid out pointer.
        let r = unsafe { sys::cuMemAlloc_v2(&mut d, bytes.max(1)) };
        check(r, "cuMemAlloc").map_err(|e| {
            PluginError::system(format!(
                "{} of {bytes} bytes on GPU {}",
                e.message(),
                self.ordinal()
            ))
        })?;
        match self.export(d) {
            Ok(h) => Ok((d, h)),
            Err(e) => {
                // SAFETY: allocated above, never shared.
                unsafe { sys::cuMemFree_v2(d) };
                Err(e)
            }
        }
    }

    fn free(&self, addr: u64) {
        // SAFETY: `addr` came from `alloc` and nobody uses it any more (caller's contract).
        unsafe { sys::cuMemFree_v2(addr) };
    }

    fn export(&self, base: u64) -> PluginResult<IpcHandle> {
        // SAFETY: zero bytes are a valid CUipcMemHandle value to overwrite.
        let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        // SAFETY: valid out pointer; `base` is the start of a device allocation (the
        // driver rejects anything else with an error).
        let r = unsafe { sys::cuIpcGetMemHandle(&mut h, base) };
        check(r, "cuIpcGetMemHandle")?;
        // Another process writes this allocation with its copy engine, ordered
        // only by our flags. A "synchronous" cuMemcpyHtoD from pageable memory
        // into it (fxperf's zero fill before its check) may return before its
        // DMA landed, and would then overwrite the peer's later direct write.
        // SYNC_MEMOPS makes such copies really synchronous for this allocation.
        let one: u32 = 1;
        // SAFETY: `base` is a device allocation (the export above succeeded); the
        // value is a live u32, as the attribute expects.
        let r = unsafe {
            sys::cuPointerSetAttribute(
                (&one as *const u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                base,
            )
        };
        check(r, "cuPointerSetAttribute(SYNC_MEMOPS)")?;
        let mut out = [0u8; HANDLE_BYTES];
        for (o, c) in out.iter_mut().zip(h.reserved.iter()) {
            *o = *c as u8;
        }
        Ok(IpcHandle(out))
    }

    fn open(&self, handle: &IpcHandle) -> PluginResult<u64> {
        // SAFETY: zero bytes are a valid CUipcMemHandle value to overwrite.
        let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        for (c, b) in h.reserved.iter_mut().zip(handle.0.iter()) {
            *c = *b as _;
        }
        let mut p: sys::CUdeviceptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: the caller bound this device's context; valid out pointer; the
        // handle is bytes a peer exported (the driver validates them).
        let r = unsafe { sys::cuIpcOpenMemHandle_v2(&mut p, h, flags) };
        check(r, "cuIpcOpenMemHandle")?;
        Ok(p)
    }

    fn close(&self, addr: u64) {
        // cuIpcCloseMemHandle unmaps, which may wait for the whole device; this is
        // usually the core's progress thread, while a user stream of this device
        // waits (cuStreamWaitValue32) for a plan only that thread can finish: a
        // deadlock. Hand the close to a thread of its own.
        closer().send(Job::Close(self.ordinal(), addr));
    }

    fn after_closes(&self, keep: Box<dyn Send>) {
        closer().send(Job::Keep(keep));
    }

    fn opens(&self) -> &OpenTable {
        &self.opens
    }
}

/// A connection's stream with a pool of events.
pub struct CudaQueue {
    stream: Stream,
    events: Vec<Event>,
    free: Vec<u32>,
}

impl Queue for CudaQueue {
    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> PluginResult<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: a live stream of the bound context; the caller keeps both ranges
        // valid until a later event completes. Host addresses (pinned or pageable)
        // are accepted through unified addressing.
        check(
            unsafe { sys::cuMemcpyAsync(dst, src, len, self.stream.raw()) },
            "cuMemcpyAsync",
        )
    }

    fn mark(&mut self) -> PluginResult<Mark> {
        let i = match self.free.pop() {
            Some(i) => i,
            None if self.events.len() < MAX_MARKS => {
                self.events.push(Event::new()?);
                (self.events.len() - 1) as u32
            }
            None => {
                return Err(PluginError::internal(format!(
                    "all {MAX_MARKS} CUDA events of a copy queue are in use"
                )))
            }
        };
        if let Err(e) = self.events[i as usize].record_on(&self.stream) {
            self.free.push(i);
            return Err(e);
        }
        Ok(Mark(i))
    }

    fn poll(&mut self, mark: Mark) -> PluginResult<bool> {
        self.events
            .get(mark.0 as usize)
            .ok_or_else(|| PluginError::internal(format!("unknown event {}", mark.0)))?
            .done()
    }

    fn release(&mut self, mark: Mark) {
        self.free.push(mark.0);
    }

    fn drain(&mut self, deadline: Instant, stop: &dyn Fn() -> bool) -> PluginResult<bool> {
        loop {
            // SAFETY: a live stream.
            match unsafe { sys::cuStreamQuery(self.stream.raw()) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                r => return check(r, "cuStreamQuery").map(|_| false),
            }
            if Instant::now() >= deadline || stop() {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Free and total bytes of the current context's device (`cuMemGetInfo`), for leak checks.
pub fn mem_info() -> PluginResult<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out pointers; the caller bound a context.
    let r = unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) };
    check(r, "cuMemGetInfo")?;
    Ok((free, total))
}

/// Process-wide count of handles opened on `ordinal` (0 when it is not in use).
pub fn open_count(ordinal: i32) -> usize {
    let guard = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    guard
        .as_ref()
        .and_then(|m| m.get(&ordinal))
        .and_then(Weak::upgrade)
        .map_or(0, |d| d.opens.open_count())
}

/// What the closing thread does, in the order queued.
enum Job {
    /// `cuIpcCloseMemHandle(addr)` in device `ordinal`'s primary context.
    Close(i32, u64),
    /// Drop this once every close queued before it is done (e.g. the liveness
    /// lock that tells the exporter its memory is no longer mapped here).
    Keep(Box<dyn Send>),
    /// Say when everything queued before is done.
    Flush(std::sync::mpsc::SyncSender<()>),
}

/// Closes IPC mappings off the calling thread (see `CudaDevice::close`).
struct Closer {
    tx: std::sync::Mutex<Option<std::sync::mpsc::Sender<Job>>>,
}

/// Longest wait for queued closes when a device is let go.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

impl Closer {
    fn send(&self, job: Job) {
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let refused = match tx.as_ref() {
            Some(t) => t.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        drop(tx);
        // No thread (could not be started): do it here, as before.
        if let Some(job) = refused {
            run(job);
        }
    }

    /// Wait (bounded) until every job queued so far ran.
    fn flush(&self) {
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        self.send(Job::Flush(done));
        let _ = wait.recv_timeout(FLUSH_WAIT);
    }
}

fn run(job: Job) {
    match job {
        Job::Close(ordinal, addr) => close_on(ordinal, addr),
        Job::Keep(k) => drop(k),
        Job::Flush(done) => {
            let _ = done.try_send(());
        }
    }
}

fn close_on(ordinal: i32, addr: u64) {
    // Retained for the call: the device that opened `addr` may be gone by now.
    let Ok(ctx) = Context::primary(ordinal) else {
        return;
    };
    let Ok(()) = ctx.bind() else { return };
    // SAFETY: `addr` came from cuIpcOpenMemHandle in this (primary) context and
    // no queued copy uses it any more (mappings are held by copies in flight, so
    // the last release comes after them).
    unsafe { sys::cuIpcCloseMemHandle(addr) };
}

fn closer() -> &'static Closer {
    static CLOSER: std::sync::OnceLock<Closer> = std::sync::OnceLock::new();
    CLOSER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("ferrocx-ipc-close".into())
            .spawn(move || {
                // A handle exists, so the driver is initialized.
                crate::cuda::relax_capture_checks_on_this_thread();
                while let Ok(job) = rx.recv() {
                    run(job);
                }
            });
        Closer {
            tx: std::sync::Mutex::new(spawned.ok().map(|_| tx)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_means_errors_not_panics() {
        assert_eq!(pci_name(0x0001_1a08), "0001:1a:01.0");
        let b = CudaDriver;
        let v = [0u8; 8];
        assert_eq!(b.locate(v.as_ptr() as u64), None, "host memory");
        match b.available() {
            Err(why) => {
                eprintln!("no CUDA here ({why}): checking the error paths only");
                assert!(b.device(0).is_err());
                let mut me = FxPeerInfo::zeroed();
                me.cuda_pci = 1;
                let mut peer = me;
                peer.cuda_pci = 2;
                assert!(matches!(b.reach(&me, &peer), Reach::No(_)));
            }
            Ok(()) => {
                let d = b.device(0).unwrap();
                let _g = d.bind().unwrap();
                let (addr, h) = d.alloc(1 << 20).unwrap();
                let loc = b.locate(addr + 10).unwrap();
                assert_eq!((loc.base, loc.size, loc.device), (addr, 1 << 20, 0));
                assert!(loc.ipc);
                assert_eq!(d.export(addr).unwrap(), h);
                d.free(addr);
            }
        }
    }
}
