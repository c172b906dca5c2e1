//! State shared by a plugin context and all of its connections: the backend,
//! the export cache and revocation log, the receiving connections (to forward
//! revocations to), and FIFOs whose sender has not let go of them yet.

use crate::backend::{Backend, Device, IpcHandle, Located};
use crate::config::Config;
use crate::conn::ConnCore;
use crate::export::ExportCache;
use crate::proc::pid_alive;
use crate::revoke::{Pending, RevokeLog};
use crate::segment::{Segment, SENDER_BYTE};
use crate::stats::CtxStats;
use ferrocx_sdk::{Host, PluginResult};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

/// Revocations kept for receiving connections that have not forwarded them yet.
const REVOKE_LOG: usize = 1024;

/// Longest wait at `finalize` for senders to let go of FIFOs.
const FINALIZE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Export-cache entries checked for freed allocations on every export.
const VALIDATE_PER_EXPORT: usize = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A random value fixed for the life of this process: two ends that carry
/// the same one are in the same process.
pub fn process_token() -> u64 {
    static TOKEN: OnceLock<u64> = OnceLock::new();
    *TOKEN.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        h.write_u128(now.map_or(0, |d| d.as_nanos()));
        h.write_u32(std::process::id());
        h.finish() | 1
    })
}

/// A freed receiving connection's FIFO, kept until its sender let go of it
/// (freeing device memory another process still maps is undefined behaviour
/// in CUDA IPC).
struct Grave {
    dev: Arc<dyn Device>,
    fifo: u64,
    /// Kept mapped to watch the sender's lock.
    seg: Segment,
    sender_pid: i32,
}

impl Grave {
    fn sender_gone(&self) -> bool {
        sender_gone(&self.seg, self.sender_pid)
    }
}

/// Whether the sender of `seg` closed its end (and so every mapping of the
/// receiver's memory) or exited.
pub fn sender_gone(seg: &Segment, sender_pid: i32) -> bool {
    match seg.region().lock_held(SENDER_BYTE) {
        Some(held) => !held,
        None => {
            let state = seg.header().info.0.sender_state.load(Ordering::Acquire);
            state != crate::layout::STATE_OPEN || !pid_alive(sender_pid)
        }
    }
}

/// One plugin context's shared state.
pub struct Ctx {
    /// The core's services.
    pub host: Host,
    /// Effective configuration.
    pub cfg: Config,
    /// CUDA, or the stand-in.
    pub backend: Arc<dyn Backend>,
    /// [`process_token`].
    pub token: u64,
    exports: Mutex<ExportCache>,
    revokes: Mutex<RevokeLog>,
    /// The log's cursor, readable without the lock.
    revoke_gen: AtomicU64,
    recv_conns: Mutex<Vec<Weak<Mutex<ConnCore>>>>,
    graveyard: Mutex<Vec<Grave>>,
    fallback_logged: AtomicBool,
}

impl Ctx {
    /// A context over `host` with `cfg` and `backend`.
    pub fn new(host: Host, cfg: Config, backend: Arc<dyn Backend>) -> Self {
        Ctx {
            host,
            exports: Mutex::new(ExportCache::new(cfg.export_cache)),
            cfg,
            backend,
            token: process_token(),
            revokes: Mutex::new(RevokeLog::new(REVOKE_LOG)),
            revoke_gen: AtomicU64::new(0),
            recv_conns: Mutex::new(Vec::new()),
            graveyard: Mutex::new(Vec::new()),
            fallback_logged: AtomicBool::new(false),
        }
    }

    /// Log a fall-back to the FIFO: at info the first time in this context, then at debug.
    pub fn log_fallback(&self, msg: &str) {
        if self.fallback_logged.swap(true, Ordering::Relaxed) {
            self.host.debug(msg);
        } else {
            self.host.info(msg);
        }
    }

