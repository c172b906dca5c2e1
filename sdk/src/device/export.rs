//! The receiver's cache of exported allocations: the IPC handle of every
//! allocation a receive was offered from, keyed by the allocation's address
//! range *and* identity (`CU_POINTER_ATTRIBUTE_BUFFER_ID`), so a buffer freed
//! and reallocated at the same address is never offered with its
//! predecessor's handle.
//!
//! * Registered allocations (`register`) are pinned until their last
//!   `deregister`, which revokes the handle (senders close their mappings).
//! * Unregistered ones (receives into any device buffer, e.g. p2p's
//!   `FERROCX_P2P_DIRECT=1`) are kept up to a capacity (`FERROCX_P2P_EXPORT_CACHE`),
//!   least recently used revoked first.
//! * An entry overlapping a newly seen allocation with another identity
//!   belonged to freed memory: it is dropped and revoked.
//!
//! Every revoked handle is returned to the caller, which tells the peers that
//! map it (the same-host transport's
//! [`Revocations`](crate::same_host::revoke::Revocations)).

use super::{IpcHandle, Located};
use crate::error::PluginResult;

#[derive(Debug)]
struct Entry {
    base: u64,
    size: u64,
    id: u64,
    handle: IpcHandle,
    regs: usize,
    last_use: u64,
}

/// Exported allocations of one plugin context.
#[derive(Debug)]
pub struct ExportCache {
    entries: Vec<Entry>,
    cap: usize,
    clock: u64,
    /// Where the next [`validate`](Self::validate) starts.
    cursor: usize,
}

impl ExportCache {
    /// A cache keeping at most `cap` unregistered allocations.
    pub fn new(cap: usize) -> Self {
        ExportCache {
            entries: Vec::new(),
            cap,
            clock: 0,
            cursor: 0,
        }
    }

