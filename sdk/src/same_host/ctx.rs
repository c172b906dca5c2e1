//! State shared by a plugin context and all of its connections: the back
//! end, the revocation log and the receiving connections that forward it,
//! and FIFOs whose sender has not let go of them yet.

use super::backend::{Backend, FifoPlace};
use super::layout::STATE_OPEN;
use super::revoke::{Forwarder, Revocations};
use super::segment::Segment;
use super::stats::CtxStats;
use crate::proc::pid_alive;
use crate::Host;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Longest wait at `finalize` for senders to let go of FIFOs.
const FINALIZE_WAIT: Duration = Duration::from_secs(5);

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

/// Whether the sender of `seg` closed its end (and so every mapping of the
/// receiver's memory) or exited.
pub fn sender_gone<T: super::regslot::WriteTarget>(seg: &Segment<T>, sender_pid: i32) -> bool {
    match seg.peer_holds(false) {
        Some(held) => !held,
        None => {
            let state = seg.header().info.0.sender_state.load(Ordering::Acquire);
            state != STATE_OPEN || !pid_alive(sender_pid)
        }
    }
}

/// A freed receiving connection's FIFO, kept until its sender let go of it
/// (freeing device memory another process still maps is undefined behaviour
/// in CUDA IPC).
struct Grave<B: Backend> {
    dev: B::Device,
    fifo: u64,
    /// Kept mapped to watch the sender's lock.
    seg: Segment<B::Target>,
    sender_pid: i32,
}

/// One plugin context's shared state.
pub struct Ctx<B: Backend> {
    /// The core's services.
    pub host: Host,
    /// The copy back end.
    pub backend: B,
    /// [`process_token`].
    pub token: u64,
    /// Handles withdrawn by the receiving side, for the senders to close.
    pub revocations: Revocations,
    recv_conns: Mutex<Vec<Weak<dyn Forwarder>>>,
    graveyard: Mutex<Vec<Grave<B>>>,
    fallback_logged: AtomicBool,
}

impl<B: Backend> Ctx<B> {
    /// A context over `host` with `backend`.
    pub fn new(host: Host, backend: B) -> Self {
        Ctx {
            host,
            backend,
            token: process_token(),
            revocations: Revocations::default(),
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

    /// Remember a receiving connection (it forwards revocations).
    pub fn add_receiver(&self, c: Weak<dyn Forwarder>) {
        if !B::REVOCATIONS {
            return;
        }
        let mut v = lock(&self.recv_conns);
        v.retain(|w| w.strong_count() > 0);
        v.push(c);
    }

    /// Forward pending revocations into every receiving connection's segment now.
    pub fn forward_all(&self) {
        let conns: Vec<_> = lock(&self.recv_conns)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for c in conns {
            // No context lock is held here (lock order: connection, then context).
            c.forward_revocations();
        }
    }

    /// Keep `fifo` until the sender of `seg` lets go of it.
    pub fn bury(&self, dev: B::Device, fifo: u64, seg: Segment<B::Target>, sender_pid: i32) {
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
        if B::FIFO != FifoPlace::Allocated {
            return;
        }
        let done: Vec<Grave<B>> = {
            let mut g = lock(&self.graveyard);
            let (gone, keep): (Vec<_>, Vec<_>) = g
                .drain(..)
                .partition(|x| all || sender_gone(&x.seg, x.sender_pid));
            *g = keep;
            gone
        };
        for x in done {
            if !sender_gone(&x.seg, x.sender_pid) {
                self.host.debug(format!(
                    "{}: freeing a FIFO whose sender (pid {}) still maps it, at finalize",
                    B::NAME,
                    x.sender_pid
                ));
            }
            if let Ok(_bound) = B::bind(&x.dev) {
                B::free_fifo(&x.dev, x.fifo);
            }
        }
    }

    /// At `finalize`: give senders a bounded time to let go of buried FIFOs
    /// (they are freeing their ends concurrently), then free what is left.
    pub fn reap_at_finalize(&self) {
        let limit = self.host.timeout().min(FINALIZE_WAIT);
        let start = Instant::now();
        loop {
            self.reap(false);
            if lock(&self.graveyard).is_empty() || start.elapsed() >= limit || self.host.aborted() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.reap(true);
    }

    /// What the context holds.
    pub fn stats(&self) -> CtxStats {
        let (exports, open_handles) = self.backend.holdings();
        CtxStats {
            exports,
            open_handles,
            recv_conns: lock(&self.recv_conns)
                .iter()
                .filter(|w| w.strong_count() > 0)
                .count(),
            graveyard: lock(&self.graveyard).len(),
        }
    }
}
