//! Per-communicator threads and the work they run: the proxy service thread
//! (connection setup: `connect`) and the progress thread (in-flight
//! operations, driven through [`Progress`]). Both park when idle.

pub(crate) mod connect;
mod progress;
mod service;
mod slack;

pub use progress::{backoff, nap, Nap, Progress, ProgressThread};
pub use service::ServiceThread;
