//! The safe Rust side of the collective ABI: implement [`Collective`], then
//! export it with [`export_collective!`](crate::export_collective) (a `.so`)
//! or [`register_builtin_collective!`](crate::register_builtin_collective)
//! (linked into the core). The hook-by-hook reference is
//! `sdk/include/ferrocx_collective.h`.

mod desc;
pub(crate) mod export;
mod oob;
mod p2p;

pub use desc::{elem_bytes, Coll, CollDesc, CommInfo, WindowDesc, WindowRef};
pub use export::{builtin_collectives, collective_table, BuiltinCollective};
pub use oob::Oob;
pub use p2p::{P2pDesc, P2pDir, P2pOp};

use crate::error::PluginResult;
use crate::host::Host;
use std::ffi::c_void;

/// A collective plugin. One value of `Self` is one plugin context.
///
/// The core serializes the hooks of one communicator, hence `&mut Self::Comm`
/// (state a plugin shares with its own threads lives behind its own `Arc`s).
pub trait Collective: Sized + Send + Sync + 'static {
    /// Per-communicator state.
    type Comm: Send + 'static;
    /// A registered symmetric window.
    type Window: Send + 'static;

    /// Plugin name (at most 31 bytes), e.g. `"ce"`.
    const NAME: &'static str;
    /// `FX_COLL_CAP_*` bits.
    const CAPS: u64;

    /// Create a context.
    fn init(host: Host) -> PluginResult<Self>;
    /// State for one communicator. `oob` works until `comm_destroy` (keep it
    /// in the comm for window setup); an `FX_UNSUPPORTED` error means "nothing
    /// for this communicator".
    fn comm_init(&self, info: &CommInfo, oob: Oob) -> PluginResult<Self::Comm>;
    /// Release a communicator's state.
    fn comm_destroy(&self, _comm: Self::Comm) -> PluginResult<()> {
        Ok(())
    }
    /// Priority for running `coll`: 0 = cannot; beat
    /// [`FX_COLL_CORE_PRIORITY`](crate::abi::FX_COLL_CORE_PRIORITY) to be chosen
    /// over the core. The same on every rank for the same call.
    fn can_run(&self, comm: &Self::Comm, coll: &CollDesc<'_, Self::Window>) -> i32;
    /// The path this plugin takes for `coll`, in a few words (its protocol or
    /// route), decided as [`can_run`](Self::can_run) decides; `None` (the
    /// default): nothing beyond the plugin's name. For selection tables
    /// (`fxinfo`), never asked on a call's path.
    fn describe(&self, _comm: &Self::Comm, _coll: &CollDesc<'_, Self::Window>) -> Option<String> {
        None
    }
    /// Register a symmetric window (collective); `None` = of no use here.
    fn window_register(
        &self,
        _comm: &mut Self::Comm,
        _desc: &WindowDesc,
    ) -> PluginResult<Option<Self::Window>> {
        Ok(None)
    }
    /// Release a window (collective).
    fn window_deregister(&self, _comm: &mut Self::Comm, _win: Self::Window) -> PluginResult<()> {
        Ok(())
    }
    /// Run `coll`: host memory to completion, CUDA memory queued on `stream`.
    ///
    /// # Safety
    /// The descriptor's buffers are the caller's, valid as the header says;
    /// `stream` is a live `CUstream` of this rank's device (or null).
    unsafe fn launch(
        &self,
        comm: &mut Self::Comm,
        coll: &CollDesc<'_, Self::Window>,
        stream: *mut c_void,
    ) -> PluginResult<()>;
    /// Priority for running the one op of `desc` (a device send or receive,
    /// or a host one, blocking or not): 0 = cannot, above
    /// `FX_COLL_CORE_PRIORITY` to be chosen.
    /// Decide from the op and the communicator alone, never the rest of its
    /// group: the peer is asked about the matching op and must agree.
    fn p2p_can_run(&self, _comm: &Self::Comm, _desc: &P2pDesc) -> i32 {
        0
    }
    /// Run the ops of one group this plugin won (posted order): CUDA memory
    /// queued on `stream`; host memory (`stream` null) to completion, a
    /// receive of another size than its send failing with
    /// `PluginError::invalid("mismatched sizes: …")`.
    ///
    /// # Safety
    /// As [`launch`](Self::launch), for every op's buffer.
    unsafe fn p2p_launch(
        &self,
        _comm: &mut Self::Comm,
        _desc: &P2pDesc,
        _stream: *mut c_void,
    ) -> PluginResult<()> {
        Err(crate::PluginError::unsupported(format!(
            "{} runs no point-to-point operations",
            Self::NAME
        )))
    }
    /// Asked right after a CUDA-memory [`launch`](Self::launch) or
    /// [`p2p_launch`](Self::p2p_launch) succeeded: whether what it queued
    /// (and everything of this plugin it waits for) ends by itself within
    /// the timeout even if a peer never comes — a kernel that gives up on
    /// the device — so no host thread of the plugin has to act for the
    /// stream to move on. `false` (the default) when it may wait for one (a
    /// watchdog's release, a proxy).
    fn launch_bounded(&self, _comm: &Self::Comm) -> bool {
        false
    }
    /// The asynchronous error that broke the communicator, if any.
    fn status(&self, _comm: &Self::Comm) -> PluginResult<()> {
        Ok(())
    }
    /// Tear the context down.
    fn finalize(self) -> PluginResult<()> {
        Ok(())
    }
}
