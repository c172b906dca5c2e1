//! The plugin's view of the core: logging, environment, timeout, abort flag.

use crate::abi::*;
use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Log severity for [`Host::log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Error.
    Error = FX_LOG_ERROR as isize,
    /// Warning.
    Warn = FX_LOG_WARN as isize,
    /// Info.
    Info = FX_LOG_INFO as isize,
    /// Debug.
    Debug = FX_LOG_DEBUG as isize,
    /// Trace.
    Trace = FX_LOG_TRACE as isize,
}

/// Safe handle on the host-services table the core passed to `init`.
#[derive(Clone, Copy)]
pub struct Host {
    raw: *const FxHostV1,
}

// SAFETY: the core guarantees the table and its callbacks are thread-safe and
// outlive the plugin context (until `finalize` returns).
unsafe impl Send for Host {}
// SAFETY: as above.
unsafe impl Sync for Host {}

impl Host {
    /// Wrap the table given to `init`.
    ///
    /// # Safety
    /// `raw` must be null or point to a valid table that outlives every use.
    pub unsafe fn from_raw(raw: *const FxHostV1) -> Self {
        Host { raw }
    }

    fn table(&self) -> Option<&FxHostV1> {
        // SAFETY: from_raw's contract.
        let t = unsafe { self.raw.as_ref()? };
        if t.abi_version != FX_ABI_VERSION_1 || (t.struct_size as usize) < FX_HOST_V1_MIN_SIZE {
            return None;
        }
        Some(t)
    }

    /// Write to the core's log (dropped when the host has no logger).
    pub fn log(&self, level: Level, msg: impl AsRef<str>) {
        let Some(t) = self.table() else { return };
        let Some(log) = t.log else { return };
        let text = CString::new(msg.as_ref().replace('\0', " ")).unwrap_or_default();
        // SAFETY: valid table, NUL-terminated message living across the call.
        unsafe { log(t.host_ctx, level as i32, text.as_ptr()) }
    }

    /// Shorthand for `log(Level::Info, ..)`.
    pub fn info(&self, msg: impl AsRef<str>) {
        self.log(Level::Info, msg)
    }
    /// Shorthand for `log(Level::Warn, ..)`.
    pub fn warn(&self, msg: impl AsRef<str>) {
        self.log(Level::Warn, msg)
    }
    /// Shorthand for `log(Level::Debug, ..)`.
    pub fn debug(&self, msg: impl AsRef<str>) {
        self.log(Level::Debug, msg)
    }

    /// An environment variable as the core sees it (falls back to the process
    /// environment when the host offers no lookup).
    pub fn env(&self, name: &str) -> Option<String> {
        let Some(getenv) = self.table().and_then(|t| t.getenv) else {
            return std::env::var(name).ok();
        };
        let t = self.table()?;
        let cname = CString::new(name).ok()?;
        let mut buf = vec![0 as c_char; 256];
        loop {
            // SAFETY: buffer of buf.len() bytes, NUL-terminated name.
            let n = unsafe { getenv(t.host_ctx, cname.as_ptr(), buf.as_mut_ptr(), buf.len()) };
            if n < 0 {
                return None;
            }
            if (n as usize) < buf.len() {
                return Some(c_chars_to_string(&buf));
            }
            buf.resize(n as usize + 1, 0);
        }
    }

    /// The bound for any wait inside the plugin (`FERROCX_TIMEOUT`).
    pub fn timeout(&self) -> Duration {
        match self.table() {
            Some(t) if t.timeout_ms > 0 => Duration::from_millis(t.timeout_ms),
            _ => Duration::from_secs(300),
        }
    }

    /// True once the communicator was aborted: stop waiting.
    pub fn aborted(&self) -> bool {
        match self.table() {
            // SAFETY: the core keeps the flag alive as long as the table.
            Some(t) if !t.abort_flag.is_null() => unsafe {
                (*t.abort_flag).load(Ordering::Acquire) != 0
            },
            _ => false,
        }
    }
}

/// A host table with no callbacks, for tests and tools that drive a plugin directly.
pub struct DetachedHost {
    table: Box<FxHostV1>,
    _abort: Box<AtomicU32>,
}

impl DetachedHost {
    /// A table with the given timeout and no logger or env lookup.
    pub fn new(timeout: Duration) -> Self {
        let abort = Box::new(AtomicU32::new(0));
        let table = Box::new(FxHostV1 {
            abi_version: FX_ABI_VERSION_1,
            struct_size: std::mem::size_of::<FxHostV1>() as u32,
            host_ctx: std::ptr::null_mut(),
            log: None,
            getenv: None,
            timeout_ms: timeout.as_millis() as u64,
            abort_flag: &*abort as *const AtomicU32,
        });
        DetachedHost {
            table,
            _abort: abort,
        }
    }
    /// The raw table.
    pub fn as_ptr(&self) -> *const FxHostV1 {
        &*self.table
    }
}
