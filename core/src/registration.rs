//! Registration cache: one entry per registered range, holding a handle from
//! every plugin that supports registration; looked up by address range when
//! an operation is posted. Ref-counted; cleared at destroy.

use crate::error::{Error, Result};
use crate::plugin::{PluginInstance, RawMemHandle};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A registration returned by [`Communicator::register`](crate::Communicator::register).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegHandle {
    start: usize,
    len: usize,
}

impl RegHandle {
    /// Registered length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

struct Entry {
    len: usize,
    refs: usize,
    handles: Vec<(Arc<PluginInstance>, RawMemHandle)>,
}

impl Entry {
    fn release(self) -> Result<()> {
        let mut first = Ok(());
        for (p, h) in self.handles {
            if let Err(e) = p.deregister(h) {
                tracing::warn!(target: "ferrocx::reg", "{e}");
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// The cache.
#[derive(Default)]
pub(crate) struct Registrations {
    map: Mutex<BTreeMap<usize, Entry>>,
    /// Number of entries, readable without the lock (the per-operation fast path).
    live: AtomicUsize,
}

impl Registrations {
    /// Register `[ptr, ptr+len)` of memory `kind` (`FX_MEM_HOST`/`FX_MEM_CUDA`) with
    /// every plugin that can (same range again: ref count).
    pub fn register(
        &self,
        plugins: &[Arc<PluginInstance>],
        ptr: *const u8,
        len: usize,
        kind: i32,
    ) -> Result<RegHandle> {
        if ptr.is_null() {
            return Err(Error::invalid("register: buffer is null"));
        }
        if len == 0 {
            return Err(Error::invalid("register: length is 0"));
        }
        let start = ptr as usize;
        start.checked_add(len).ok_or_else(|| {
            Error::invalid(format!(
                "register: {len} bytes at {ptr:p} wrap around the address space"
            ))
        })?;
        let mut map = self.map.lock();
        if let Some(e) = map.get_mut(&start) {
            if e.len == len {
                e.refs += 1;
                return Ok(RegHandle { start, len });
            }
        }
        if let Some((s, e)) = map.range(..start + len).next_back() {
            if s + e.len > start {
                return Err(Error::invalid(format!(
                    "register: [{start:#x}, +{len}) overlaps the registration [{s:#x}, +{}); deregister it first",
                    e.len
                )));
            }
        }
        let mut handles = Vec::new();
        for p in plugins.iter().filter(|p| p.can_register()) {
            match p.register(ptr as *mut u8, len, kind) {
                Ok(h) => handles.push((p.clone(), h)),
                Err(Error::Plugin {
                    code: ferrocx_sdk::abi::FX_UNSUPPORTED,
                    ..
                }) => {}
                Err(e) => {
                    let _ = Entry {
                        len,
                        refs: 0,
                        handles,
                    }
                    .release();
                    return Err(e);
                }
            }
        }
        map.insert(
            start,
            Entry {
                len,
                refs: 1,
                handles,
            },
        );
        self.live.store(map.len(), Ordering::Release);
        Ok(RegHandle { start, len })
    }

    /// Drop one reference; deregisters from the plugins at zero.
    pub fn deregister(&self, h: RegHandle) -> Result<()> {
        let mut map = self.map.lock();
        let e = map
            .get_mut(&h.start)
            .filter(|e| e.len == h.len)
            .ok_or_else(|| {
                Error::invalid("deregister: handle is not registered (already deregistered?)")
            })?;
        e.refs -= 1;
        if e.refs == 0 {
            let e = map.remove(&h.start).expect("present");
            self.live.store(map.len(), Ordering::Release);
            drop(map);
            return e.release();
        }
        Ok(())
    }

    /// The handle of `plugin` for a registration containing `[ptr, ptr+len)`.
    pub fn lookup(&self, plugin: &PluginInstance, ptr: usize, len: usize) -> Option<RawMemHandle> {
        let map = self.map.lock();
        let (s, e) = map.range(..=ptr).next_back()?;
        if ptr + len > s + e.len {
            return None;
        }
        e.handles
            .iter()
            .find(|(p, _)| std::ptr::eq(&**p, plugin))
            .map(|(_, h)| *h)
    }

    /// Number of live registrations.
    pub fn count(&self) -> usize {
        self.map.lock().len()
    }

    /// True when nothing is registered (no lock taken).
    pub fn is_empty(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0
    }

    /// Deregister everything (destroy).
    pub fn clear(&self) {
        let entries: Vec<Entry> = std::mem::take(&mut *self.map.lock())
            .into_values()
            .collect();
        self.live.store(0, Ordering::Release);
        for e in entries {
            let _ = e.release();
        }
    }
}
