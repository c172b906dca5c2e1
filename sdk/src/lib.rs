//! # ferrocx-sdk — the transport plugin ABI and what plugins build on
//!
//! Two kinds of plugin, one discipline: transports and collectives.
//!
//! A ferrocx transport is a table of C hooks ([`abi::FxTransportV1`]) exported
//! by a shared library as `ferrocx_transport_v1`, or linked into the core as a
//! built-in. Rust plugins implement the safe [`Transport`] trait and let
//! [`export_transport!`] / [`register_builtin!`] generate the table; C plugins
//! include `sdk/include/ferrocx_plugin.h`, the hook-by-hook reference. See
//! `docs/PLUGINS.md`. A collective plugin (whole collectives, chosen per call)
//! implements [`collective::Collective`] and is exported with
//! [`export_collective!`] / [`register_builtin_collective!`]; its reference is
//! `sdk/include/ferrocx_collective.h`.
//!
//! What crosses a process boundary is a fixed-size [`Blob`] holding
//! [`Shareable`] values only; panics never cross the ABI (every generated hook
//! runs inside `catch_unwind`).
//!
//! Besides the ABI, the pieces a plugin builds on (a plugin never links the
//! core): [`same_host`] (the whole transport between processes of one host,
//! generic over a copy back end), [`device`] (GPU memory shared between
//! processes: CUDA IPC export, open, caches), [`copy`] (ordered copy
//! engines), [`region`] and [`sweep`] (named shared memory and its orphans),
//! [`failover`] (rail health), [`mod@env`] (settings), [`cuda`] (guarded driver
//! access, feature `cuda`).

pub mod abi;
mod blob;
pub mod collective;
pub mod copy;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod devnet;
pub mod env;
mod error;
mod export;
pub mod failover;
mod host;
pub mod iface;
#[cfg(feature = "cuda")]
pub mod kernels;
pub mod proc;
pub mod region;
pub mod same_host;
pub mod spans;
pub mod sweep;
pub mod sysfs;
pub mod tcp;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod transport;

pub use blob::{Blob, Shareable};
pub use error::{last_error, set_last_error, PluginError, PluginResult};
pub use export::{builtin_transports, transport_table, BuiltinTransport};
pub use host::{DetachedHost, Host, Level};
pub use transport::{ConnReq, ConnectState, Direction, MemKind, Transport};

#[doc(hidden)]
pub use inventory;
