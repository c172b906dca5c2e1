//! Device networking: a plugin (`ferrocx_devnet_v1`,
//! `sdk/include/ferrocx_devnet.h`) whose device header lets the user's own
//! kernels put, signal and fetch-add to peers' symmetric windows without a
//! CPU on the post path (the ibgda plugin). The core loads it, opens it on a
//! communicator ([`Communicator::devnet_open`](crate::Communicator::devnet_open)),
//! hands it the windows the core mapped, and gives the kernel's view back to
//! the program; it never reads the view or the queues itself.

pub mod library;

pub use ferrocx_sdk::abi::FxDevnetStats as DevnetStats;
pub use library::DevnetLib;

use crate::collective::start::{hook_error, start, Hooks};
use crate::collective::OobTable;
use crate::error::{Error, Result};
use crate::plugin::HostTable;
use crate::shared::CommShared;
use crate::window::Entry;
use ferrocx_sdk::abi::*;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `FERROCX_DEVNET`: which device-networking plugin `devnet_open` takes
/// (default: the first one found).
pub fn chosen_from_env() -> Option<String> {
    std::env::var("FERROCX_DEVNET")
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// A device-networking plugin open on one communicator. Close it (or drop it)
/// before the communicator is destroyed, once no kernel posts any more.
pub struct DevNet {
    lib: Arc<DevnetLib>,
    ctx: *mut c_void,
    comm: *mut c_void,
    shared: Arc<CommShared>,
    /// Windows registered, with the core's entries (keeps the peers' mappings open).
    windows: Mutex<Vec<(u32, Arc<Entry>)>>,
    closed: Mutex<bool>,
    _oob: OobTable,
    _host: HostTable,
}

// SAFETY: the hooks of one comm are serialized by `closed`'s lock where they
// change state; the plugin's context is thread-safe per the ABI.
unsafe impl Send for DevNet {}
// SAFETY: as above.
unsafe impl Sync for DevNet {}

impl DevNet {
    /// `init` then `comm_init`. Collective.
    pub(crate) fn open(lib: Arc<DevnetLib>, shared: &Arc<CommShared>) -> Result<DevNet> {
        let t = lib.table();
        let hooks = Hooks {
            init: t.init.expect("validated"),
            finalize: t.finalize.expect("validated"),
            comm_init: t.comm_init.expect("validated"),
            last_error: t.last_error,
        };
        let s = start(&lib.name, &hooks, shared).map_err(|e| match e {
            Error::Plugin {
                code: FX_UNSUPPORTED,
                message,
                ..
            } => Error::Unsupported(format!(
                "device-networking plugin '{}': {message}",
                lib.name
            )),
            e => e,
        })?;
        Ok(DevNet {
            lib,
            ctx: s.ctx,
            comm: s.comm,
            shared: shared.clone(),
            windows: Mutex::new(Vec::new()),
            closed: Mutex::new(false),
            _oob: s.oob,
            _host: s.host,
        })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.lib.name
    }

    fn live(&self, hook: &str) -> Result<()> {
        if *self.closed.lock() {
            return Err(Error::Destroyed(format!(
                "device-networking plugin '{}' {hook}: it was closed",
                self.lib.name
            )));
        }
        Ok(())
    }

    fn check(&self, hook: &'static str, code: i32) -> Result<()> {
        if code == FX_OK {
            Ok(())
        } else {
            Err(error_of(&self.lib, hook, code))
        }
    }

    /// Offer a window the communicator registered (collective): the number a
    /// kernel names it by. A rank that fails makes it fail on every rank.
    pub(crate) fn register(&self, entry: Arc<Entry>) -> Result<u32> {
        self.live("window_register")?;
        let ptrs: Vec<*mut c_void> = entry.peer_bases.iter().map(|&b| b as *mut c_void).collect();
        let desc = FxWindowDesc {
            base: entry.base as *mut c_void,
            bytes: entry.bytes as u64,
            mem_kind: entry.mem,
            reserved: 0,
            peer_bases: ptrs.as_ptr(),
            peer_addrs: entry.peer_addrs.as_ptr(),
        };
        let mut id = 0u32;
        let t = self.lib.table();
        // SAFETY: live comm; the descriptor and its arrays live across the call.
        let code = unsafe { (t.window_register.expect("validated"))(self.comm, &desc, &mut id) };
        let mine = self.check("window_register", code);
        let all = self.shared.bootstrap.all_gather(&[mine.is_ok() as u8])?;
        let failed: Vec<usize> = (0..all.len())
            .filter(|&r| all[r].first() != Some(&1))
            .collect();
        if failed.is_empty() {
            entry.devnet_holders.fetch_add(1, Ordering::AcqRel);
            self.windows.lock().push((id, entry));
            return Ok(id);
        }
        if mine.is_ok() {
            // SAFETY: live comm; `id` was registered just above.
            unsafe { (t.window_deregister.expect("validated"))(self.comm, id) };
        }
        mine?;
        Err(Error::invalid(format!(
            "devnet window_register: rank(s) {failed:?} could not register the window with '{}' (see their errors)",
            self.lib.name
        )))
    }

    /// Take a window back (collective): no request naming it may be in flight.
    pub fn window_deregister(&self, id: u32) -> Result<()> {
        self.live("window_deregister")?;
        let entry = {
            let mut w = self.windows.lock();
            let i = w
                .iter()
                .position(|(i, _)| *i == id)
                .ok_or_else(|| Error::invalid(format!("devnet window {id} is not registered")))?;
            w.remove(i)
        };
        // SAFETY: live comm, a registered window.
        let code =
            unsafe { (self.lib.table().window_deregister.expect("validated"))(self.comm, id) };
        let r = self.check("window_deregister", code);
        entry.1.devnet_holders.fetch_sub(1, Ordering::AcqRel);
        self.shared.bootstrap.barrier()?;
        drop(entry);
        r
    }

    /// The device address a kernel of this rank takes (the plugin's device
    /// header defines what is there).
    pub fn device_view(&self) -> Result<u64> {
        self.live("device_view")?;
        let mut v = 0u64;
        // SAFETY: live comm; valid out pointer.
        let code = unsafe { (self.lib.table().device_view.expect("validated"))(self.comm, &mut v) };
        self.check("device_view", code)?;
        Ok(v)
    }

    /// `Ok`, or the error a peer or path met (a peer unreachable on every path).
    pub fn status(&self) -> Result<()> {
        self.live("status")?;
        // SAFETY: live comm.
        let code = unsafe { (self.lib.table().status.expect("validated"))(self.comm) };
        self.check("status", code)
    }

    /// Counters since the plugin was opened.
    pub fn stats(&self) -> Result<DevnetStats> {
        self.live("stats")?;
        let mut s = DevnetStats::default();
        // SAFETY: live comm; valid out pointer.
        let code = unsafe { (self.lib.table().stats.expect("validated"))(self.comm, &mut s) };
        self.check("stats", code)?;
        Ok(s)
    }

    /// One line: the handler in use and why, the paths, the knobs.
    pub fn describe(&self) -> String {
        if self.live("describe").is_err() {
            return format!("{} (closed)", self.lib.name);
        }
        let mut buf = vec![0 as std::ffi::c_char; 2048];
        let f = self.lib.table().describe.expect("validated");
        // SAFETY: live comm; a buffer of the given length.
        let n = unsafe { f(self.comm, buf.as_mut_ptr(), buf.len()) };
        if n >= buf.len() {
            buf = vec![0; n + 1];
            // SAFETY: as above, with room for the whole text.
            unsafe { f(self.comm, buf.as_mut_ptr(), buf.len()) };
        }
        c_chars_to_string(&buf)
    }

    /// Stop the plugin on this communicator (its threads, its queues); every
    /// window it holds is let go. Kernels that post must have finished.
    pub fn close(&self) -> Result<()> {
        let mut closed = self.closed.lock();
        if *closed {
            return Ok(());
        }
        *closed = true;
        let t = self.lib.table();
        let windows = std::mem::take(&mut *self.windows.lock());
        for (id, entry) in &windows {
            // SAFETY: live comm, registered windows.
            unsafe { (t.window_deregister.expect("validated"))(self.comm, *id) };
            entry.devnet_holders.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: live comm and context, each destroyed once (guarded by `closed`).
        let code = unsafe { (t.comm_destroy.expect("validated"))(self.comm) };
        let r = self.check("comm_destroy", code);
        // SAFETY: as above.
        unsafe { (t.finalize.expect("validated"))(self.ctx) };
        drop(windows);
        r
    }
}

impl Drop for DevNet {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn error_of(lib: &DevnetLib, hook: &'static str, code: i32) -> Error {
    if code == FX_UNSUPPORTED {
        let message = crate::plugin::library::last_error_text(lib.table().last_error);
        return Error::Unsupported(format!(
            "device-networking plugin '{}': {message}",
            lib.name
        ));
    }
    hook_error(&lib.name, lib.table().last_error, hook, code)
}
