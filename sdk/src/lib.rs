//! # ferrocx-sdk — the transport plugin ABI
//!
//! A ferrocx transport is a table of C hooks ([`abi::FxTransportV1`]) exported
//! by a shared library as `ferrocx_transport_v1`, or linked into the core as a
//! built-in. Rust plugins implement the safe [`Transport`] trait and let
//! [`export_transport!`] / [`register_builtin!`] generate the table; C plugins
//! include `sdk/include/ferrocx_plugin.h`. See `docs/PLUGINS.md`.
//!
//! What crosses a process boundary is a fixed-size [`Blob`] holding
//! [`Shareable`] values only; panics never cross the ABI (every generated hook
//! runs inside `catch_unwind`).

pub mod abi;
mod blob;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod env;
mod error;
mod export;
pub mod failover;
mod host;
pub mod same_host;
mod transport;

pub use blob::{Blob, Shareable};
pub use error::{last_error, set_last_error, PluginError, PluginResult};
pub use export::{builtin_transports, transport_table, BuiltinTransport};
pub use host::{DetachedHost, Host, Level};
pub use transport::{ConnReq, ConnectState, Direction, MemKind, Transport};

#[doc(hidden)]
pub use inventory;
