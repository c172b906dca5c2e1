//! A collective plugin live on one communicator: its context (`init`), its
//! comm (`comm_init`), and safe wrappers for the per-call hooks. Every non-OK
//! code becomes an [`Error::Plugin`] carrying the plugin's last-error text.

use super::library::CollectiveLib;
use super::oob::OobTable;
use super::start::{hook_error, start, Hooks};
use crate::error::{Error, Result};
use crate::plugin::HostTable;
use crate::shared::CommShared;
use ferrocx_sdk::abi::*;
use std::ffi::c_void;
use std::sync::Arc;

/// One collective plugin on one communicator.
pub struct CollectivePlugin {
    /// The library and table.
    pub lib: Arc<CollectiveLib>,
    ctx: *mut c_void,
    comm: *mut c_void,
    /// Set once comm_destroy/finalize ran: every hook is refused after.
    closed: std::sync::atomic::AtomicBool,
    _oob: OobTable,
    _host: HostTable,
    /// The name, shared with status labels (no copy per call).
    shared_name: Arc<str>,
}

// SAFETY: hooks of one comm are serialized by the caller (the communicator's
// collective lock); the context itself is thread-safe per the ABI.
unsafe impl Send for CollectivePlugin {}
// SAFETY: as above.
unsafe impl Sync for CollectivePlugin {}

/// Outcome of `CollectivePlugin::start`.
pub enum Started {
    /// Ready for calls.
    Ready(CollectivePlugin),
    /// `comm_init` said the plugin has nothing for this communicator.
    Unsupported(String),
}

impl CollectivePlugin {
    /// `init` then `comm_init`. Collective: every rank, in the same order.
    pub(crate) fn start(lib: Arc<CollectiveLib>, shared: &Arc<CommShared>) -> Result<Started> {
        let t = lib.table();
        let hooks = Hooks {
            init: t.init.expect("validated"),
            finalize: t.finalize.expect("validated"),
            comm_init: t.comm_init.expect("validated"),
            last_error: t.last_error,
        };
        let s = match start(&lib.name, &hooks, shared) {
            Ok(s) => s,
            Err(Error::Plugin {
                code: FX_UNSUPPORTED,
                hook: "comm_init",
                message,
                ..
            }) => return Ok(Started::Unsupported(message)),
            Err(e) => return Err(e),
        };
        Ok(Started::Ready(CollectivePlugin {
            shared_name: Arc::from(lib.name.as_str()),
            lib,
            ctx: s.ctx,
            comm: s.comm,
            closed: std::sync::atomic::AtomicBool::new(false),
            _oob: s.oob,
            _host: s.host,
        }))
    }

    /// Plugin name.
    pub fn name(&self) -> &str {
        &self.lib.name
    }

    /// Plugin name, shared (for labels kept past the call).
    pub fn shared_name(&self) -> Arc<str> {
        self.shared_name.clone()
    }

    fn t(&self) -> &FxCollectiveV1 {
        self.lib.table()
    }

