//! `init` then `comm_init` of a per-communicator plugin table: the collective
//! and device-networking tables share these hooks' shapes (`fx_comm_info_t`,
//! `fx_comm_oob_t`), so they share this start.

use super::oob::OobTable;
use crate::error::{Error, Result};
use crate::plugin::library::last_error_text;
use crate::plugin::HostTable;
use crate::shared::CommShared;
use ferrocx_sdk::abi::*;
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// The hooks `start` calls, from a validated table.
pub(crate) struct Hooks {
    pub init: unsafe extern "C" fn(*const FxHostV1, *mut *mut c_void) -> i32,
    pub finalize: unsafe extern "C" fn(*mut c_void) -> i32,
    pub comm_init: unsafe extern "C" fn(
        *mut c_void,
        *const FxCommInfo,
        *const FxCommOob,
        *mut *mut c_void,
    ) -> i32,
    pub last_error: Option<unsafe extern "C" fn(*mut c_char, usize) -> usize>,
}

/// A plugin's context and comm on one communicator, with the tables they
/// point into (which must outlive them).
pub(crate) struct Started {
    pub ctx: *mut c_void,
    pub comm: *mut c_void,
    pub oob: OobTable,
    pub host: HostTable,
}

/// The error of a failed hook of plugin `name`, with its last-error text.
pub(crate) fn hook_error(
    name: &str,
    last_error: Option<unsafe extern "C" fn(*mut c_char, usize) -> usize>,
    hook: &'static str,
    code: i32,
) -> Error {
    Error::Plugin {
        plugin: name.to_string(),
        hook,
        peer: None,
        code,
        message: last_error_text(last_error),
    }
}

/// `init` then `comm_init` (collective: every rank, in the same order). On a
/// `comm_init` failure the context is finalized and the error is the hook's
/// (`FX_UNSUPPORTED` included: the caller decides what that means).
pub(crate) fn start(name: &str, h: &Hooks, shared: &Arc<CommShared>) -> Result<Started> {
    let host = HostTable::new(name, shared.timeout, shared.stop.clone());
    let mut ctx = std::ptr::null_mut();
    // SAFETY: a validated table's hook; the host table outlives the context
    // (the caller keeps it in `Started`).
    let code = unsafe { (h.init)(host.as_ptr(), &mut ctx) };
    if code != FX_OK || ctx.is_null() {
        return Err(hook_error(name, h.last_error, "init", code));
    }
    let oob = OobTable::new(shared.clone());
    let me = &shared.peer_info[shared.rank];
    let info = FxCommInfo {
        rank: shared.rank as i32,
        nranks: shared.nranks as i32,
        local_rank: me.local_rank,
        cuda_device: me.cuda_device,
        comm_hash: shared.comm_hash,
        peers: shared.peer_info.as_ptr(),
    };
    let mut comm = std::ptr::null_mut();
    // SAFETY: a live context; `info` and its peers live across the call, the
    // oob table as long as the comm (kept in `Started`).
    let code = unsafe { (h.comm_init)(ctx, &info, oob.as_ptr(), &mut comm) };
    if code != FX_OK || comm.is_null() {
        let code = if code == FX_OK { FX_INTERNAL } else { code };
        let e = hook_error(name, h.last_error, "comm_init", code);
        // SAFETY: the context was made by init above and nothing else uses it.
        unsafe { (h.finalize)(ctx) };
        return Err(e);
    }
    Ok(Started {
        ctx,
        comm,
        oob,
        host,
    })
}
