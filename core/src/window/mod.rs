//! Symmetric windows: a buffer every rank registers with the same size, so a
//! rank reaches a peer's byte at offset `o` as `peer_base + o`, with no
//! address exchange per operation (what the copy-engine collectives of
//! `plugins/ce` need). Registration is collective: the ranks exchange their
//! windows once over the bootstrap; device windows of peers on this host are
//! mapped here through CUDA IPC (`ferrocx_sdk::device`, opened by this
//! side), then every collective plugin is offered the window.
//!
//! Consistency across ranks matters more than anything here: a plugin decides
//! per call from what it registered, and ranks that decide differently would
//! run different implementations of one call. So every outcome that could
//! differ between ranks (a failed check, a peer that could not be mapped, a
//! plugin that declined) is exchanged and applied alike on every rank.

mod wire;

use crate::collective::Collectives;
use crate::error::{Error, Result};
use crate::shared::CommShared;
use ferrocx_sdk::abi::{FxWindowDesc, FX_MEM_CUDA, FX_MEM_HOST};
use ferrocx_sdk::device::open::Mapping;
use ferrocx_sdk::device::{Device, Driver};
use parking_lot::RwLock;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use wire::Record;

/// A registered window, as the user holds it (release with
/// [`Communicator::window_deregister`](crate::Communicator::window_deregister)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    id: u64,
    base: u64,
    bytes: usize,
}

impl Window {
    /// This rank's address of the window.
    pub fn base(&self) -> u64 {
        self.base
    }
    /// Its size in bytes (the same on every rank).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What the communicator keeps per window.
pub(crate) struct Entry {
    pub id: u64,
    pub base: u64,
    pub bytes: usize,
    pub mem: i32,
    /// Per collective plugin (same index as the communicator's list): its
    /// handle, `None` where it declined on some rank.
    pub handles: Vec<Option<usize>>,
    /// Handles to give back at deregistration (also those not usable by all).
    owned: Vec<Option<usize>>,
    /// Rank r's window mapped into this process (0 where not mapped).
    pub peer_bases: Vec<u64>,
    /// Rank r's window address in its own process.
    pub peer_addrs: Vec<u64>,
    /// Device-networking plugins holding the window (the window may not go
    /// before they let go of it: their threads copy into it).
    pub devnet_holders: AtomicUsize,
    _mappings: Vec<Arc<Mapping>>,
}

/// The communicator's windows.
#[derive(Default)]
pub(crate) struct WindowTable {
    list: RwLock<Vec<Arc<Entry>>>,
    /// `list.len()`, read on every call without taking the lock.
    count: AtomicUsize,
    next: AtomicU64,
}

/// This rank's side of a registration, checked locally.
pub(crate) struct Local {
    pub base: u64,
    pub bytes: usize,
    pub mem: i32,
    /// For device memory: the device, the allocation's IPC handle and the
    /// window's offset in the allocation.
    pub device: Option<(Arc<dyn Device>, ferrocx_sdk::device::IpcHandle, u64)>,
}

impl Local {
    /// A host buffer.
    pub fn host(base: u64, bytes: usize) -> Self {
        Local {
            base,
            bytes,
            mem: FX_MEM_HOST,
            device: None,
        }
    }

    /// A device buffer of `ordinal`: exported for the peers.
    pub fn device(ordinal: i32, base: u64, bytes: usize) -> Result<Self> {
        let drv = ferrocx_sdk::device::cuda::CudaDriver;
        let dev = drv.device(ordinal).map_err(Error::cuda)?;
        let _bound = dev.bind().map_err(Error::cuda)?;
        let at = drv.locate(base).ok_or_else(|| {
            Error::invalid(format!(
                "window_register: {base:#x} is not CUDA device memory"
            ))
        })?;
        if !at.covers(base, bytes) {
            return Err(Error::invalid(format!(
                "window_register: {bytes} bytes at {base:#x} run past the end of its allocation ({} bytes at {:#x})",
                at.size, at.base
            )));
        }
        if !at.ipc {
            return Err(Error::Unsupported(format!(
                "window_register: the allocation at {:#x} cannot be shared through CUDA IPC (cuMemCreate or managed memory); allocate it with cuMemAlloc",
                at.base
            )));
        }
        let handle = dev.export(at.base).map_err(Error::cuda)?;
        Ok(Local {
            base,
            bytes,
            mem: FX_MEM_CUDA,
            device: Some((dev, handle, base - at.base)),
        })
    }
}

fn kind_name(mem: i32) -> &'static str {
    if mem == FX_MEM_CUDA {
        "device"
    } else {
        "host"
    }
}

