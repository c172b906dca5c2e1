//! Decides when an idle connection should look at its peer.
//!
//! Checking whether a peer is alive costs a syscall, so it happens only after
//! [`CHECK_INTERVAL`] without progress and then at most once per interval; a
//! poll that makes progress resets the clock. Only idle polls read the clock.

use std::time::{Duration, Instant};

/// Minimum wall time between two peer checks (and before the first).
pub const CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Idle tracking for one connection.
#[derive(Debug, Default)]
pub struct Watchdog {
    idle_since: Option<Instant>,
    last_check: Option<Instant>,
}

impl Watchdog {
    /// Something moved: the peer is evidently there.
    pub fn progressed(&mut self) {
        self.idle_since = None;
    }

    /// Called on an idle poll: true when a peer check is due now.
    pub fn check_due(&mut self) -> bool {
        let now = Instant::now();
        let since = *self.idle_since.get_or_insert(now);
        if now.duration_since(since) < CHECK_INTERVAL {
            return false;
        }
        match self.last_check {
            Some(t) if now.duration_since(t) < CHECK_INTERVAL => false,
            _ => {
                self.last_check = Some(now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_check_after_an_interval_then_rate_limited() {
        let mut w = Watchdog::default();
        assert!(!w.check_due());
        std::thread::sleep(CHECK_INTERVAL);
        assert!(w.check_due());
        assert!(!w.check_due(), "at most one check per interval");
        w.progressed();
        std::thread::sleep(CHECK_INTERVAL);
        assert!(!w.check_due(), "progress restarts the idle clock");
    }
}
