//! Plugins: discovery and loading ([`Registry`]), validation ([`PluginLib`]),
//! live contexts ([`PluginInstance`]), per-peer selection ([`select`]) and
//! established connection ends (`Connection`).

mod connection;
mod host;
mod instance;
pub mod library;
mod registry;
pub mod select;

pub(crate) use connection::Connection;
pub use connection::Dir;
pub(crate) use host::HostTable;
pub use instance::{PluginInstance, RawConn, RawMemHandle, RawRequest};
pub use library::{PluginLib, PluginSource};
pub use registry::{PluginReport, Registry};
pub use select::{NameFilter, TransportFilter};
