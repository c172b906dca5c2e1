//! What a runner hands the engine: transfers to queue ([`Post`]) through a
//! [`Poster`]. Apart from the runner so that the call check (`check.rs`) and the
//! runner both use it without depending on each other.

use crate::plugin::Dir;
use std::sync::Arc;

/// A transfer for the engine to queue: (channel, peer, dir, address, bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post {
    pub channel: usize,
    pub peer: usize,
    pub dir: Dir,
    pub ptr: usize,
    pub len: usize,
}

/// What `advance` needs from the engine: somewhere to queue transfers and
/// a way to know whether the last stage's transfers are done.
pub(crate) trait Poster {
    /// Queue transfers; they complete into the returned stage counter.
    fn post(&mut self, posts: &[Post]) -> Arc<super::StageDone>;
    /// Whether the connection for (channel, peer, dir) takes device memory itself
    /// (`FX_CAP_CUDA_MEM`); otherwise device runners stage through pinned host
    /// memory. `None` while the connection is still being made: a device
    /// stage waits for it before it decides.
    fn device_ok(&self, channel: usize, peer: usize, dir: Dir) -> Option<bool>;
}
