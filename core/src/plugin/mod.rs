//! Plugins: discovery and loading ([`Registry`]), validation ([`PluginLib`]),
//! live contexts ([`PluginInstance`]) and per-peer selection ([`select`]).

mod host;
mod instance;
mod library;
mod registry;
pub mod select;

pub use instance::{PluginInstance, RawConn, RawMemHandle, RawRequest};
pub use library::{PluginLib, PluginSource};
pub use registry::{PluginReport, Registry};
pub use select::TransportFilter;
