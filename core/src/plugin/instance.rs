//! An initialized plugin context (one per plugin per communicator) and safe
//! wrappers for its hooks: every non-OK code becomes an [`Error::Plugin`]
//! carrying the plugin's last-error text, the hook and the peer.

use super::host::HostTable;
use super::library::PluginLib;
use crate::error::{Error, Result};
use ferrocx_sdk::abi::*;
use std::ffi::c_void;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

/// A live plugin context.
pub struct PluginInstance {
    /// The library and table.
    pub lib: Arc<PluginLib>,
    ctx: *mut c_void,
    _host: HostTable,
}

// SAFETY: the ABI requires contexts to be usable from any thread
// (register/deregister concurrently; connection hooks serialized by the core).
unsafe impl Send for PluginInstance {}
// SAFETY: as above.
unsafe impl Sync for PluginInstance {}

/// A raw request handle owned by the plugin until `test` reports done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRequest(pub(crate) *mut c_void);
// SAFETY: an opaque token, only used under the connection's serialization.
unsafe impl Send for RawRequest {}

/// A raw connection handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawConn(pub(crate) *mut c_void);
// SAFETY: as for RawRequest.
unsafe impl Send for RawConn {}

/// A raw registration handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawMemHandle(pub(crate) *mut c_void);
// SAFETY: registrations may be used from any thread per the ABI.
unsafe impl Send for RawMemHandle {}
// SAFETY: as above.
unsafe impl Sync for RawMemHandle {}

impl PluginInstance {
    /// Call `init`.
    pub fn init(lib: Arc<PluginLib>, timeout: Duration, abort: Arc<AtomicU32>) -> Result<Self> {
        let host = HostTable::new(&lib.name, timeout, abort);
        let mut ctx: *mut c_void = std::ptr::null_mut();
        let init = lib.table().init.expect("validated");
        // SAFETY: validated table; host table outlives the context (owned by self).
        let code = unsafe { init(host.as_ptr(), &mut ctx) };
        let inst = PluginInstance {
            lib,
            ctx,
            _host: host,
        };
        if code != FX_OK {
            let e = inst.error("init", None, code);
            std::mem::forget(inst); // no context to finalize
            return Err(e);
        }
        if inst.ctx.is_null() {
            let e = Error::Plugin {
                plugin: inst.lib.name.clone(),
                hook: "init",
                peer: None,
                code: FX_INTERNAL,
                message: "returned OK but no context".into(),
            };
            std::mem::forget(inst);
            return Err(e);
        }
        Ok(inst)
    }

    /// The raw context pointer, for conformance tools.
    pub fn raw_ctx(&self) -> *mut c_void {
        self.ctx
    }

    /// Plugin name.
    pub fn name(&self) -> &str {
        &self.lib.name
    }

    fn t(&self) -> &FxTransportV1 {
        self.lib.table()
    }

    /// Build the error for a failed hook, fetching the plugin's last-error text.
    pub(crate) fn error(&self, hook: &'static str, peer: Option<usize>, code: i32) -> Error {
        let message = super::library::last_error_text(self.t().last_error);
        Error::Plugin {
            plugin: self.lib.name.clone(),
            hook,
            peer,
            code,
            message,
        }
    }

    fn check(&self, hook: &'static str, peer: Option<usize>, code: i32) -> Result<()> {
        if code == FX_OK {
            Ok(())
        } else {
            Err(self.error(hook, peer, code))
        }
    }

