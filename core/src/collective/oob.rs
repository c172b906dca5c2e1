//! The out-of-band collectives a collective plugin gets at `comm_init`
//! (`fx_comm_oob_t`), carried by the communicator's bootstrap.

use crate::shared::CommShared;
use ferrocx_sdk::abi::{FxCommOob, FX_INVALID_ARGUMENT, FX_OK, FX_REMOTE};
use std::ffi::c_void;
use std::sync::Arc;

struct OobCtx {
    shared: Arc<CommShared>,
}

/// The table and its context; must outlive the plugin's comm.
pub(crate) struct OobTable {
    table: Box<FxCommOob>,
    _ctx: Box<OobCtx>,
}

// SAFETY: the table points into the boxed context, owned here and only read;
// the bootstrap behind it is thread-safe.
unsafe impl Send for OobTable {}
// SAFETY: as above.
unsafe impl Sync for OobTable {}

impl OobTable {
    pub(crate) fn new(shared: Arc<CommShared>) -> Self {
        let ctx = Box::new(OobCtx { shared });
        let table = Box::new(FxCommOob {
            oob_ctx: &*ctx as *const OobCtx as *mut c_void,
            all_gather: Some(oob_all_gather),
            barrier: Some(oob_barrier),
        });
        OobTable { table, _ctx: ctx }
    }

    pub(crate) fn as_ptr(&self) -> *const FxCommOob {
        &*self.table
    }
}

fn log_failure(what: &str, e: &crate::Error) -> i32 {
    tracing::warn!(target: "ferrocx::collective", "out-of-band {what} for a collective plugin failed: {e}");
    FX_REMOTE
}

unsafe extern "C" fn oob_all_gather(
    ctx: *mut c_void,
    mine: *const c_void,
    len: usize,
    all: *mut c_void,
) -> i32 {
    // SAFETY: `ctx` is the OobCtx this table was made with (alive while the table is).
    let Some(ctx) = (unsafe { (ctx as *const OobCtx).as_ref() }) else {
        return FX_INVALID_ARGUMENT;
    };
    if (mine.is_null() || all.is_null()) && len > 0 {
        return FX_INVALID_ARGUMENT;
    }
    let mine = if len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller provides `len` readable bytes (ABI contract).
        unsafe { std::slice::from_raw_parts(mine as *const u8, len) }
    };
    let got = match ctx.shared.bootstrap.all_gather(mine) {
        Ok(g) => g,
        Err(e) => return log_failure("all_gather", &e),
    };
    if let Some((r, b)) = got.iter().enumerate().find(|(_, b)| b.len() != len) {
        tracing::warn!(target: "ferrocx::collective", "out-of-band all_gather: rank {r} gave {} bytes, this rank {len}", b.len());
        return FX_INVALID_ARGUMENT;
    }
    for (r, b) in got.iter().enumerate() {
        // SAFETY: the caller provides nranks × len writable bytes (ABI contract).
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (all as *mut u8).add(r * len), len) };
    }
    FX_OK
}

unsafe extern "C" fn oob_barrier(ctx: *mut c_void) -> i32 {
    // SAFETY: as in oob_all_gather.
    let Some(ctx) = (unsafe { (ctx as *const OobCtx).as_ref() }) else {
        return FX_INVALID_ARGUMENT;
    };
    match ctx.shared.bootstrap.barrier() {
        Ok(()) => FX_OK,
        Err(e) => log_failure("barrier", &e),
    }
}
