//! A stand-in for the GPU made of host shared memory, so everything built on
//! [`Device`] — a transport's FIFO and direct copies, handle caches,
//! revocations, two processes exchanging blobs — runs and is tested on
//! machines without CUDA (feature `testing`).
//!
//! * "Device memory" is a [`FakeBuf`]: a POSIX shared-memory object mapped
//!   here and listed in a process-wide registry (what `cuPointerGetAttributes`
//!   answers for real memory). Its "IPC handle" is the object's name.
//! * Opening a handle maps the object again (another address, as with CUDA IPC).
//! * A [`FakeQueue`] queues copies and performs them, in order, only when a
//!   mark after them is polled complete — after a configurable number of
//!   polls — so code that reads before completion reads stale bytes and fails
//!   its test, as it would on a GPU.

use super::open::OpenTable;
use super::{BindGuard, Device, Driver, IpcHandle, Located, Queue, Reach, HANDLE_BYTES};
use crate::abi::FxPeerInfo;
use crate::copy::Mark;
use crate::error::{PluginError, PluginResult};
use crate::region::Region;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Every stand-in object's name starts with this (after the '/').
pub const NAME_PREFIX: &str = "/ferrocx-fakegpu-";

/// The lock byte a stand-in buffer's creator holds (an orphan sweep leaves
/// held objects alone).
pub const CREATOR_BYTE: i64 = 0;

static COUNTER: AtomicU64 = AtomicU64::new(1);

/// (base, size, id, handle) of every live [`FakeBuf`] in this process.
static REGISTRY: Mutex<Vec<(u64, u64, u64, IpcHandle)>> = Mutex::new(Vec::new());

fn registry() -> std::sync::MutexGuard<'static, Vec<(u64, u64, u64, IpcHandle)>> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn handle_of(name: &str) -> IpcHandle {
    let mut h = [0u8; HANDLE_BYTES];
    h[..name.len()].copy_from_slice(name.as_bytes());
    IpcHandle(h)
}

fn name_of(h: &IpcHandle) -> PluginResult<String> {
    let end = h.0.iter().position(|&b| b == 0).unwrap_or(HANDLE_BYTES);
    let name = std::str::from_utf8(&h.0[..end])
        .ok()
        .filter(|n| n.starts_with(NAME_PREFIX) && n[1..].bytes().all(|b| b != b'/'))
        .ok_or_else(|| PluginError::invalid(format!("{h:?} is not a stand-in handle")))?;
    Ok(name.to_owned())
}

/// Stand-in device memory: shared memory other processes can map by name.
pub struct FakeBuf {
    region: Region,
    id: u64,
}

impl FakeBuf {
    /// `len` (≥ 1) zeroed bytes.
    pub fn new(len: usize) -> PluginResult<Self> {
        let id = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NAME_PREFIX}{}-{id:x}", std::process::id());
        let region = Region::create(&name, len.max(1), CREATOR_BYTE)
            .map_err(|e| PluginError::io(format!("stand-in device buffer {name}"), e))?;
        registry().push((
            region.base() as u64,
            region.len() as u64,
            id,
            handle_of(&name),
        ));
        Ok(FakeBuf { region, id })
    }

    /// Its address.
    pub fn addr(&self) -> u64 {
        self.region.base() as u64
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Whether it is empty (never: at least one byte).
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// Copy `data` in at offset 0 (test setup; nothing else may be using it).
    pub fn write(&self, data: &[u8]) {
        assert!(data.len() <= self.len(), "write past the stand-in buffer");
        // SAFETY: in bounds (checked); the caller guarantees no concurrent use.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.region.base(), data.len()) }
    }

    /// Copy the first `len` bytes out.
    pub fn read(&self, len: usize) -> Vec<u8> {
        assert!(len <= self.len(), "read past the stand-in buffer");
        let mut v = vec![0u8; len];
        // SAFETY: in bounds (checked); the caller guarantees no concurrent writer.
        unsafe { std::ptr::copy_nonoverlapping(self.region.base(), v.as_mut_ptr(), len) };
        v
    }
}

