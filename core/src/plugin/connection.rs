//! An established end of a connection to a peer, and which way it carries
//! data. Made by the proxy's connection phases (`proxy::connect`), owned by
//! the engine, freed through its plugin when dropped.

use super::instance::{PluginInstance, RawConn};
use std::sync::Arc;

/// Which way data flows on a connection, from this rank's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// This rank sends.
    Send,
    /// This rank receives.
    Recv,
}

/// An established connection end.
pub(crate) struct Connection {
    pub plugin: Arc<PluginInstance>,
    pub raw: RawConn,
    pub peer: usize,
    pub dir: Dir,
    pub channel: u32,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Err(e) = self.plugin.free(self.raw, self.peer) {
            tracing::warn!(target: "ferrocx::comm", "freeing connection to rank {}: {e}", self.peer);
        }
    }
}