    /// `can_connect` score (errors count as 0).
    pub fn can_connect(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32 {
        let f = self.t().can_connect.expect("validated");
        // SAFETY: live context, valid peer records.
        unsafe { f(self.ctx, me, peer) }.max(0)
    }

    /// `setup`: returns the connection and its blob.
    pub fn setup(&self, req: &FxConnReq) -> Result<(RawConn, FxBlob)> {
        let f = self.t().setup.expect("validated");
        let mut conn: *mut c_void = std::ptr::null_mut();
        let mut blob = FxBlob::new();
        // SAFETY: live context and valid out-pointers.
        let code = unsafe { f(self.ctx, req, &mut conn, &mut blob) };
        self.check("setup", Some(req.peer.rank as usize), code)?;
        if conn.is_null() {
            return Err(Error::Plugin {
                plugin: self.lib.name.clone(),
                hook: "setup",
                peer: Some(req.peer.rank as usize),
                code: FX_INTERNAL,
                message: "returned OK but no connection".into(),
            });
        }
        if blob.len as usize > FX_BLOB_BYTES {
            return Err(Error::Plugin {
                plugin: self.lib.name.clone(),
                hook: "setup",
                peer: Some(req.peer.rank as usize),
                code: FX_INTERNAL,
                message: format!("blob length {} exceeds {FX_BLOB_BYTES}", blob.len),
            });
        }
        Ok((RawConn(conn), blob))
    }

    /// `connect`: `Ok(true)` when done, `Ok(false)` when in progress.
    pub fn connect(&self, conn: RawConn, peer_blob: &FxBlob, peer: usize) -> Result<bool> {
        let f = self.t().connect.expect("validated");
        // SAFETY: conn came from setup and was not freed.
        let code = unsafe { f(conn.0, peer_blob) };
        match code {
            FX_IN_PROGRESS => Ok(false),
            c => self.check("connect", Some(peer), c).map(|_| true),
        }
    }

    /// Optional `proxy_setup` / `proxy_connect`.
    pub fn proxy_hook(&self, which: &'static str, conn: RawConn, peer: usize) -> Result<()> {
        let f = if which == "proxy_setup" {
            self.t().proxy_setup
        } else {
            self.t().proxy_connect
        };
        match f {
            // SAFETY: conn came from setup and was not freed.
            Some(f) => self.check(which, Some(peer), unsafe { f(conn.0) }),
            None => Ok(()),
        }
    }

    /// Whether the plugin wants background progress.
    pub fn has_proxy_progress(&self) -> bool {
        self.t().proxy_progress.is_some()
    }

    /// Optional `proxy_progress`: returns whether anything moved.
    pub fn proxy_progress(&self, conn: RawConn, peer: usize) -> Result<bool> {
        let Some(f) = self.t().proxy_progress else {
            return Ok(false);
        };
        let mut did = 0i32;
        // SAFETY: conn came from setup and was not freed; serialized by the caller.
        self.check("proxy_progress", Some(peer), unsafe { f(conn.0, &mut did) })?;
        Ok(did != 0)
    }

    /// Whether the plugin moves CUDA device memory itself (`FX_CAP_CUDA_MEM`).
    pub fn takes_device_memory(&self) -> bool {
        self.t().caps & ferrocx_sdk::abi::FX_CAP_CUDA_MEM != 0
    }

    /// Whether registration is meaningful for this plugin.
    pub fn can_register(&self) -> bool {
        self.t().reg.is_some() && self.t().caps & FX_CAP_REGISTER != 0
    }

    /// `register`.
    pub fn register(&self, ptr: *mut u8, len: usize, kind: i32) -> Result<RawMemHandle> {
        let Some(f) = self.t().reg else {
            return Err(Error::Unsupported(format!(
                "plugin '{}' has no register hook",
                self.name()
            )));
        };
        let mut mh: *mut c_void = std::ptr::null_mut();
        let mut blob = FxBlob::new();
        // SAFETY: the caller guarantees the memory range stays valid until deregister.
        let code = unsafe { f(self.ctx, ptr as *mut c_void, len, kind, &mut mh, &mut blob) };
        self.check("register", None, code)?;
        Ok(RawMemHandle(mh))
    }

    /// `deregister`.
    pub fn deregister(&self, mh: RawMemHandle) -> Result<()> {
        match self.t().deregister {
            // SAFETY: mh came from register on this context.
            Some(f) => self.check("deregister", None, unsafe { f(self.ctx, mh.0) }),
            None => Ok(()),
        }
    }

    /// `isend`: `Ok(None)` means retry later.
    ///
    /// # Safety
    /// `data..data+len` must stay valid until the request completes.
    pub unsafe fn isend(
        &self,
        conn: RawConn,
        data: *const u8,
        len: usize,
        mh: Option<RawMemHandle>,
        peer: usize,
    ) -> Result<Option<RawRequest>> {
        let f = self.t().isend.expect("validated");
        let mut req: *mut c_void = std::ptr::null_mut();
        let mh = mh.map_or(std::ptr::null_mut(), |m| m.0);
        let code = f(conn.0, data as *const c_void, len, mh, &mut req);
        self.check("isend", Some(peer), code)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    /// `irecv`: `Ok(None)` means retry later.
    ///
    /// # Safety
    /// `data..data+len` must stay valid and untouched until the request completes.
    pub unsafe fn irecv(
        &self,
        conn: RawConn,
        data: *mut u8,
        len: usize,
        mh: Option<RawMemHandle>,
        peer: usize,
    ) -> Result<Option<RawRequest>> {
        let f = self.t().irecv.expect("validated");
        let mut req: *mut c_void = std::ptr::null_mut();
        let mh = mh.map_or(std::ptr::null_mut(), |m| m.0);
        let code = f(conn.0, data as *mut c_void, len, mh, &mut req);
        self.check("irecv", Some(peer), code)?;
        Ok((!req.is_null()).then_some(RawRequest(req)))
    }

    /// `test`: `Ok(Some(nbytes))` when done. The request is gone after done or error.
    pub fn test(&self, req: RawRequest, peer: usize, hook: &'static str) -> Result<Option<usize>> {
        let f = self.t().test.expect("validated");
        let (mut done, mut n) = (0i32, 0usize);
        // SAFETY: req came from isend/irecv and has not completed.
        let code = unsafe { f(req.0, &mut done, &mut n) };
        self.check(hook, Some(peer), code)?;
        Ok((done != 0).then_some(n))
    }

    /// `free`.
    pub fn free(&self, conn: RawConn, peer: usize) -> Result<()> {
        let f = self.t().free.expect("validated");
        // SAFETY: conn came from setup and is freed once.
        self.check("free", Some(peer), unsafe { f(conn.0) })
    }
}

impl Drop for PluginInstance {
    fn drop(&mut self) {
        let f = self.t().finalize.expect("validated");
        // SAFETY: every connection and registration was released before the
        // instance is dropped (the communicator owns them and drops them first).
        let code = unsafe { f(self.ctx) };
        if code != FX_OK {
            let e = self.error("finalize", None, code);
            tracing::warn!(target: "ferrocx::plugin", "{e}");
        }
    }
}