impl Drop for FakeBuf {
    fn drop(&mut self) {
        registry().retain(|e| e.2 != self.id);
    }
}

/// The stand-in driver.
#[derive(Default)]
pub struct FakeDriver {
    devices: Mutex<HashMap<i32, Arc<FakeDevice>>>,
    polls: u32,
}

impl FakeDriver {
    /// Queues complete a mark on its third poll.
    pub fn new() -> Self {
        Self::with_polls(2)
    }

    /// Queues complete a mark after `polls` polls that answered "not yet".
    /// Removes stand-in buffers of test processes that died.
    pub fn with_polls(polls: u32) -> Self {
        let prefix = &NAME_PREFIX[1..];
        crate::sweep::sweep_stale(std::path::Path::new(crate::sweep::SHM_DIR), &[prefix]);
        FakeDriver {
            devices: Mutex::new(HashMap::new()),
            polls,
        }
    }

    /// Handles currently opened on `ordinal` (0 if the device was never used).
    pub fn open_count(&self, ordinal: i32) -> usize {
        let devs = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        devs.get(&ordinal).map_or(0, |d| d.opens.open_count())
    }
}

impl Driver for FakeDriver {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn available(&self) -> Result<(), String> {
        Ok(())
    }

    fn device(&self, ordinal: i32) -> PluginResult<Arc<dyn Device>> {
        let mut devs = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        let d = devs.entry(ordinal).or_insert_with(|| {
            Arc::new(FakeDevice {
                ordinal,
                polls: self.polls,
                opens: OpenTable::default(),
                fifos: Mutex::new(HashMap::new()),
                mapped: Mutex::new(HashMap::new()),
            })
        });
        Ok(d.clone())
    }

    fn reach(&self, _me: &FxPeerInfo, _peer: &FxPeerInfo) -> Reach {
        Reach::Yes
    }

    fn open_handles(&self) -> usize {
        let devs = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        devs.values().map(|d| d.opens.open_count()).sum()
    }

    fn locate(&self, addr: u64) -> Option<Located> {
        registry()
            .iter()
            .find(|e| addr >= e.0 && addr < e.0 + e.1)
            .map(|e| Located {
                base: e.0,
                size: e.1,
                id: e.2,
                device: 0,
                ipc: true,
            })
    }
}

/// A stand-in GPU.
pub struct FakeDevice {
    ordinal: i32,
    polls: u32,
    opens: OpenTable,
    fifos: Mutex<HashMap<u64, FakeBuf>>,
    mapped: Mutex<HashMap<u64, Region>>,
}

impl Device for FakeDevice {
    fn ordinal(&self) -> i32 {
        self.ordinal
    }

    fn bind(&self) -> PluginResult<BindGuard> {
        Ok(BindGuard::noop())
    }

    fn queue(&self) -> PluginResult<Box<dyn Queue>> {
        Ok(Box::new(FakeQueue::new(self.polls)))
    }

    fn alloc(&self, bytes: usize) -> PluginResult<(u64, IpcHandle)> {
        let b = FakeBuf::new(bytes)?;
        let addr = b.addr();
        let h = handle_of(b.region.name());
        self.fifos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(addr, b);
        Ok((addr, h))
    }

    fn free(&self, addr: u64) {
        self.fifos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&addr);
    }

    fn export(&self, base: u64) -> PluginResult<IpcHandle> {
        registry()
            .iter()
            .find(|e| e.0 == base)
            .map(|e| e.3)
            .ok_or_else(|| PluginError::invalid(format!("{base:#x} is no stand-in allocation")))
    }

    fn open(&self, handle: &IpcHandle) -> PluginResult<u64> {
        let name = name_of(handle)?;
        let r = Region::open(&name, None)
            .map_err(|e| PluginError::io(format!("stand-in open of {name}"), e))?;
        let addr = r.base() as u64;
        self.mapped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(addr, r);
        Ok(addr)
    }

    fn close(&self, addr: u64) {
        self.mapped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&addr);
    }

    fn opens(&self) -> &OpenTable {
        &self.opens
    }
}