impl WindowTable {
    /// Register a window on every rank (collective). `local` is this rank's
    /// checked buffer, or why it failed: the ranks exchange outcomes first, so
    /// a failure on one rank is an error on every rank, naming it.
    pub(crate) fn register(
        &self,
        shared: &Arc<CommShared>,
        colls: &Collectives,
        local: Result<Local>,
    ) -> Result<Window> {
        let (n, me) = (shared.nranks, shared.rank);
        let mine = match &local {
            Ok(l) => Record {
                ok: true,
                mem: l.mem,
                bytes: l.bytes as u64,
                addr: l.base,
                offset: l.device.as_ref().map_or(0, |d| d.2),
                handle: l.device.as_ref().map_or([0; 64], |d| d.1 .0),
            },
            Err(_) => Record::failed(),
        };
        let all: Vec<Record> = shared
            .bootstrap
            .all_gather(&mine.encode())?
            .iter()
            .map(|b| Record::decode(b))
            .collect::<Result<_>>()?;
        let local = local?;
        let failed: Vec<usize> = (0..n).filter(|&r| !all[r].ok).collect();
        if !failed.is_empty() {
            return Err(Error::invalid(format!(
                "window_register: rank(s) {failed:?} could not register their buffer (see their errors)"
            )));
        }
        if let Some(r) = (0..n).find(|&r| all[r].bytes != all[0].bytes || all[r].mem != all[0].mem)
        {
            let list = all
                .iter()
                .enumerate()
                .map(|(r, x)| format!("rank {r}: {} B {}", x.bytes, kind_name(x.mem)))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Error::invalid(format!(
                "window_register: a window is symmetric, every rank must register the same size and memory kind, but rank {r} differs from rank 0 ({list})"
            )));
        }

        // Map the peers' device windows that live on this host.
        let mut peer_bases = vec![0u64; n];
        peer_bases[me] = local.base;
        let mut mappings = Vec::new();
        let mut map_failure: Option<String> = None;
        if let Some((dev, _, _)) = &local.device {
            let _bound = dev.bind().map_err(Error::cuda)?;
            let host = shared.peer_info[me].host_hash;
            for r in (0..n).filter(|&r| r != me && shared.peer_info[r].host_hash == host) {
                let h = ferrocx_sdk::device::IpcHandle(all[r].handle);
                match Mapping::open(dev, &h) {
                    Ok(m) => {
                        peer_bases[r] = m.addr() + all[r].offset;
                        mappings.push(m);
                    }
                    Err(e) => {
                        map_failure.get_or_insert(format!("rank {r}: {}", e.message()));
                    }
                }
            }
        }
        // Peers mapped alike everywhere, or nowhere.
        let mapped_all = shared
            .bootstrap
            .all_gather(&[map_failure.is_none() as u8])?;
        if mapped_all.iter().any(|v| v.first() != Some(&1)) {
            if let Some(why) = &map_failure {
                tracing::warn!(target: "ferrocx::window", "window peers not mapped ({why}); the window is used by address only");
            }
            mappings.clear();
            for (r, b) in peer_bases.iter_mut().enumerate() {
                if r != me {
                    *b = 0;
                }
            }
        }

