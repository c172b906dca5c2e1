//! # ferrocx — collectives and point-to-point over pluggable transports
//!
//! The core: bootstrap (rendezvous and out-of-band exchange), the plugin
//! registry (built-ins and `.so` files) and per-peer transport selection,
//! the proxy service and progress threads, and the [`Communicator`] API.

pub mod bootstrap;
pub mod config;
mod error;

pub use error::{Error, Result};

#[cfg(feature = "builtin-shm")]
use ferrocx_shm as _;