/// A stand-in stream: copies happen, in order, when a later mark is polled complete.
pub struct FakeQueue {
    /// (copies queued before it, "not yet" answers given) per live mark.
    marks: HashMap<u32, (u64, u32)>,
    queue: VecDeque<(u64, u64, usize)>,
    /// Copies performed so far.
    performed: u64,
    /// Copies queued so far.
    queued: u64,
    next_mark: u32,
    polls: u32,
}

impl FakeQueue {
    /// Marks complete after `polls` "not yet" answers.
    pub fn new(polls: u32) -> Self {
        FakeQueue {
            marks: HashMap::new(),
            queue: VecDeque::new(),
            performed: 0,
            queued: 0,
            next_mark: 0,
            polls,
        }
    }

    fn perform_up_to(&mut self, upto: u64) {
        while self.performed < upto {
            let (dst, src, len) = self.queue.pop_front().expect("queued copy");
            // SAFETY: `copy`'s contract keeps both ranges valid until a mark after
            // the copy completes, which is now.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            self.performed += 1;
        }
    }
}

impl Queue for FakeQueue {
    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> PluginResult<()> {
        if len > 0 && (dst == 0 || src == 0) {
            return Err(PluginError::invalid("stand-in copy with a null address"));
        }
        self.queue.push_back((dst, src, len));
        self.queued += 1;
        Ok(())
    }

    fn mark(&mut self) -> PluginResult<Mark> {
        if self.marks.len() >= 4096 {
            return Err(PluginError::internal("all 4096 stand-in marks are in use"));
        }
        let id = self.next_mark;
        self.next_mark = self.next_mark.wrapping_add(1);
        self.marks.insert(id, (self.queued, 0));
        Ok(Mark(id))
    }

    fn poll(&mut self, mark: Mark) -> PluginResult<bool> {
        let polls = self.polls;
        let Some(m) = self.marks.get_mut(&mark.0) else {
            return Err(PluginError::internal(format!("unknown mark {}", mark.0)));
        };
        if m.1 < polls {
            m.1 += 1;
            return Ok(false);
        }
        let upto = m.0;
        self.perform_up_to(upto);
        Ok(true)
    }

    fn release(&mut self, mark: Mark) {
        self.marks.remove(&mark.0);
    }

    fn drain(&mut self, _deadline: Instant, _stop: &dyn Fn() -> bool) -> PluginResult<bool> {
        self.perform_up_to(self.queued);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_export_open_and_locate() {
        let b = FakeDriver::new();
        let dev = b.device(0).unwrap();
        let buf = FakeBuf::new(100).unwrap();
        buf.write(b"hello");
        let loc = b.locate(buf.addr() + 3).unwrap();
        assert_eq!((loc.base, loc.size), (buf.addr(), 100));
        assert!(loc.covers(buf.addr() + 90, 10) && !loc.covers(buf.addr() + 91, 10));
        assert!(
            b.locate(&loc as *const _ as u64).is_none(),
            "stack is host memory"
        );
        let h = dev.export(buf.addr()).unwrap();
        let other = dev.open(&h).unwrap();
        assert_ne!(other, buf.addr(), "a second mapping, like IPC");
        // SAFETY: the mapping is 100 bytes long and alive until close.
        let seen = unsafe { std::slice::from_raw_parts(other as *const u8, 5) }.to_vec();
        assert_eq!(&seen, b"hello");
        dev.close(other);
        let id = loc.id;
        drop(buf);
        let again = FakeBuf::new(100).unwrap();
        if let Some(l) = b.locate(again.addr()) {
            assert_ne!(l.id, id, "a new allocation has a new identity");
        }
        assert!(name_of(&IpcHandle([b'x'; 64])).is_err());
    }
}
