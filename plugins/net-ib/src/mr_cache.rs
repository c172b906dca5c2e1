//! Memory registration cache, one per device (protection domain).
//!
//! Registrations cover page-aligned ranges and are found by address: a transfer inside
//! a range the user registered (`comm.register`) reuses that MR. A request for a range
//! that overlaps existing entries registers the **union** (one MR, so a buffer that
//! grew is not split over keys) and retires the overlapped entries once nobody uses
//! them. Each entry counts its users: explicit registrations (until `deregister`) and
//! transfers in flight. An entry nobody uses is deregistered at once, unless
//! `FERROCX_IB_REG_CACHE` asks to keep up to N of them (least recently used evicted
//! first): only safe when the application never frees memory and maps other memory at
//! the same address while ferrocx runs (a cached MR pins the old pages; there are no
//! memory hooks to invalidate it), which holds for caching allocators.
//!
//! The registering itself is behind [`Registrar`], so the cache is tested with a fake.
//! GPU memory: [`Registrar::register_dmabuf`] is the hook for dma-buf MRs
//! (`ibv_reg_dmabuf_mr` on an fd exported by the CUDA driver); nothing calls it yet.

use ferrocx_sdk::{PluginError, PluginResult};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Registers memory with one device. `Mr` deregisters when dropped.
pub trait Registrar: Send + Sync {
    /// A registration.
    type Mr: Send + Sync;
    /// Register `[addr, addr+len)` of host memory for local write, remote write and read.
    ///
    /// # Safety
    /// The range must be mapped memory of this process (it is pinned until the MR drops).
    unsafe fn register(&self, addr: usize, len: usize) -> PluginResult<Self::Mr>;
    /// Register `len` bytes at `offset` of a dma-buf (GPU memory exported by its driver),
    /// mapped at `iova` in this process. Not implemented by any registrar yet.
    fn register_dmabuf(
        &self,
        _fd: i32,
        _offset: u64,
        _len: usize,
        _iova: u64,
    ) -> PluginResult<Self::Mr> {
        Err(PluginError::unsupported(
            "net-ib: dma-buf registration (GPU memory) is not implemented yet",
        ))
    }
}

/// Who holds a use of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// An explicit registration (`register` … `deregister`).
    Explicit,
    /// One transfer in flight.
    Transfer,
}

struct Entry<M> {
    start: usize,
    end: usize,
    mr: Arc<M>,
    explicit: u32,
    transfers: u32,
    last_use: u64,
    /// Superseded by a larger entry: found by id only, never by address.
    retired: bool,
}

impl<M> Entry<M> {
    fn idle(&self) -> bool {
        self.explicit == 0 && self.transfers == 0
    }
}

/// A use of a cached registration; give it back with [`MrCache::release`].
#[derive(Debug)]
pub struct Lease<M> {
    /// Entry id.
    pub id: u64,
    /// The registration.
    pub mr: Arc<M>,
    /// Its registered range.
    pub start: usize,
    /// End of the range (exclusive).
    pub end: usize,
    /// Which count this lease holds.
    pub kind: Use,
}

struct Inner<M> {
    entries: BTreeMap<u64, Entry<M>>,
    next_id: u64,
    clock: u64,
}

/// Numbers for tests and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Entries alive (used or kept).
    pub entries: usize,
    /// Of which nobody uses.
    pub idle: usize,
    /// Registrations made so far.
    pub registered: u64,
}

