//! Completion counters: a stage's transfers, a whole plan.

use crate::error::Error;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts down to zero; keeps the first error; wakes waiters at zero.
pub(crate) struct StageDone {
    remaining: AtomicUsize,
    error: Mutex<Option<Error>>,
    lock: Mutex<()>,
    cv: Condvar,
}

impl StageDone {
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(StageDone {
            remaining: AtomicUsize::new(n),
            error: Mutex::new(None),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        })
    }

    /// One part finished (with an error, or not).
    pub fn finish(&self, err: Option<Error>) {
        if let Some(e) = err {
            self.error.lock().get_or_insert(e);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    pub fn is_done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }

    /// The error, if any (taken: reported once).
    pub fn take_error(&self) -> Option<Error> {
        self.error.lock().take()
    }

    /// The error, if any, without taking it.
    pub fn error(&self) -> Option<Error> {
        self.error.lock().clone()
    }

    /// Park until done, in bounded slices (someone else drives progress and
    /// enforces the timeout), calling `check` every 100 ms or so while not done
    /// (without the lock).
    pub fn park_checking(&self, mut check: impl FnMut()) {
        let mut g = self.lock.lock();
        while !self.is_done() {
            self.cv.wait_for(&mut g, Duration::from_millis(100));
            if !self.is_done() {
                parking_lot::MutexGuard::unlocked(&mut g, &mut check);
            }
        }
    }
}
