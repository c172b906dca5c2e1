//! [`SameHost`]: the whole [`Transport`] for a copy back end. A plugin is a
//! [`Backend`] plus `pub type MyTransport = SameHost<MyBackend>;` and the
//! usual `register_builtin!` / `export_transport!`.

use super::backend::Backend;
use super::conn::{Conn, Request};
use super::ctx::Ctx;
use super::ops::{RecvOp, SendOp};
use super::segment::name_prefix;
use super::stats::CtxStats;
use crate::abi::FxPeerInfo;
use crate::blob::Blob;
use crate::error::PluginResult;
use crate::sweep::{sweep_stale, SHM_DIR};
use crate::transport::{ConnReq, ConnectState, MemKind, Transport};
use crate::Host;
use std::path::Path;
use std::sync::Arc;

/// A same-host transport over copy back end `B`: one value per plugin context.
pub struct SameHost<B: Backend> {
    ctx: Arc<Ctx<B>>,
}

impl<B: Backend> SameHost<B> {
    /// A context over `backend` (`init` makes one from the environment).
    /// Removes segments of processes that died before both ends mapped them.
    pub fn new(host: Host, backend: B) -> Self {
        let prefix = name_prefix(B::NAME);
        let removed = sweep_stale(Path::new(SHM_DIR), &[&prefix[1..]]);
        if !removed.is_empty() {
            host.info(format!(
                "{}: removed {} stale segment(s) of exited processes: {removed:?}",
                B::NAME,
                removed.len()
            ));
        }
        let cfg = backend.config();
        if cfg.disabled {
            host.info(format!(
                "{}: disabled by {}",
                B::NAME,
                cfg.knobs.var("DISABLE")
            ));
        } else {
            host.info(format!("{}: {}", B::NAME, backend.describe()));
        }
        SameHost {
            ctx: Arc::new(Ctx::new(host, backend)),
        }
    }

    /// The back end (its configuration and caches).
    pub fn backend(&self) -> &B {
        &self.ctx.backend
    }

    /// What the context holds (caches, handles, connections), for leak checks
    /// (frees buried FIFOs whose sender let go first).
    pub fn stats(&self) -> CtxStats {
        self.ctx.reap(false);
        self.ctx.stats()
    }
}

impl<B: Backend> Transport for SameHost<B> {
    type Conn = Conn<B>;
    type Request = Request<B>;
    type MemHandle = B::MemHandle;

    const NAME: &'static str = B::NAME;
    const CAPS: u64 = B::CAPS;

    fn init(host: Host) -> PluginResult<Self> {
        let backend = B::init(&host)?;
        Ok(Self::new(host, backend))
    }

    fn can_connect(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32 {
        if self.ctx.backend.config().disabled || me.host_hash != peer.host_hash {
            return 0;
        }
        self.ctx.backend.can_connect(&self.ctx.host, me, peer)
    }

    fn setup(&self, req: &ConnReq, out: &mut Blob) -> PluginResult<Conn<B>> {
        Conn::setup(&self.ctx, req, out)
    }

    fn connect(&self, conn: &mut Conn<B>, peer: &Blob) -> PluginResult<ConnectState> {
        conn.connect(peer)
    }

    // SAFETY: the caller keeps `ptr..ptr+len` valid until deregister (Transport::register's contract).
    unsafe fn register(
        &self,
        ptr: *mut u8,
        len: usize,
        kind: MemKind,
        out: &mut Blob,
    ) -> PluginResult<B::MemHandle> {
        // SAFETY: the same contract, passed on.
        unsafe {
            self.ctx
                .backend
                .register(&self.ctx.revocations, ptr, len, kind, out)
        }
    }

    fn deregister(&self, mem: B::MemHandle) -> PluginResult<()> {
        if self.ctx.backend.deregister(&self.ctx.revocations, mem) {
            self.ctx.forward_all();
        }
        Ok(())
    }

    // SAFETY: the caller keeps the buffer valid until the request completes (Transport::isend's contract).
    unsafe fn isend(
        &self,
        conn: &mut Conn<B>,
        data: *const u8,
        len: usize,
        _mhandle: Option<&B::MemHandle>,
    ) -> PluginResult<Option<Request<B>>> {
        conn.post_send(SendOp {
            src: data as u64,
            len,
        })
    }

    // SAFETY: the caller keeps the buffer valid and unaliased until the request completes (Transport::irecv's contract).
    unsafe fn irecv(
        &self,
        conn: &mut Conn<B>,
        data: *mut u8,
        len: usize,
        mhandle: Option<&B::MemHandle>,
    ) -> PluginResult<Option<Request<B>>> {
        let dst = data as u64;
        let reg = mhandle.and_then(|m| B::registration(m, dst, len));
        conn.post_recv(RecvOp::new(dst, len, reg))
    }

    fn test(&self, req: &mut Request<B>) -> PluginResult<Option<usize>> {
        req.test()
    }

    fn free(&self, conn: Conn<B>) -> PluginResult<()> {
        // Dropping waits for our copies, closes mappings, reports to the peer,
        // releases (or parks) the FIFO, unmaps and unlinks.
        drop(conn);
        self.ctx.reap(false);
        Ok(())
    }

    fn finalize(self) -> PluginResult<()> {
        self.ctx.reap_at_finalize();
        Ok(())
    }
}
