//! Decides when an idle connection should look at its peer.
//!
//! Checking whether a peer is alive costs a syscall, so it happens only after
//! [`CHECK_INTERVAL`] without progress and then at most once per interval; a
//! poll that makes progress resets the clock. Only idle polls read the clock,
//! and only every [`CLOCK_EVERY`]th of them (a clock read costs more than a poll).

use std::time::{Duration, Instant};

/// Minimum wall time between two peer checks (and before the first).
pub const CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Idle polls between two clock reads.
pub const CLOCK_EVERY: u32 = 64;

/// Idle tracking for one connection.
#[derive(Debug, Default)]
pub struct Watchdog {
    idle_since: Option<Instant>,
    last_check: Option<Instant>,
    idle_polls: u32,
}

impl Watchdog {
    /// Something moved: the peer is evidently there.
    pub fn progressed(&mut self) {
        self.idle_since = None;
        self.idle_polls = 0;
    }

    /// Called on an idle poll: true when a peer check is due now.
    pub fn check_due(&mut self) -> bool {
        let polls = self.idle_polls;
        self.idle_polls = polls.wrapping_add(1);
        if !polls.is_multiple_of(CLOCK_EVERY) {
            return false;
        }
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

    /// Polls until a check is due, at most one clock period of polls.
    fn due_within_a_period(w: &mut Watchdog) -> bool {
        (0..CLOCK_EVERY).any(|_| w.check_due())
    }

    #[test]
    fn first_check_after_an_interval_then_rate_limited() {
        let mut w = Watchdog::default();
        assert!(!due_within_a_period(&mut w));
        std::thread::sleep(CHECK_INTERVAL);
        assert!(due_within_a_period(&mut w));
        assert!(
            !due_within_a_period(&mut w),
            "at most one check per interval"
        );
        w.progressed();
        std::thread::sleep(CHECK_INTERVAL);
        assert!(
            !due_within_a_period(&mut w),
            "progress restarts the idle clock"
        );
    }
}