    /// The handle of `loc`'s allocation, exported with `export(base)` on first
    /// use; `pin` counts a registration. Handles that must be withdrawn are
    /// appended to `revoked`.
    pub fn handle(
        &mut self,
        loc: &Located,
        pin: bool,
        export: impl FnOnce(u64) -> PluginResult<IpcHandle>,
        revoked: &mut Vec<IpcHandle>,
    ) -> PluginResult<IpcHandle> {
        self.clock += 1;
        let clock = self.clock;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.base == loc.base && e.id == loc.id)
        {
            e.last_use = clock;
            e.size = loc.size;
            e.regs += pin as usize;
            return Ok(e.handle);
        }
        // Anything overlapping with another identity was freed.
        let (lo, hi) = (loc.base, loc.base + loc.size);
        self.entries.retain(|e| {
            let stale = e.base < hi && lo < e.base + e.size;
            if stale {
                revoked.push(e.handle);
            }
            !stale
        });
        let handle = export(loc.base)?;
        self.entries.push(Entry {
            base: loc.base,
            size: loc.size,
            id: loc.id,
            handle,
            regs: pin as usize,
            last_use: clock,
        });
        self.evict(revoked);
        Ok(handle)
    }

    /// One registration of the allocation (`base`, `id`) ends; the last one
    /// drops and revokes it. Unknown allocations are ignored (already revoked).
    pub fn unpin(&mut self, base: u64, id: u64, revoked: &mut Vec<IpcHandle>) {
        let Some(i) = self
            .entries
            .iter()
            .position(|e| e.base == base && e.id == id)
        else {
            return;
        };
        let e = &mut self.entries[i];
        e.regs = e.regs.saturating_sub(1);
        if e.regs == 0 {
            revoked.push(e.handle);
            self.entries.swap_remove(i);
        }
    }

    /// Check up to `n` entries (round robin) with `alive(base, id)` and drop
    /// and revoke those whose allocation was freed, so a sender does not keep
    /// freed memory mapped (and alive) until its cache evicts it.
    pub fn validate(
        &mut self,
        n: usize,
        alive: impl Fn(u64, u64) -> bool,
        revoked: &mut Vec<IpcHandle>,
    ) {
        for _ in 0..n.min(self.entries.len()) {
            if self.cursor >= self.entries.len() {
                self.cursor = 0;
            }
            let e = &self.entries[self.cursor];
            if alive(e.base, e.id) {
                self.cursor += 1;
            } else {
                revoked.push(self.entries.swap_remove(self.cursor).handle);
            }
        }
    }

    fn evict(&mut self, revoked: &mut Vec<IpcHandle>) {
        loop {
            let unpinned = self.entries.iter().filter(|e| e.regs == 0).count();
            if unpinned <= self.cap {
                return;
            }
            let (i, _) = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.regs == 0)
                .min_by_key(|(_, e)| e.last_use)
                .expect("counted above");
            revoked.push(self.entries.swap_remove(i).handle);
        }
    }

    /// Allocations cached (pinned or not).
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
    use crate::PluginError;

    fn loc(base: u64, size: u64, id: u64) -> Located {
        Located {
            base,
            size,
            id,
            device: 0,
            ipc: true,
        }
    }

    fn exp(tag: u8) -> impl FnOnce(u64) -> PluginResult<IpcHandle> {
        move |_| Ok(IpcHandle([tag; 64]))
    }

    #[test]
    fn cached_by_range_and_identity() {
        let mut c = ExportCache::new(8);
        let mut rev = Vec::new();
        let h1 = c
            .handle(&loc(0x1000, 0x1000, 1), false, exp(1), &mut rev)
            .unwrap();
        let again = c
            .handle(
                &loc(0x1000, 0x1000, 1),
                false,
                |_| panic!("cached"),
                &mut rev,
            )
            .unwrap();
        assert_eq!(h1, again);
        // Freed and reallocated at the same address: new identity, old handle revoked.
        let h2 = c
            .handle(&loc(0x1000, 0x2000, 2), false, exp(2), &mut rev)
            .unwrap();
        assert_ne!(h1, h2);
        assert_eq!(rev, vec![h1]);
        assert_eq!(c.len(), 1);
        let err = c
            .handle(
                &loc(0x9000, 10, 3),
                false,
                |_| Err(PluginError::system("x")),
                &mut rev,
            )
            .unwrap_err();
        assert_eq!(err.message(), "x");
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn validation_drops_freed_allocations_round_robin() {
        let mut c = ExportCache::new(8);
        let mut rev = Vec::new();
        for i in 0..6u64 {
            c.handle(
                &loc(0x1000 * (i + 1), 0x100, i),
                false,
                exp(i as u8),
                &mut rev,
            )
            .unwrap();
        }
        let freed = |base: u64| base == 0x2000 || base == 0x5000;
        c.validate(3, |b, _| !freed(b), &mut rev);
        c.validate(3, |b, _| !freed(b), &mut rev);
        c.validate(3, |b, _| !freed(b), &mut rev);
        rev.sort_by_key(|h| h.0[0]);
        assert_eq!(rev, vec![IpcHandle([1; 64]), IpcHandle([4; 64])]);
        assert_eq!(c.len(), 4);
        let mut none = Vec::new();
        c.validate(100, |_, _| true, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn registrations_pin_and_the_last_unpin_revokes() {
        let mut c = ExportCache::new(1);
        let mut rev = Vec::new();
        let h = c
            .handle(&loc(0x1000, 0x100, 1), true, exp(1), &mut rev)
            .unwrap();
        c.handle(&loc(0x1000, 0x100, 1), true, exp(9), &mut rev)
            .unwrap();
        for (i, b) in [0x5000u64, 0x6000, 0x7000].into_iter().enumerate() {
            c.handle(
                &loc(b, 0x100, 10 + i as u64),
                false,
                exp(10 + i as u8),
                &mut rev,
            )
            .unwrap();
        }
        assert_eq!(c.len(), 2, "one pinned + one unpinned (cap 1)");
        assert_eq!(rev.len(), 2, "two unpinned evicted");
        assert!(!rev.contains(&h));
        rev.clear();
        c.unpin(0x1000, 1, &mut rev);
        assert!(rev.is_empty(), "still registered once");
        c.unpin(0x1000, 1, &mut rev);
        assert_eq!(rev, vec![h]);
        c.unpin(0x1000, 1, &mut rev);
        assert_eq!(rev, vec![h], "unknown: ignored");
        assert_eq!(c.len(), 1);
    }
}
