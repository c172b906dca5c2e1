//! # ferrocx-net-socket — the TCP socket transport
//!
//! Moves host memory between ranks on any hosts over TCP. One connection is
//! one direction (sender → receiver) over one TCP stream:
//!
//! * `setup` on the receiving end listens on the chosen interface address
//!   (port chosen by the kernel) and puts (family, address, port, a random
//!   64-bit token) in its blob; the sending end connects without blocking in
//!   `connect` and writes a hello carrying the token first; the receiver
//!   accepts in its `connect` and rejects connections that do not present it.
//! * Each message is a 16-byte header (magic, sequence number, length) and the
//!   payload. Messages match in posting order per connection. A message longer
//!   than its receive is drained and fails that receive alone (naming both
//!   sizes); a shorter one completes with its length.
//! * Sockets are non-blocking with `TCP_NODELAY`; progress happens in `test`
//!   (and right when a send is posted); sends use `MSG_NOSIGNAL`. End of stream
//!   or a reset with requests outstanding fails them naming the peer rank.
//!
//! ## Environment (see [`config`])
//!
//! | variable | default |
//! |---|---|
//! | `FERROCX_SOCKET_DISABLE` | `0` |
//! | `FERROCX_SOCKET_IFNAME` | first up interface that is not loopback or docker, else loopback |
#![warn(missing_docs)]

pub mod config;
mod conn;
pub mod iface;
mod sock;
mod wire;

pub use config::{Config, IfSpec};
pub use conn::{SocketConn, SocketRequest};

use ferrocx_sdk::abi::{FxPeerInfo, FX_CAP_CROSS_HOST, FX_CAP_HOST_MEM};
use ferrocx_sdk::{Blob, ConnReq, ConnectState, Host, PluginResult, Transport};
use std::net::{SocketAddr, SocketAddrV6};

/// Score for a peer on the same host (below shm's 100, so shm wins there).
pub const SAME_HOST_SCORE: i32 = 1;
/// Score for a peer on another host.
pub const OTHER_HOST_SCORE: i32 = 50;

/// The net-socket transport: one value per plugin context.
pub struct NetSocket {
    host: Host,
    cfg: Config,
    /// The address to listen on (port 0), or `None` when no interface qualifies.
    local: Option<SocketAddr>,
}

impl NetSocket {
    /// A context with an explicit configuration (`init` reads it from the environment).
    pub fn with_config(host: Host, cfg: Config) -> PluginResult<Self> {
        let mut local = None;
        if cfg.disabled {
            host.info("net-socket: disabled by FERROCX_SOCKET_DISABLE");
        } else {
            match iface::list().and_then(|l| iface::choose(&l, cfg.ifname.as_ref())) {
                Ok(a) => {
                    host.info(format!("net-socket: using interface {} ({})", a.name, a.ip));
                    local = Some(match a.ip {
                        std::net::IpAddr::V4(ip) => SocketAddr::new(ip.into(), 0),
                        std::net::IpAddr::V6(ip) => {
                            SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, a.scope_id))
                        }
                    });
                }
                Err(e) => host.warn(format!("{}; net-socket will not be offered", e.message())),
            }
        }
        Ok(NetSocket { host, cfg, local })
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The address connections listen on (port 0 stands for "any").
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }
}

impl Transport for NetSocket {
    type Conn = SocketConn;
    type Request = SocketRequest;
    type MemHandle = ();

    const NAME: &'static str = "net-socket";
    const CAPS: u64 = FX_CAP_HOST_MEM | FX_CAP_CROSS_HOST;

    fn init(host: Host) -> PluginResult<Self> {
        let cfg = Config::from_host(&host)?;
        Self::with_config(host, cfg)
    }

    fn can_connect(&self, me: &FxPeerInfo, peer: &FxPeerInfo) -> i32 {
        if self.cfg.disabled || self.local.is_none() {
            0
        } else if me.host_hash == peer.host_hash {
            SAME_HOST_SCORE
        } else {
            OTHER_HOST_SCORE
        }
    }

    fn setup(&self, req: &ConnReq, out: &mut Blob) -> PluginResult<SocketConn> {
        SocketConn::setup(self.host, self.local, req, out)
    }

    fn connect(&self, conn: &mut SocketConn, peer: &Blob) -> PluginResult<ConnectState> {
        conn.connect(peer)
    }

    // SAFETY: the caller keeps the buffer valid and unmodified until the request
    // completes (Transport::isend's contract); the connection only reads it.
    unsafe fn isend(
        &self,
        conn: &mut SocketConn,
        data: *const u8,
        len: usize,
        _mhandle: Option<&()>,
    ) -> PluginResult<Option<SocketRequest>> {
        conn.post_send(data as usize, len)
    }

    // SAFETY: the caller keeps the buffer valid and unaliased until the request
    // completes (Transport::irecv's contract); the connection writes at most `len` bytes.
    unsafe fn irecv(
        &self,
        conn: &mut SocketConn,
        data: *mut u8,
        len: usize,
        _mhandle: Option<&()>,
    ) -> PluginResult<Option<SocketRequest>> {
        conn.post_recv(data as usize, len)
    }

    fn test(&self, req: &mut SocketRequest) -> PluginResult<Option<usize>> {
        req.test()
    }

    fn free(&self, conn: SocketConn) -> PluginResult<()> {
        // Dropping cancels what is pending and closes the sockets.
        drop(conn);
        Ok(())
    }
}

ferrocx_sdk::register_builtin!(NetSocket);
