//! # ferrocx-net-socket — the TCP socket transport
//!
//! Moves host memory between ranks on any hosts over TCP. One connection is one
//! direction (sender → receiver) carried by `rails × FERROCX_SOCKET_NSOCKS` sockets:
//!
//! * **Rails.** Every interface `FERROCX_SOCKET_IFNAME` allows (up to
//!   `FERROCX_SOCKET_NRAILS`, one address each, one family) is a rail. The receiving
//!   end listens on each of its rails and puts the addresses and a random 64-bit token
//!   in its blob; the sending end connects its rail *i* (bound to that interface's
//!   address) to the receiver's rail *i*, and each socket's first bytes are a hello
//!   with the token and the socket's index. Both ends use `min(their rails)`.
//! * **Chunks.** A message is cut into `FERROCX_SOCKET_CHUNK_SIZE` chunks, each sent
//!   as a 32-byte frame (sequence number, message length, offset) and its payload on
//!   whichever socket can take bytes, so faster rails carry more. Receives match
//!   messages by sequence number (the n-th receive gets the n-th send) and place each
//!   chunk at its offset, straight from the socket into the receive buffer. A message
//!   longer than its receive fails that receive alone (naming both sizes); a shorter
//!   one completes with its length.
//! * **One rail**: a send completes when its bytes are in the kernel, as plain TCP.
//!   A failed socket fails the connection: there is nowhere to resend.
//! * **Two rails or more**: the receiver acknowledges every chunk once it is in place
//!   (32-byte frames on the reverse direction of the same socket) and a send
//!   completes when all its chunks are acknowledged; at most `FERROCX_SOCKET_WINDOW`
//!   bytes are unacknowledged. When a rail fails — a reset, an end of stream, or data
//!   unacknowledged by the peer's kernel for `FERROCX_SOCKET_RAIL_TIMEOUT`
//!   (`TCP_USER_TIMEOUT`; idle sockets with chunks outstanding send 32-byte pings so
//!   the timer runs) — its sockets are closed with a reset, its unacknowledged chunks
//!   are resent on the surviving rails, and the path (my address, the peer's address)
//!   is marked down in the context's [`PathHealth`],
//!   so every other connection to that peer over that path moves off it too. The
//!   receiver drops chunks it already has and never writes into a receive after it
//!   completed, so nothing is lost or duplicated. After `FERROCX_SOCKET_RECOVERY` of
//!   quiet the sender reconnects the rail's sockets (the receiver keeps listening and
//!   a reconnected socket replaces its predecessor); when every socket of the rail is
//!   back it carries chunks again. A failed probe doubles the wait (up to 8×,
//!   jittered by a quarter). A rail down at connect leaves the connection on the
//!   others. When the last rail fails, every rail is probed at once, and the
//!   connection fails — naming the peer — only when none came back within twice
//!   the rail timeout. Failover is logged at warn, recovery at info, both with the
//!   rail's addresses and the peer's rank. The decisions (rail states, resend
//!   queue, window) are `ferrocx_sdk::failover::RailSet`, a sans-IO state machine.
//! * **Acknowledgements that die with a rail.** A receive completes only once its
//!   acknowledgements are written; receivers with nothing posted are still given a
//!   turn by every `test` of the context (`linger`), to acknowledge resent chunks;
//!   and a receiver that frees its end sends a goodbye frame naming the messages it
//!   has in full, which the sender completes.
//! * Sockets are non-blocking with `TCP_NODELAY`; progress happens in `test` (and
//!   when a send is posted); sends use `MSG_NOSIGNAL`.
//!
//! ## Environment (see [`config`])
//!
//! | variable | default |
//! |---|---|
//! | `FERROCX_SOCKET_DISABLE` | `0` |
//! | `FERROCX_SOCKET_IFNAME` | every up interface that is not loopback or docker, else loopback |
//! | `FERROCX_SOCKET_NRAILS` | `4` |
//! | `FERROCX_SOCKET_NSOCKS` | `1` |
//! | `FERROCX_SOCKET_CHUNK_SIZE` | `524288` |
//! | `FERROCX_SOCKET_WINDOW` | `33554432` |
//! | `FERROCX_SOCKET_RAIL_TIMEOUT` | `5s` |
//! | `FERROCX_SOCKET_RECOVERY` | `10s` |
#![warn(missing_docs)]

