//! The proxy's clock: nanoseconds since the first reading in this process
//! (the health machines take time as a number).

use std::sync::OnceLock;
use std::time::Instant;

/// Nanoseconds since the process first asked.
pub fn now() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}
