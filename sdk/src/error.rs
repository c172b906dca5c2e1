//! The error a Rust plugin returns from a hook; becomes a code plus last-error text.

use crate::abi::*;
use std::cell::RefCell;
use std::fmt;

/// An error raised by a plugin hook: an `FX_*` code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    code: i32,
    message: String,
}

impl PluginError {
    /// An error with an explicit code.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        PluginError {
            code,
            message: message.into(),
        }
    }
    /// `FX_INVALID_ARGUMENT`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(FX_INVALID_ARGUMENT, message)
    }
    /// `FX_UNSUPPORTED`.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(FX_UNSUPPORTED, message)
    }
    /// `FX_SYSTEM` with the text of the current `errno` appended.
    pub fn last_os(what: impl fmt::Display) -> Self {
        Self::new(
            FX_SYSTEM,
            format!("{what}: {}", std::io::Error::last_os_error()),
        )
    }
    /// `FX_SYSTEM`: a failure of the system or a driver.
    pub fn system(message: impl Into<String>) -> Self {
        Self::new(FX_SYSTEM, message)
    }
    /// `FX_SYSTEM` from an `io::Error`.
    pub fn io(what: impl fmt::Display, err: std::io::Error) -> Self {
        Self::new(FX_SYSTEM, format!("{what}: {err}"))
    }
    /// `FX_REMOTE`.
    pub fn remote(message: impl Into<String>) -> Self {
        Self::new(FX_REMOTE, message)
    }
    /// `FX_TIMEOUT`.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(FX_TIMEOUT, message)
    }
    /// `FX_INTERNAL`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(FX_INTERNAL, message)
    }
    /// The `FX_*` code.
    pub fn code(&self) -> i32 {
        self.code
    }
    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", code_name(self.code), self.message)
    }
}

impl std::error::Error for PluginError {}

/// Result of a plugin hook.
pub type PluginResult<T> = Result<T, PluginError>;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Record `msg` as the calling thread's last error (read back by the `last_error` hook).
pub fn set_last_error(msg: &str) {
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        e.clear();
        e.push_str(msg);
    });
}

/// The calling thread's last error text.
pub fn last_error() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}
