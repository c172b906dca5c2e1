//! State shared by a plugin context and all of its connections.

use crate::cma::{self, CopyFn};
use crate::config::Config;
use ferrocx_sdk::Host;
use std::sync::atomic::{AtomicBool, Ordering};

/// One plugin context's shared state.
pub struct Ctx {
    /// The core's services.
    pub host: Host,
    /// Effective configuration.
    pub cfg: Config,
    /// Direct-copy back end (swapped in tests to simulate a refusing kernel).
    pub copier: CopyFn,
    fallback_logged: AtomicBool,
}

impl Ctx {
    /// A context over `host` with `cfg`.
    pub fn new(host: Host, cfg: Config) -> Self {
        Ctx {
            host,
            cfg,
            copier: cma::write_remote,
            fallback_logged: AtomicBool::new(false),
        }
    }

    /// Log the fall-back from single copy: at info the first time in this context, then at debug.
    pub fn log_fallback(&self, msg: &str) {
        if self.fallback_logged.swap(true, Ordering::Relaxed) {
            self.host.debug(msg);
        } else {
            self.host.info(msg);
        }
    }
}
