//! Rails and failover, as pure state machines a transport drives with its own I/O.
//!
//! A transport that stripes a connection over several *rails* (interfaces, NIC ports)
//! needs two pieces of bookkeeping, both independent of how bytes move:
//!
//! * [`PathHealth`]: is the path from one of my rails to one of the peer's rails usable?
//!   Health is kept **per path** (my rail × the peer's address), shared by every
//!   connection of the process, not per local interface: one peer's switch port going
//!   dark says nothing about the paths to other peers through the same NIC, and every
//!   connection to that peer learns of the failure at once. A failed path stays down for
//!   a quiet *recovery window*, is then probed by the transport, and comes back when a
//!   probe succeeds (a failed probe re-arms the window, doubling up to 8×).
//! * [`InFlight`]: which chunks of which messages are sent but not yet acknowledged, and
//!   on which rail. When a rail fails, [`InFlight::fail_rail`] hands back exactly the
//!   chunks to resend; duplicate acknowledgements (a chunk that got through on both the
//!   failed rail and its replacement) count once.
//!
//! Neither does I/O or reads the clock: callers pass `now`, so tests drive them with
//! made-up times and injected completions.
//!
//! ```
//! use ferrocx_sdk::failover::{ChunkId, InFlight, PathHealth};
//! use std::time::{Duration, Instant};
//!
//! let health = PathHealth::new(Duration::from_secs(5));
//! let t0 = Instant::now();
//! assert!(health.fail(&("eth0", "10.0.0.2"), t0)); // newly failed: log it
//! assert!(!health.is_up(&("eth0", "10.0.0.2")));
//! assert!(!health.probe_due(&("eth0", "10.0.0.2"), t0 + Duration::from_secs(1)));
//! assert!(health.probe_due(&("eth0", "10.0.0.2"), t0 + Duration::from_secs(5)));
//! assert_eq!(health.recovered(&("eth0", "10.0.0.2"), t0 + Duration::from_secs(6)),
//!            Some(Duration::from_secs(6)));
//!
//! let mut f = InFlight::new();
//! f.add_message(7, 2);
//! f.sent(ChunkId { msg: 7, index: 0 }, 0);
//! f.sent(ChunkId { msg: 7, index: 1 }, 1);
//! assert_eq!(f.acked(ChunkId { msg: 7, index: 1 }), None);
//! assert_eq!(f.fail_rail(0), vec![ChunkId { msg: 7, index: 0 }]);
//! f.sent(ChunkId { msg: 7, index: 0 }, 1); // resent on rail 1
//! assert_eq!(f.acked(ChunkId { msg: 7, index: 0 }), Some(7)); // message 7 is complete
//! ```

mod health;
mod inflight;
mod rails;

pub use health::PathHealth;
pub use inflight::{ChunkId, InFlight};
pub use rails::{chunk_len, nchunks, Chunk, Done, RailSet, RailState, RailStats};
