//! Per-communicator threads: the proxy service thread (connection setup,
//! registration) and the progress thread (in-flight operations). Both park
//! when idle.

mod progress;
mod service;
mod slack;

pub use progress::{backoff, nap, Nap, Progress, ProgressThread};
pub use service::ServiceThread;