mod accept;
mod blob;
pub mod config;
mod conn;
mod dial;
mod linger;
mod recv;
mod send;
mod sock;
mod wire;

pub use config::Config;
pub use conn::{SocketConn, SocketRequest};
pub use ferrocx_sdk::iface::{self, IfSpec};

use ferrocx_sdk::abi::{FxPeerInfo, FX_CAP_CROSS_HOST, FX_CAP_HOST_MEM};
use ferrocx_sdk::failover::PathHealth;
use ferrocx_sdk::{Blob, ConnReq, ConnectState, Host, PluginResult, Transport};
use linger::Linger;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::sync::Arc;

/// Health of every (my rail address, peer rail address) path, shared by the
/// connections of one context.
pub(crate) type Health = PathHealth<(IpAddr, IpAddr)>;

/// Score for a peer on the same host (below shm's 100, so shm wins there).
pub const SAME_HOST_SCORE: i32 = 1;
/// Score for a peer on another host.
pub const OTHER_HOST_SCORE: i32 = 50;

/// The net-socket transport: one value per plugin context.
pub struct NetSocket {
    host: Host,
    cfg: Config,
    /// The rails' addresses to listen and connect from (port 0); empty when no
    /// interface qualifies.
    rails: Vec<SocketAddr>,
    health: Arc<Health>,
    linger: Arc<Linger>,
}

impl NetSocket {
    /// A context with an explicit configuration (`init` reads it from the environment).
    pub fn with_config(host: Host, cfg: Config) -> PluginResult<Self> {
        let mut rails = Vec::new();
        if cfg.disabled {
            host.info("net-socket: disabled by FERROCX_SOCKET_DISABLE");
        } else {
            match iface::list()
                .and_then(|l| iface::choose_rails(&l, cfg.ifname.as_ref(), cfg.max_rails))
            {
                Ok(found) => {
                    let names: Vec<String> = found
                        .iter()
                        .map(|a| format!("{} ({})", a.name, a.ip))
                        .collect();
                    host.info(format!(
                        "net-socket: using {} rail(s): {} ({} socket(s) each)",
                        found.len(),
                        names.join(", "),
                        cfg.nsocks
                    ));
                    rails = found
                        .iter()
                        .map(|a| match a.ip {
                            IpAddr::V4(ip) => SocketAddr::new(ip.into(), 0),
                            IpAddr::V6(ip) => {
                                SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, a.scope_id))
                            }
                        })
                        .collect();
                }
                Err(e) => host.warn(format!("{}; net-socket will not be offered", e.message())),
            }
        }
        let health = Arc::new(Health::new(cfg.recovery));
        Ok(NetSocket {
            host,
            cfg,
            rails,
            health,
            linger: Arc::default(),
        })
    }

    /// A context striping over exactly `rails` (local addresses; the port is ignored),
    /// for tests and embedders that choose interfaces themselves.
    pub fn with_rails(host: Host, cfg: Config, rails: Vec<SocketAddr>) -> Self {
        let rails = rails
            .into_iter()
            .map(|a| SocketAddr::new(a.ip(), 0))
            .collect();
        let health = Arc::new(Health::new(cfg.recovery));
        NetSocket {
            host,
            cfg,
            rails,
            health,
            linger: Arc::default(),
        }
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The rails' local addresses (port 0), first one first.
    pub fn rails(&self) -> &[SocketAddr] {
        &self.rails
    }

    pub(crate) fn host(&self) -> Host {
        self.host
    }

    pub(crate) fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    pub(crate) fn linger(&self) -> &Linger {
        &self.linger
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
        if self.cfg.disabled || self.rails.is_empty() {
            0
        } else if me.host_hash == peer.host_hash {
            SAME_HOST_SCORE
        } else {
            OTHER_HOST_SCORE
        }
    }

    fn setup(&self, req: &ConnReq, out: &mut Blob) -> PluginResult<SocketConn> {
        SocketConn::setup(self, req, out)
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
        let r = req.test();
        self.linger.turn(std::time::Instant::now());
        r
    }

    fn free(&self, conn: SocketConn) -> PluginResult<()> {
        // Dropping cancels what is pending and closes the sockets.
        drop(conn);
        Ok(())
    }
}

ferrocx_sdk::register_builtin!(NetSocket);
