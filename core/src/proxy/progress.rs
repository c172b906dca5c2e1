//! The progress thread: advances in-flight operations while no caller is
//! driving them, spinning briefly then backing off to sleeps, and parking on
//! a condition variable when nothing is in flight.

use crate::error::{Error, Result};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the progress thread drives.
pub trait Progress: Send + Sync + 'static {
    /// Park until there is work or shutdown; returns false on shutdown.
    fn wait_for_work(&self) -> bool;
    /// One pass over in-flight work; returns whether anything moved.
    fn sweep(&self) -> bool;
}

/// Backoff after `idle` consecutive sweeps that moved nothing: spin, then
/// yield, then short sleeps (at most 100 µs: ops are in flight, so a long
/// sleep would show up as latency) so idle ranks leave the cores to others —
/// or keep yielding, with `FERROCX_PROGRESS_NAP=yield` (see [`Nap`]).
/// With nothing in flight the thread parks instead (see [`Progress::wait_for_work`]).
pub fn backoff(idle: u32) {
    if idle < 64 {
        std::hint::spin_loop();
    } else if idle < 256 || nap() == Nap::Yield {
        std::thread::yield_now();
    } else {
        let us = 1u64 << ((idle - 256) / 32).min(7);
        std::thread::sleep(Duration::from_micros(us.min(100)));
    }
}

/// How a thread with operations in flight waits once spinning and yielding
/// did not help (`FERROCX_PROGRESS_NAP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nap {
    /// Short sleeps: leaves the core to other ranks (the default).
    Sleep,
    /// Keep yielding: lower latency where every rank has cores to spare, or
    /// where the kernel rounds short sleeps up to a scheduler tick.
    Yield,
}

/// The process-wide choice: `FERROCX_PROGRESS_NAP` = `sleep` (default) or
/// `yield`. Another value warns once and means `sleep`.
pub fn nap() -> Nap {
    static NAP: std::sync::OnceLock<Nap> = std::sync::OnceLock::new();
    *NAP.get_or_init(|| {
        let set = std::env::var("FERROCX_PROGRESS_NAP").unwrap_or_default();
        match set.trim().to_ascii_lowercase().as_str() {
            "" | "sleep" => Nap::Sleep,
            "yield" => Nap::Yield,
            other => {
                tracing::warn!("FERROCX_PROGRESS_NAP={other:?} is not sleep or yield; using sleep");
                Nap::Sleep
            }
        }
    })
}

/// Handle on the progress thread.
pub struct ProgressThread {
    handle: Option<JoinHandle<()>>,
}

impl ProgressThread {
    /// Start the thread (named `fx-progress-<rank>`).
    pub fn start<P: Progress>(rank: usize, p: Arc<P>) -> Result<Self> {
        // Read the setting now (a warning, if any, at creation, not mid-operation).
        nap();
        let handle = std::thread::Builder::new()
            .name(format!("fx-progress-{rank}"))
            .spawn(move || {
                super::slack::tighten();
                // Its transports' device work (copies, event queries) is
                // never part of a user's capture.
                ferrocx_sdk::cuda::relax_capture_checks_on_this_thread();
                let mut idle = 0u32;
                while p.wait_for_work() {
                    if p.sweep() {
                        idle = 0;
                    } else {
                        idle = idle.saturating_add(1);
                        backoff(idle);
                    }
                }
            })
            .map_err(|e| Error::Io(format!("cannot start the progress thread: {e}")))?;
        Ok(ProgressThread {
            handle: Some(handle),
        })
    }

    /// Join (the caller must have made `wait_for_work` return false).
    pub fn join(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
