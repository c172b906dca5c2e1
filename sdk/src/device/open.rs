//! Opened peer allocations: who maps what, and when mappings are closed.
//!
//! * [`OpenTable`] (one per device, process-wide): a handle is opened at most
//!   once per process (`cuIpcOpenMemHandle` refuses or misbehaves on a second
//!   open of the same handle in one context) and closed when its last user
//!   lets go. Everything is counted, so tests can check that nothing stays open.
//! * [`Mapping`]: one counted use of an opened handle. The FIFO of a sending
//!   connection holds one; a copy in flight holds a clone of the one it writes
//!   through, so a mapping is never closed under a running copy.
//! * [`ConnMappings`]: a sending connection's cache of the receiver's
//!   allocations it wrote into, least recently used first out (bounded by
//!   the plugin's configuration, e.g. `FERROCX_P2P_IPC_CACHE`), emptied of a
//!   handle when the receiver revokes it
//!   (deregistered or freed) and entirely when the connection is freed.

use super::{Device, IpcHandle};
use crate::error::PluginResult;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Handles opened on one device in this process, with use counts.
#[derive(Default)]
pub struct OpenTable {
    map: Mutex<HashMap<IpcHandle, (u64, usize)>>,
}

impl OpenTable {
    /// The mapped address of `h`, opening it with `open` if nobody holds it; counts one use.
    pub fn acquire(
        &self,
        h: &IpcHandle,
        open: impl FnOnce() -> PluginResult<u64>,
    ) -> PluginResult<u64> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((addr, uses)) = map.get_mut(h) {
            *uses += 1;
            return Ok(*addr);
        }
        // Opening under the lock: a second thread asking for the same handle
        // must wait for this open rather than open it again.
        let addr = open()?;
        map.insert(*h, (addr, 1));
        Ok(addr)
    }

    /// One use of `h` ends; the last one closes it with `close`.
    pub fn release(&self, h: &IpcHandle, close: impl FnOnce(u64)) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((addr, uses)) = map.get_mut(h) else {
            return;
        };
        *uses -= 1;
        if *uses == 0 {
            let addr = *addr;
            map.remove(h);
            close(addr);
        }
    }

    /// Handles open now.
    pub fn open_count(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// One use of an opened peer allocation; closes it (if last) when dropped.
pub struct Mapping {
    dev: Arc<dyn Device>,
    handle: IpcHandle,
    addr: u64,
}

impl Mapping {
    /// Open (or share) `handle` on `dev`. The caller bound `dev`'s context.
    pub fn open(dev: &Arc<dyn Device>, handle: &IpcHandle) -> PluginResult<Arc<Mapping>> {
        let addr = dev.opens().acquire(handle, || dev.open(handle))?;
        Ok(Arc::new(Mapping {
            dev: dev.clone(),
            handle: *handle,
            addr,
        }))
    }

    /// Base address of the peer's allocation in this process.
    pub fn addr(&self) -> u64 {
        self.addr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Closing needs the device's context on this thread (cheap if already bound).
        let _bound = self.dev.bind();
        let dev = &self.dev;
        dev.opens().release(&self.handle, |a| dev.close(a));
    }
}

/// A sending connection's recently used peer allocations.
pub struct ConnMappings {
    /// (handle, mapping, last use); few entries, scanned linearly.
    entries: Vec<(IpcHandle, Arc<Mapping>, u64)>,
    cap: usize,
    clock: u64,
}

impl ConnMappings {
    /// An empty cache keeping at most `cap` (≥ 1) mappings.
    pub fn new(cap: usize) -> Self {
        ConnMappings {
            entries: Vec::new(),
            cap: cap.max(1),
            clock: 0,
        }
    }

    /// The mapping of `h`, opened with `open` on first use (evicting the least
    /// recently used one when full).
    pub fn get(
        &mut self,
        h: &IpcHandle,
        open: impl FnOnce() -> PluginResult<Arc<Mapping>>,
    ) -> PluginResult<Arc<Mapping>> {
        self.clock += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.0 == *h) {
            e.2 = self.clock;
            return Ok(e.1.clone());
        }
        let m = open()?;
        if self.entries.len() >= self.cap {
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.2)
                .map(|(i, _)| i)
                .expect("a full cache has entries");
            self.entries.swap_remove(oldest);
        }
        self.entries.push((*h, m.clone(), self.clock));
        Ok(m)
    }

    /// Forget `h` (the receiver revoked it); true if it was cached.
    pub fn revoke(&mut self, h: &IpcHandle) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.0 != *h);
        self.entries.len() != before
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Cached mappings.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::fake::{FakeBuf, FakeDriver};
    use crate::device::Driver;

    fn h(b: u8) -> IpcHandle {
        IpcHandle([b; 64])
    }

    #[test]
    fn table_opens_once_and_closes_on_last_release() {
        let t = OpenTable::default();
        let mut opens = 0;
        let mut closes = Vec::new();
        for _ in 0..3 {
            let a = t
                .acquire(&h(1), || {
                    opens += 1;
                    Ok(0x1000)
                })
                .unwrap();
            assert_eq!(a, 0x1000);
        }
        assert_eq!((opens, t.open_count()), (1, 1));
        t.release(&h(1), |a| closes.push(a));
        t.release(&h(1), |a| closes.push(a));
        assert!(closes.is_empty());
        t.release(&h(1), |a| closes.push(a));
        assert_eq!((closes, t.open_count()), (vec![0x1000], 0));
        t.release(&h(1), |_| panic!("closed twice"));
        let err = t
            .acquire(&h(2), || Err(crate::PluginError::system("nope")))
            .unwrap_err();
        assert_eq!(err.message(), "nope");
        assert_eq!(t.open_count(), 0, "a failed open leaves nothing behind");
    }

    #[test]
    fn lru_evicts_oldest_and_revokes_close_when_unused() {
        let driver = FakeDriver::new();
        let dev = driver.device(0).unwrap();
        let bufs: Vec<_> = (0..4).map(|_| FakeBuf::new(4096).unwrap()).collect();
        let handles: Vec<_> = bufs.iter().map(|b| dev.export(b.addr()).unwrap()).collect();
        let mut c = ConnMappings::new(2);
        let open = |hd: &IpcHandle| {
            let dev = dev.clone();
            let hd = *hd;
            move || Mapping::open(&dev, &hd)
        };
        let m0 = c.get(&handles[0], open(&handles[0])).unwrap();
        c.get(&handles[1], open(&handles[1])).unwrap();
        c.get(&handles[0], open(&handles[0])).unwrap(); // 0 is now the most recent
        c.get(&handles[2], open(&handles[2])).unwrap(); // evicts 1
        assert_eq!(c.len(), 2);
        assert_eq!(dev.opens().open_count(), 2, "handle 1 closed on eviction");
        // A copy in flight still holds m0: revoking does not close it yet.
        assert!(c.revoke(&handles[0]));
        assert_eq!(dev.opens().open_count(), 2);
        drop(m0);
        assert_eq!(dev.opens().open_count(), 1);
        c.clear();
        assert_eq!(dev.opens().open_count(), 0);
        assert!(!c.revoke(&handles[3]));
    }
}