    fn open(&self, hook: &'static str) -> Result<()> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Destroyed(format!(
                "collective plugin '{}' {hook}: the communicator was destroyed",
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

    /// Whether the plugin declares the memory kind (`FX_COLL_CAP_HOST_MEM`,
    /// `FX_COLL_CAP_CUDA_MEM`): it is not asked about calls on the other kind.
    pub(crate) fn serves(&self, mem_kind: i32) -> bool {
        let cap = if mem_kind == FX_MEM_CUDA {
            FX_COLL_CAP_CUDA_MEM
        } else {
            FX_COLL_CAP_HOST_MEM
        };
        self.t().caps & cap != 0
    }

    /// Priority for running `desc` (0 = cannot, also without the memory kind's cap).
    pub fn can_run(&self, desc: &FxCollDesc) -> i32 {
        if !self.serves(desc.mem_kind) || self.open("can_run").is_err() {
            return 0;
        }
        // SAFETY: live comm; the descriptor lives across the call.
        unsafe { (self.t().can_run.expect("validated"))(self.comm, desc) }.max(0)
    }

    /// The path the plugin takes for `desc`, in its own words (`describe`;
    /// absent, empty or failing: `None`). For selection tables only.
    pub fn describe(&self, desc: &FxCollDesc) -> Option<String> {
        let f = self.t().describe?;
        if !self.serves(desc.mem_kind) || self.open("describe").is_err() {
            return None;
        }
        let mut buf = [0 as std::ffi::c_char; 128];
        // SAFETY: live comm; the descriptor and the buffer live across the call.
        let n = unsafe { f(self.comm, desc, buf.as_mut_ptr(), buf.len()) };
        // Up to the length returned, the buffer's last byte or a NUL, whichever
        // comes first (a plugin may return more than it wrote).
        let bytes: Vec<u8> = buf
            .iter()
            .take(n.min(buf.len() - 1))
            .map(|&c| c as u8)
            .take_while(|&b| b != 0)
            .collect();
        (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Run `desc` (host: to completion; CUDA: queued on `stream`).
    ///
    /// # Safety
    /// The descriptor's buffers must be valid as the ABI says; `stream` a live
    /// stream of this rank's device or null.
    pub unsafe fn launch(&self, desc: &FxCollDesc, stream: *mut c_void) -> Result<()> {
        self.open("launch")?;
        // SAFETY: the caller's contract; live comm.
        let code = unsafe { (self.t().launch.expect("validated"))(self.comm, desc, stream) };
        self.check("launch", code)
    }

    /// Whether the table has the point-to-point hooks (the loader accepts
    /// both or neither).
    pub fn has_p2p(&self) -> bool {
        self.t().p2p_can_run.is_some() && self.t().p2p_launch.is_some()
    }

    /// Priority for running the one op of `desc` (0 = cannot, also without
    /// the p2p hooks or the memory kind's cap).
    pub fn p2p_can_run(&self, desc: &FxP2pDesc) -> i32 {
        let Some(f) = self.t().p2p_can_run else {
            return 0;
        };
        if !self.serves(desc.mem_kind) || self.open("p2p_can_run").is_err() {
            return 0;
        }
        // SAFETY: live comm; the descriptor and its ops live across the call.
        unsafe { f(self.comm, desc) }.max(0)
    }

    /// Run the ops of `desc` (CUDA: queued on `stream`).
    ///
    /// # Safety
    /// As [`launch`](Self::launch), for every op's buffer.
    pub unsafe fn p2p_launch(&self, desc: &FxP2pDesc, stream: *mut c_void) -> Result<()> {
        self.open("p2p_launch")?;
        let f = self.t().p2p_launch.ok_or_else(|| {
            Error::Unsupported(format!(
                "collective plugin '{}' has no p2p_launch",
                self.lib.name
            ))
        })?;
        // SAFETY: the caller's contract; live comm.
        let code = unsafe { f(self.comm, desc, stream) };
        self.check("p2p_launch", code)
    }

    /// After a CUDA-memory `launch` or `p2p_launch` succeeded: whether what it
    /// queued ends by itself within the timeout (`launch_bounded`; absent: no).
    pub fn launch_bounded(&self) -> bool {
        let Some(f) = self.t().launch_bounded else {
            return false;
        };
        if self.open("launch_bounded").is_err() {
            return false;
        }
        // SAFETY: live comm.
        unsafe { f(self.comm) == 1 }
    }

    /// Whether `launch` checks host-memory calls itself (`FX_COLL_CAP_CHECKS_CALLS`).
    pub fn checks_calls(&self) -> bool {
        self.t().caps & FX_COLL_CAP_CHECKS_CALLS != 0
    }

    /// Whether its bid on a host call depends on the call's shape alone
    /// (`FX_COLL_CAP_SHAPE_BIDS`).
    pub fn bids_by_shape(&self) -> bool {
        self.t().caps & FX_COLL_CAP_SHAPE_BIDS != 0
    }

    /// Whether the plugin's point-to-point hooks take device ops with the
    /// rank itself (`FX_COLL_CAP_P2P_SELF`).
    pub fn takes_self_ops(&self) -> bool {
        self.t().caps & FX_COLL_CAP_P2P_SELF != 0
    }

    /// Whether the plugin uses windows.
    pub fn takes_windows(&self) -> bool {
        self.t().window_register.is_some()
    }

    /// Register a window (collective); `None` when the plugin has no use for it.
    pub fn window_register(&self, desc: &FxWindowDesc) -> Result<Option<usize>> {
        let Some(f) = self.t().window_register else {
            return Ok(None);
        };
        self.open("window_register")?;
        let mut win = std::ptr::null_mut();
        // SAFETY: live comm; `desc` and its arrays live across the call.
        let code = unsafe { f(self.comm, desc, &mut win) };
        self.check("window_register", code)?;
        Ok((!win.is_null()).then_some(win as usize))
    }

    /// Release a window from [`window_register`](Self::window_register).
    pub fn window_deregister(&self, win: usize) -> Result<()> {
        self.open("window_deregister")?;
        let f = self
            .t()
            .window_deregister
            .expect("validated with window_register");
        // SAFETY: live comm; `win` came from this comm's window_register.
        let code = unsafe { f(self.comm, win as *mut c_void) };
        self.check("window_deregister", code)
    }

    /// The asynchronous error that broke the plugin's comm, if any. Only device
    /// work fails after `launch` returned: a host-only plugin is not asked (its
    /// failures break the communicator in the call).
    pub fn status(&self) -> Result<()> {
        if !self.serves(FX_MEM_CUDA) {
            return Ok(());
        }
        self.open("status")?;
        match self.t().status {
            // SAFETY: live comm.
            Some(f) => self.check("status", unsafe { f(self.comm) }),
            None => Ok(()),
        }
    }
}

impl CollectivePlugin {
    /// `comm_destroy` then `finalize` (once; later hooks are refused). The
    /// plugin's comm_destroy may use the out-of-band collectives: call this on
    /// every rank while the bootstrap still works. `comm_destroy`'s error is
    /// returned (a plugin that checks calls later reports a difference of the
    /// last calls there); `finalize`'s is logged.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(());
        }
        let t = self.lib.table();
        // SAFETY: live comm and context, destroyed once, comm first (ABI order).
        let c = unsafe { (t.comm_destroy.expect("validated"))(self.comm) };
        // Its last-error text, before `finalize` may replace it.
        let destroyed = match c {
            FX_OK => Ok(()),
            c => Err(error_of(&self.lib, "comm_destroy", c)),
        };
        // SAFETY: as above; the context after its comm.
        let f = unsafe { (t.finalize.expect("validated"))(self.ctx) };
        if f != FX_OK {
            tracing::warn!(target: "ferrocx::collective", "{}", error_of(&self.lib, "finalize", f));
        }
        destroyed
    }
}

impl Drop for CollectivePlugin {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!(target: "ferrocx::collective", "{e}");
        }
    }
}

/// The error for a failed hook, with the plugin's last-error text.
fn error_of(lib: &CollectiveLib, hook: &'static str, code: i32) -> Error {
    hook_error(&lib.name, lib.table().last_error, hook, code)
}
