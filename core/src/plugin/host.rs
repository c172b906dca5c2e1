//! The host-services table the core hands each plugin at `init`:
//! logging into `tracing`, environment lookup, the timeout and the abort flag.

use ferrocx_sdk::abi::*;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

struct HostCtx {
    plugin: String,
}

/// A host table owned by one plugin context. Must outlive the context.
pub(crate) struct HostTable {
    table: Box<FxHostV1>,
    _ctx: Box<HostCtx>,
    _abort: Arc<AtomicU32>,
}

// SAFETY: the table holds pointers to the boxed context and the Arc'd abort
// flag, both owned by this value and never mutated through the table.
unsafe impl Send for HostTable {}
// SAFETY: as above; the callbacks are thread-safe.
unsafe impl Sync for HostTable {}

impl HostTable {
    pub(crate) fn new(plugin: &str, timeout: Duration, abort: Arc<AtomicU32>) -> Self {
        let ctx = Box::new(HostCtx {
            plugin: plugin.to_string(),
        });
        let table = Box::new(FxHostV1 {
            abi_version: FX_ABI_VERSION_1,
            struct_size: std::mem::size_of::<FxHostV1>() as u32,
            host_ctx: &*ctx as *const HostCtx as *mut c_void,
            log: Some(host_log),
            getenv: Some(host_getenv),
            timeout_ms: timeout.as_millis().max(1) as u64,
            abort_flag: Arc::as_ptr(&abort),
        });
        HostTable {
            table,
            _ctx: ctx,
            _abort: abort,
        }
    }

    pub(crate) fn as_ptr(&self) -> *const FxHostV1 {
        &*self.table
    }
}

unsafe extern "C" fn host_log(host_ctx: *mut c_void, level: i32, msg: *const c_char) {
    // SAFETY: host_ctx is the HostCtx we created; msg is NUL-terminated per the ABI.
    let (plugin, text) = unsafe {
        let plugin = (host_ctx as *const HostCtx)
            .as_ref()
            .map(|c| c.plugin.as_str())
            .unwrap_or("?");
        if msg.is_null() {
            return;
        }
        (plugin, CStr::from_ptr(msg).to_string_lossy())
    };
    match level {
        FX_LOG_ERROR => tracing::error!(target: "ferrocx::plugin", plugin, "{text}"),
        FX_LOG_WARN => tracing::warn!(target: "ferrocx::plugin", plugin, "{text}"),
        FX_LOG_INFO => tracing::info!(target: "ferrocx::plugin", plugin, "{text}"),
        FX_LOG_DEBUG => tracing::debug!(target: "ferrocx::plugin", plugin, "{text}"),
        _ => tracing::trace!(target: "ferrocx::plugin", plugin, "{text}"),
    }
}

unsafe extern "C" fn host_getenv(
    _ctx: *mut c_void,
    name: *const c_char,
    out: *mut c_char,
    out_len: usize,
) -> i64 {
    if name.is_null() {
        return -1;
    }
    // SAFETY: NUL-terminated per the ABI.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    let Ok(value) = std::env::var(&*name) else {
        return -1;
    };
    if !out.is_null() && out_len > 0 {
        // SAFETY: the caller provides out_len writable bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(out, out_len) };
        copy_str_to_c_chars(&value, buf);
    }
    value.len() as i64
}
