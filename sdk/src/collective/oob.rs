//! The core's out-of-band collectives, as a plugin calls them during setup.

use crate::abi::{code_name, FxCommOob, FX_OK};
use crate::error::{PluginError, PluginResult};
use std::ffi::c_void;

/// The `fx_comm_oob_t` given to `comm_init`; valid until `comm_destroy`.
/// Collective: every rank calls the same sequence.
#[derive(Clone, Copy)]
pub struct Oob {
    raw: FxCommOob,
    nranks: usize,
}

// SAFETY: the core's callbacks are thread-safe and outlive the comm (header contract).
unsafe impl Send for Oob {}
// SAFETY: as above.
unsafe impl Sync for Oob {}

impl Oob {
    /// Wrap the table given to `comm_init`.
    ///
    /// # Safety
    /// `raw` must stay valid until the communicator is destroyed.
    pub unsafe fn from_raw(raw: &FxCommOob, nranks: usize) -> Self {
        Oob { raw: *raw, nranks }
    }

    fn check(what: &str, code: i32) -> PluginResult<()> {
        if code == FX_OK {
            Ok(())
        } else {
            Err(PluginError::new(
                code,
                format!("out-of-band {what} failed ({})", code_name(code)),
            ))
        }
    }

    /// Every rank's `mine` (the same length on every rank), in rank order.
    pub fn all_gather(&self, mine: &[u8]) -> PluginResult<Vec<Vec<u8>>> {
        let f = self
            .raw
            .all_gather
            .ok_or_else(|| PluginError::unsupported("the host offers no all_gather"))?;
        let mut all = vec![0u8; mine.len() * self.nranks];
        // SAFETY: `mine` is readable for its length and `all` writable for nranks × that.
        let code = unsafe {
            f(
                self.raw.oob_ctx,
                mine.as_ptr() as *const c_void,
                mine.len(),
                all.as_mut_ptr() as *mut c_void,
            )
        };
        Self::check("all_gather", code)?;
        if mine.is_empty() {
            return Ok(vec![Vec::new(); self.nranks]);
        }
        Ok(all.chunks(mine.len()).map(<[u8]>::to_vec).collect())
    }

    /// Returns once every rank called it.
    pub fn barrier(&self) -> PluginResult<()> {
        let f = self
            .raw
            .barrier
            .ok_or_else(|| PluginError::unsupported("the host offers no barrier"))?;
        // SAFETY: the table's contract.
        Self::check("barrier", unsafe { f(self.raw.oob_ctx) })
    }
}
