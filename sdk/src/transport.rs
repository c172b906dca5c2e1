//! The safe Rust side of the ABI: implement [`Transport`], then export it with
//! [`export_transport!`](crate::export_transport) (a `.so`) or
//! [`register_builtin!`](crate::register_builtin) (linked into the core).

use crate::abi::{FxConnReq, FxPeerInfo, FX_DIR_RECV, FX_MEM_CUDA, FX_MEM_HOST};
use crate::blob::Blob;
use crate::error::{PluginError, PluginResult};
use crate::host::Host;

/// Which end of a connection `setup` creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// This rank sends on the connection.
    Send,
    /// This rank receives on the connection.
    Recv,
}

/// Memory kind of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    /// Host memory.
    Host,
    /// CUDA device memory.
    Cuda,
}

impl MemKind {
    /// From the ABI constant.
    #[inline]
    pub fn from_raw(raw: i32) -> PluginResult<Self> {
        match raw {
            FX_MEM_HOST => Ok(MemKind::Host),
            FX_MEM_CUDA => Ok(MemKind::Cuda),
            other => Err(PluginError::invalid(format!("unknown memory kind {other}"))),
        }
    }
}

/// The parsed `setup` request.
#[derive(Clone, Copy)]
pub struct ConnReq {
    /// Raw request (peer infos included).
    pub raw: FxConnReq,
    /// Which end this is.
    pub direction: Direction,
}

impl ConnReq {
    /// Parse the raw request.
    pub fn from_raw(raw: &FxConnReq) -> Self {
        let direction = if raw.direction == FX_DIR_RECV {
            Direction::Recv
        } else {
            Direction::Send
        };
        ConnReq {
            raw: *raw,
            direction,
        }
    }
    /// This rank.
    pub fn me(&self) -> &FxPeerInfo {
        &self.raw.me
    }
    /// The other end.
    pub fn peer(&self) -> &FxPeerInfo {
        &self.raw.peer
    }
}

/// Outcome of [`Transport::connect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectState {
    /// The connection is ready for data.
    Done,
    /// Call `connect` again (the peer has not caught up yet).
    InProgress,
}

/// A transport plugin. One value of `Self` is one plugin context (one per communicator).
///
/// The core serializes every call that takes the same connection; `register`
/// and `deregister` may run concurrently with anything, hence `Sync`.
pub trait Transport: Sized + Send + Sync + 'static {
    /// One end of a connection.
    type Conn: Send + 'static;
    /// An outstanding send or receive.
    type Request: Send + 'static;
    /// A registration.
    type MemHandle: Send + Sync + 'static;

    /// Plugin name (at most 31 bytes), e.g. `"shm"`.
    const NAME: &'static str;
    /// `FX_CAP_*` bits.
    const CAPS: u64;

    /// Create a context.
    fn init(host: Host) -> PluginResult<Self>;
    /// Score for `me` → `peer`: 0 = cannot, higher = preferred.
    fn can_connect(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32;
    /// Create one end and describe it in `out` for the peer.
    fn setup(&self, req: &ConnReq, out: &mut Blob) -> PluginResult<Self::Conn>;
    /// Finish the connection with the peer's blob.
    fn connect(&self, conn: &mut Self::Conn, peer: &Blob) -> PluginResult<ConnectState>;
    /// Work to run on the proxy service thread after setup.
    fn proxy_setup(&self, _conn: &mut Self::Conn) -> PluginResult<()> {
        Ok(())
    }
    /// Work to run on the proxy service thread after connect.
    fn proxy_connect(&self, _conn: &mut Self::Conn) -> PluginResult<()> {
        Ok(())
    }
    /// Whether [`proxy_progress`](Self::proxy_progress) does anything. When false
    /// (the default) the generated table leaves the hook null and the core
    /// never calls it.
    const NEEDS_PROXY_PROGRESS: bool = false;
    /// Background progress on the progress thread (called on every sweep while
    /// the connection has operations in flight); returns whether anything moved.
    fn proxy_progress(&self, _conn: &mut Self::Conn) -> PluginResult<bool> {
        Ok(false)
    }
    /// Register memory. The default says registration is not supported.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid memory of `kind` until `deregister`.
    unsafe fn register(
        &self,
        _ptr: *mut u8,
        _len: usize,
        _kind: MemKind,
        _out: &mut Blob,
    ) -> PluginResult<Self::MemHandle> {
        Err(PluginError::unsupported(format!(
            "{} does not register memory",
            Self::NAME
        )))
    }
    /// Release a registration.
    fn deregister(&self, _handle: Self::MemHandle) -> PluginResult<()> {
        Ok(())
    }
    /// Post a send; `Ok(None)` means "not now, try again".
    ///
    /// # Safety
    /// `data..data+len` must stay valid and unmodified until the request completes.
    unsafe fn isend(
        &self,
        conn: &mut Self::Conn,
        data: *const u8,
        len: usize,
        mhandle: Option<&Self::MemHandle>,
    ) -> PluginResult<Option<Self::Request>>;
    /// Post a receive of at most `len` bytes; `Ok(None)` means "not now".
    ///
    /// # Safety
    /// `data..data+len` must stay valid and untouched by others until the request completes.
    unsafe fn irecv(
        &self,
        conn: &mut Self::Conn,
        data: *mut u8,
        len: usize,
        mhandle: Option<&Self::MemHandle>,
    ) -> PluginResult<Option<Self::Request>>;
    /// Progress a request; `Some(nbytes)` once complete.
    fn test(&self, req: &mut Self::Request) -> PluginResult<Option<usize>>;
    /// Close a connection (cancels requests still outstanding).
    fn free(&self, conn: Self::Conn) -> PluginResult<()>;
    /// Tear the context down.
    fn finalize(self) -> PluginResult<()> {
        Ok(())
    }
}