/// The cache. See the module documentation.
pub struct MrCache<R: Registrar> {
    reg: R,
    keep_idle: usize,
    page: usize,
    inner: Mutex<Inner<R::Mr>>,
    registered: std::sync::atomic::AtomicU64,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl<R: Registrar> MrCache<R> {
    /// A cache over `reg` keeping at most `keep_idle` unused registrations.
    pub fn new(reg: R, keep_idle: usize) -> Self {
        Self::with_page(reg, keep_idle, page_size())
    }

    /// Same with an explicit page size (tests).
    pub fn with_page(reg: R, keep_idle: usize, page: usize) -> Self {
        MrCache {
            reg,
            keep_idle,
            page,
            inner: Mutex::new(Inner {
                entries: BTreeMap::new(),
                next_id: 1,
                clock: 0,
            }),
            registered: 0.into(),
        }
    }

    /// The registrar.
    pub fn registrar(&self) -> &R {
        &self.reg
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<R::Mr>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A registration covering `[addr, addr+len)`, made if needed.
    ///
    /// # Safety
    /// The range must be mapped memory of this process and stay so while the lease (and,
    /// for kept idle entries, the cache) exists.
    pub unsafe fn acquire(&self, addr: usize, len: usize, kind: Use) -> PluginResult<Lease<R::Mr>> {
        if len == 0 {
            return Err(PluginError::invalid("net-ib: cannot register 0 bytes"));
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| PluginError::invalid("net-ib: registration range overflows"))?;
        let start = addr - addr % self.page;
        let end = end.next_multiple_of(self.page);
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        // Smallest live entry covering the range.
        let hit = g
            .entries
            .iter()
            .filter(|(_, e)| !e.retired && e.start <= start && e.end >= end)
            .min_by_key(|(_, e)| e.end - e.start)
            .map(|(&id, _)| id);
        if let Some(id) = hit {
            let e = g.entries.get_mut(&id).expect("hit exists");
            match kind {
                Use::Explicit => e.explicit += 1,
                Use::Transfer => e.transfers += 1,
            }
            e.last_use = now;
            return Ok(Lease {
                id,
                mr: e.mr.clone(),
                start: e.start,
                end: e.end,
                kind,
            });
        }
        // Union with every live entry it overlaps (or touches).
        let (mut lo, mut hi) = (start, end);
        let overlapped: Vec<u64> = g
            .entries
            .iter()
            .filter(|(_, e)| !e.retired && e.start <= end && e.end >= start)
            .map(|(&id, _)| id)
            .collect();
        for id in &overlapped {
            let e = &g.entries[id];
            lo = lo.min(e.start);
            hi = hi.max(e.end);
        }
        // SAFETY: the caller guarantees the new range; the parts added from overlapped
        // entries were registered before and are still mapped under the same contract.
        let mr = Arc::new(self.reg.register(lo, hi - lo)?);
        self.registered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for id in overlapped {
            let e = g.entries.get_mut(&id).expect("overlapped exists");
            e.retired = true;
            if e.idle() {
                g.entries.remove(&id);
            }
        }
        let id = g.next_id;
        g.next_id += 1;
        let (explicit, transfers) = match kind {
            Use::Explicit => (1, 0),
            Use::Transfer => (0, 1),
        };
        g.entries.insert(
            id,
            Entry {
                start: lo,
                end: hi,
                mr: mr.clone(),
                explicit,
                transfers,
                last_use: now,
                retired: false,
            },
        );
        Ok(Lease {
            id,
            mr,
            start: lo,
            end: hi,
            kind,
        })
    }

    /// Give a lease back. The entry is deregistered when nobody uses it, unless it is
    /// kept (then the least recently used kept entries beyond the limit go).
    pub fn release(&self, lease: Lease<R::Mr>) {
        let mut g = self.lock();
        let Some(e) = g.entries.get_mut(&lease.id) else {
            return;
        };
        match lease.kind {
            Use::Explicit => e.explicit = e.explicit.saturating_sub(1),
            Use::Transfer => e.transfers = e.transfers.saturating_sub(1),
        }
        if !e.idle() {
            return;
        }
        if e.retired || self.keep_idle == 0 {
            g.entries.remove(&lease.id);
            return;
        }
        let mut idle: Vec<(u64, u64)> = g
            .entries
            .iter()
            .filter(|(_, e)| e.idle())
            .map(|(&id, e)| (e.last_use, id))
            .collect();
        if idle.len() > self.keep_idle {
            idle.sort_unstable();
            for &(_, id) in &idle[..idle.len() - self.keep_idle] {
                g.entries.remove(&id);
            }
        }
    }

    /// Drop every idle entry (e.g. before the device closes).
    pub fn flush(&self) {
        self.lock().entries.retain(|_, e| !e.idle());
    }

    /// Current numbers.
    pub fn stats(&self) -> Stats {
        let g = self.lock();
        Stats {
            entries: g.entries.len(),
            idle: g.entries.values().filter(|e| e.idle()).count(),
            registered: self.registered.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records live registrations; a registration deregisters when dropped.
    #[derive(Default)]
    struct Fake {
        live: Arc<Mutex<Vec<(usize, usize)>>>,
        fail_next: AtomicUsize,
    }

    #[derive(Debug)]
    struct FakeMr {
        range: (usize, usize),
        live: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl Drop for FakeMr {
        fn drop(&mut self) {
            let mut l = self.live.lock().unwrap();
            let i = l.iter().position(|r| *r == self.range).unwrap();
            l.remove(i);
        }
    }

    impl Registrar for Fake {
        type Mr = FakeMr;
        unsafe fn register(&self, addr: usize, len: usize) -> PluginResult<FakeMr> {
            if self.fail_next.swap(0, Ordering::Relaxed) == 1 {
                return Err(PluginError::new(4, "ibv_reg_mr: Cannot allocate memory"));
            }
            self.live.lock().unwrap().push((addr, addr + len));
            Ok(FakeMr {
                range: (addr, addr + len),
                live: self.live.clone(),
            })
        }
    }

    const P: usize = 0x1000;
    type Live = Arc<Mutex<Vec<(usize, usize)>>>;

    fn cache(keep: usize) -> (MrCache<Fake>, Live) {
        let f = Fake::default();
        let live = f.live.clone();
        (MrCache::with_page(f, keep, P), live)
    }

    fn acquire(
        c: &MrCache<Fake>,
        addr: usize,
        len: usize,
        kind: Use,
    ) -> PluginResult<Lease<FakeMr>> {
        // SAFETY: the fake registrar only records ranges; nothing is touched.
        unsafe { c.acquire(addr, len, kind) }
    }

    fn live(l: &Live) -> Vec<(usize, usize)> {
        let mut v = l.lock().unwrap().clone();
        v.sort();
        v
    }

    #[test]
    fn ranges_are_page_aligned_and_reused_inside() {
        let (c, l) = cache(0);
        let a = acquire(&c, 10 * P + 5, 3 * P, Use::Explicit).unwrap();
        assert_eq!((a.start, a.end), (10 * P, 14 * P));
        // A transfer inside the registered range reuses it.
        let t = acquire(&c, 11 * P, 100, Use::Transfer).unwrap();
        assert_eq!(t.id, a.id);
        assert!(Arc::ptr_eq(&t.mr, &a.mr));
        assert_eq!(c.stats().registered, 1);
        c.release(t);
        assert_eq!(live(&l), [(10 * P, 14 * P)], "still explicitly registered");
        c.release(a);
        assert!(live(&l).is_empty(), "deregistered when nobody uses it");
        assert_eq!(
            c.stats(),
            Stats {
                entries: 0,
                idle: 0,
                registered: 1
            }
        );
    }

    #[test]
    fn overlapping_ranges_register_the_union() {
        let (c, l) = cache(0);
        let a = acquire(&c, 0, 4 * P, Use::Explicit).unwrap();
        let b = acquire(&c, 8 * P, 2 * P, Use::Explicit).unwrap();
        // Overlaps a's tail and b's head: one MR over [0, 10P).
        let u = acquire(&c, 3 * P, 6 * P, Use::Transfer).unwrap();
        assert_eq!((u.start, u.end), (0, 10 * P));
        assert_eq!(live(&l), [(0, 4 * P), (0, 10 * P), (8 * P, 10 * P)]);
        // New lookups find the union, not the retired parts.
        let t = acquire(&c, P, 10, Use::Transfer).unwrap();
        assert_eq!(t.id, u.id);
        c.release(t);
        // Retired entries go as soon as their holders release them.
        c.release(a);
        c.release(b);
        assert_eq!(live(&l), [(0, 10 * P)]);
        c.release(u);
        assert!(live(&l).is_empty());
        // Touching ranges merge too.
        let x = acquire(&c, 0, P, Use::Explicit).unwrap();
        let y = acquire(&c, P, P, Use::Explicit).unwrap();
        assert_eq!((y.start, y.end), (0, 2 * P));
        c.release(x);
        c.release(y);
        assert!(live(&l).is_empty());
    }

    #[test]
    fn idle_entries_kept_up_to_the_limit_lru_first_out() {
        let (c, l) = cache(2);
        let mut leases: Vec<_> = (0..4)
            .map(|i| acquire(&c, i * 10 * P, P, Use::Transfer).unwrap())
            .collect();
        // Touch entry 0 again so that it is the most recently used.
        let again = acquire(&c, 0, P, Use::Transfer).unwrap();
        leases.push(again);
        for lease in leases {
            c.release(lease);
        }
        // Kept: the two most recently used (entry 0 and entry 3).
        assert_eq!(live(&l), [(0, P), (30 * P, 31 * P)]);
        assert_eq!(
            c.stats(),
            Stats {
                entries: 2,
                idle: 2,
                registered: 4
            }
        );
        // A hit on a kept entry registers nothing new.
        let t = acquire(&c, 30 * P + 7, 9, Use::Transfer).unwrap();
        assert_eq!(c.stats().registered, 4);
        c.release(t);
        c.flush();
        assert!(live(&l).is_empty());
    }

    #[test]
    fn busy_entries_are_never_evicted() {
        let (c, l) = cache(1);
        let busy = acquire(&c, 0, P, Use::Explicit).unwrap();
        for i in 1..5 {
            let t = acquire(&c, i * 10 * P, P, Use::Transfer).unwrap();
            c.release(t);
        }
        assert_eq!(live(&l), [(0, P), (40 * P, 41 * P)]);
        c.flush();
        assert_eq!(live(&l), [(0, P)], "flush keeps what is in use");
        c.release(busy);
        c.flush();
        assert!(live(&l).is_empty());
    }

    #[test]
    fn failures_and_bad_ranges_leave_nothing_behind() {
        let (c, l) = cache(4);
        c.registrar().fail_next.store(1, Ordering::Relaxed);
        let e = acquire(&c, 0, P, Use::Explicit).unwrap_err();
        assert!(e.message().contains("ibv_reg_mr"), "{e}");
        assert!(acquire(&c, 0, 0, Use::Transfer).is_err());
        assert!(acquire(&c, usize::MAX - 3, 8, Use::Transfer).is_err());
        assert_eq!(c.stats().entries, 0);
        assert!(live(&l).is_empty());
        let e = c.registrar().register_dmabuf(3, 0, P, 0).err().unwrap();
        assert!(e.message().contains("not implemented"), "{e}");
    }
}