    /// The IPC handle of `loc`'s allocation (exported on first use; `pin`
    /// counts a registration). The caller bound a context of `dev`.
    pub fn export(&self, dev: &dyn Device, loc: &Located, pin: bool) -> PluginResult<IpcHandle> {
        let mut revoked = Vec::new();
        let r = {
            let mut cache = lock(&self.exports);
            // Notice a few freed allocations on every export, so senders let go of them soon.
            let b = &self.backend;
            cache.validate(
                VALIDATE_PER_EXPORT,
                |base, id| b.locate(base).is_some_and(|l| l.base == base && l.id == id),
                &mut revoked,
            );
            cache.handle(loc, pin, |base| dev.export(base), &mut revoked)
        };
        self.revoke(revoked);
        r
    }

    /// A registration of (`base`, `id`) ended.
    pub fn unpin(&self, base: u64, id: u64) {
        let mut revoked = Vec::new();
        lock(&self.exports).unpin(base, id, &mut revoked);
        let any = !revoked.is_empty();
        self.revoke(revoked);
        if any {
            self.forward_all();
        }
    }

    fn revoke(&self, handles: Vec<IpcHandle>) {
        if handles.is_empty() {
            return;
        }
        let mut log = lock(&self.revokes);
        for h in handles {
            log.push(h);
        }
        self.revoke_gen.store(log.cursor(), Ordering::Release);
    }

    /// The revocation log's cursor (what a new receiving connection starts from).
    pub fn revoke_cursor(&self) -> u64 {
        self.revoke_gen.load(Ordering::Acquire)
    }

    /// Revocations after `cursor` (cheap when there are none).
    pub fn revocations_since(&self, cursor: u64) -> Pending {
        if self.revoke_gen.load(Ordering::Acquire) == cursor {
            return Pending::Nothing;
        }
        lock(&self.revokes).since(cursor)
    }

    /// Remember a receiving connection (it forwards revocations).
    pub fn add_receiver(&self, c: &Arc<Mutex<ConnCore>>) {
        let mut v = lock(&self.recv_conns);
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(c));
    }

    /// Forward pending revocations into every receiving connection's segment now.
    fn forward_all(&self) {
        let conns: Vec<_> = lock(&self.recv_conns)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for c in conns {
            // No context lock is held here (lock order: connection, then context).
            c.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forward_revocations();
        }
    }

    /// Keep `fifo` until the sender of `seg` lets go of it.
    pub fn bury(&self, dev: Arc<dyn Device>, fifo: u64, seg: Segment, sender_pid: i32) {
        lock(&self.graveyard).push(Grave {
            dev,
            fifo,
            seg,
            sender_pid,
        });
        self.reap(false);
    }

    /// Free buried FIFOs whose sender is gone (all of them with `all`).
    pub fn reap(&self, all: bool) {
        let done: Vec<Grave> = {
            let mut g = lock(&self.graveyard);
            let (gone, keep): (Vec<_>, Vec<_>) = g.drain(..).partition(|x| all || x.sender_gone());
            *g = keep;
            gone
        };
        for x in done {
            if !x.sender_gone() {
                self.host.debug(format!(
                    "p2p: freeing a FIFO whose sender (pid {}) still maps it, at finalize",
                    x.sender_pid
                ));
            }
            if let Ok(_bound) = x.dev.bind() {
                x.dev.free(x.fifo);
            }
        }
    }

    /// At `finalize`: give senders a bounded time to let go of buried FIFOs
    /// (they are freeing their ends concurrently), then free what is left.
    pub fn reap_at_finalize(&self) {
        let limit = self.host.timeout().min(FINALIZE_WAIT);
        let start = std::time::Instant::now();
        loop {
            self.reap(false);
            if lock(&self.graveyard).is_empty() || start.elapsed() >= limit || self.host.aborted() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.reap(true);
    }

    /// What the context holds.
    pub fn stats(&self) -> CtxStats {
        CtxStats {
            exports: lock(&self.exports).len(),
            open_handles: self.backend.open_handles(),
            recv_conns: lock(&self.recv_conns)
                .iter()
                .filter(|w| w.strong_count() > 0)
                .count(),
            graveyard: lock(&self.graveyard).len(),
        }
    }
}
