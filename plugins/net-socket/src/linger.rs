//! Receiving ends that have nothing posted still owe the sender acknowledgements.
//!
//! The core tests only connections with requests posted. A multi-rail receiver whose
//! receives are all complete may still hold a duty: a chunk it placed was
//! acknowledged on a socket that died with the acknowledgement in it, so the sender
//! resends the chunk on another rail and waits for the acknowledgement again. Nobody
//! would read that resent chunk until the receiver's next `irecv` on this connection —
//! which, inside a collective, may wait on the very send that waits for the
//! acknowledgement (the stall of a flapping rail). So every `test` of the context
//! also gives idle acknowledged receivers a turn, at most every [`EVERY`], without
//! ever waiting for their lock.

use std::sync::{Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Shortest interval between two turns.
const EVERY: Duration = Duration::from_millis(2);

/// A connection end that can be given a turn.
pub(crate) trait Idle: Send + Sync {
    /// Progress if it is an acknowledged receiver with nothing posted and its lock is
    /// free; never blocks.
    fn idle_turn(&self, now: Instant);
}

/// The context's receiving ends.
#[derive(Default)]
pub(crate) struct Linger {
    ends: Mutex<Vec<Weak<dyn Idle>>>,
    next: Mutex<Option<Instant>>,
}

impl Linger {
    /// Track `end` for as long as it lives.
    pub fn add(&self, end: Weak<dyn Idle>) {
        let mut ends = self.ends.lock().unwrap_or_else(PoisonError::into_inner);
        ends.retain(|e| e.strong_count() > 0);
        ends.push(end);
    }

    /// Give every live end a turn, unless one was given less than [`EVERY`] ago.
    pub fn turn(&self, now: Instant) {
        {
            let Ok(mut next) = self.next.try_lock() else {
                return; // another thread is at it
            };
            if next.is_some_and(|t| now < t) {
                return;
            }
            *next = Some(now + EVERY);
        }
        let ends: Vec<_> = self
            .ends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for e in ends {
            e.idle_turn(now);
        }
    }
}