        let peer_addrs: Vec<u64> = all.iter().map(|x| x.addr).collect();
        let ptrs: Vec<*mut c_void> = peer_bases.iter().map(|&b| b as *mut c_void).collect();
        let desc = FxWindowDesc {
            base: local.base as *mut c_void,
            bytes: local.bytes as u64,
            mem_kind: local.mem,
            reserved: 0,
            peer_bases: ptrs.as_ptr(),
            peer_addrs: peer_addrs.as_ptr(),
        };
        let mut owned = Vec::with_capacity(colls.plugins().len());
        for p in colls.plugins() {
            owned.push(match p.window_register(&desc) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(target: "ferrocx::window", "{e}: the window is not used by '{}'", p.name());
                    None
                }
            });
        }
        // A plugin uses the window only where every rank's registration gave a handle.
        let bits: Vec<u8> = owned.iter().map(|h| h.is_some() as u8).collect();
        let every = shared.bootstrap.all_gather(&bits)?;
        let handles = owned
            .iter()
            .enumerate()
            .map(|(i, h)| h.filter(|_| every.iter().all(|v| v.get(i) == Some(&1))))
            .collect();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let e = Arc::new(Entry {
            id,
            base: local.base,
            bytes: local.bytes,
            mem: local.mem,
            handles,
            owned,
            peer_bases,
            peer_addrs,
            devnet_holders: AtomicUsize::new(0),
            _mappings: mappings,
        });
        tracing::debug!(target: "ferrocx::window", "window #{id}: {} B of {} memory at {:#x}", e.bytes, kind_name(e.mem), e.base);
        {
            let mut list = self.list.write();
            list.push(e);
            self.count.store(list.len(), Ordering::Release);
        }
        Ok(Window {
            id,
            base: local.base,
            bytes: local.bytes,
        })
    }

    /// Release a window on every rank (collective): the plugins let go, the
    /// peers' mappings close, and a barrier makes sure no rank still maps this
    /// rank's memory when the call returns.
    pub(crate) fn deregister(
        &self,
        shared: &Arc<CommShared>,
        colls: &Collectives,
        w: Window,
    ) -> Result<()> {
        let e = {
            let mut list = self.list.write();
            let i = list.iter().position(|e| e.id == w.id).ok_or_else(|| {
                Error::invalid(format!(
                    "window_deregister: window at {:#x} ({} B) is not registered (deregistered already?)",
                    w.base, w.bytes
                ))
            })?;
            // Registered alike on every rank, so refused alike: no rank waits
            // in the barrier below for one that refused.
            let holders = list[i].devnet_holders.load(Ordering::Acquire);
            if holders > 0 {
                return Err(Error::invalid(format!(
                    "window_deregister: window at {:#x} ({} B) is still registered with {holders} device-networking plugin(s); deregister it there first (DevNet::window_deregister)",
                    w.base, w.bytes
                )));
            }
            let e = list.remove(i);
            self.count.store(list.len(), Ordering::Release);
            e
        };
        let first = Self::release(&e, colls);
        drop(e); // closes the mappings (the last Arc: lookups hold theirs only during a call)
        shared.bootstrap.barrier()?;
        first
    }

    fn release(e: &Entry, colls: &Collectives) -> Result<()> {
        let mut first = Ok(());
        for (p, h) in colls.plugins().iter().zip(&e.owned) {
            if let Some(h) = h {
                if let Err(err) = p.window_deregister(*h) {
                    tracing::warn!(target: "ferrocx::window", "{err}");
                    if first.is_ok() {
                        first = Err(err);
                    }
                }
            }
        }
        first
    }

    /// Release every window (at destroy: no barrier, peers are going too).
    pub(crate) fn clear(&self, colls: &Collectives) {
        let all = std::mem::take(&mut *self.list.write());
        self.count.store(0, Ordering::Release);
        for e in all {
            let _ = Self::release(&e, colls);
        }
    }

    /// The window holding `ptr..ptr+len`, and the offset of `ptr` in it.
    pub(crate) fn lookup(&self, ptr: u64, len: usize) -> Option<(Arc<Entry>, u64)> {
        if ptr == 0 {
            return None;
        }
        self.list
            .read()
            .iter()
            .find(|e| ptr >= e.base && ptr - e.base + len as u64 <= e.bytes as u64)
            .map(|e| (e.clone(), ptr - e.base))
    }

    /// The entry of a registered window.
    pub(crate) fn entry(&self, w: &Window) -> Option<Arc<Entry>> {
        self.list.read().iter().find(|e| e.id == w.id).cloned()
    }

    /// Windows registered now (leak checks).
    pub(crate) fn count(&self) -> usize {
        self.list.read().len()
    }

    /// Whether any window is registered (the per-call fast path).
    pub(crate) fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }
}
