//! The clock the health machines are driven by.

use std::fmt;
use std::time::Duration;

/// A point on a monotonic clock, in nanoseconds from an origin the caller chooses
/// (process start, a GPU's globaltimer, or 0 in a simulation). Passed in by the
/// caller so the machines are deterministic and testable without sleeping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    /// This point plus `d`, saturating at the end of time rather than wrapping
    /// (a deadline that wrapped would fire at once).
    pub fn after(self, d: Duration) -> Nanos {
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Nanos(self.0.saturating_add(d))
    }

    /// Time from `earlier` to this point; zero if `earlier` is later.
    pub fn since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={:?}", Duration::from_nanos(self.0))
    }
}
