//! The safe Rust side of the device-networking ABI: implement [`DevNet`],
//! then export it with [`export_devnet!`](crate::export_devnet) (a `.so`) or
//! [`register_builtin_devnet!`](crate::register_builtin_devnet) (linked into
//! the core). The hook-by-hook reference is `sdk/include/ferrocx_devnet.h`.

mod export;

pub use export::{builtin_devnets, devnet_table, BuiltinDevnet};

use crate::abi::FxDevnetStats;
use crate::collective::{CommInfo, Oob, WindowDesc};
use crate::error::PluginResult;
use crate::host::Host;

/// A device-networking plugin. One value of `Self` is one plugin context.
///
/// The core serializes the hooks of one communicator, hence `&mut Self::Comm`
/// (what the plugin shares with its own threads lives behind its own `Arc`s).
pub trait DevNet: Sized + Send + Sync + 'static {
    /// Per-communicator state.
    type Comm: Send + 'static;

    /// Plugin name (at most 31 bytes), e.g. `"ibgda"`.
    const NAME: &'static str;
    /// `FX_DEVNET_CAP_*` bits.
    const CAPS: u64;

    /// Create a context.
    fn init(host: Host) -> PluginResult<Self>;
    /// Set up this rank's side of a communicator (collective); an
    /// `FX_UNSUPPORTED` error means "nothing for this communicator".
    fn comm_init(&self, info: &CommInfo, oob: Oob) -> PluginResult<Self::Comm>;
    /// Stop the communicator's threads and release its state.
    fn comm_destroy(&self, _comm: Self::Comm) -> PluginResult<()> {
        Ok(())
    }
    /// Register a symmetric window (collective): the number kernels name it by.
    fn window_register(&self, comm: &mut Self::Comm, desc: &WindowDesc) -> PluginResult<u32>;
    /// Release a window (collective).
    fn window_deregister(&self, comm: &mut Self::Comm, id: u32) -> PluginResult<()>;
    /// The device address of the view kernels of this rank take.
    fn device_view(&self, comm: &Self::Comm) -> PluginResult<u64>;
    /// The error a peer or path met, if any.
    fn status(&self, _comm: &Self::Comm) -> PluginResult<()> {
        Ok(())
    }
    /// Counters since `comm_init`.
    fn stats(&self, comm: &Self::Comm) -> FxDevnetStats;
    /// One line: the handler in use and why, the paths, the knobs.
    fn describe(&self, comm: &Self::Comm) -> String;
    /// Tear the context down.
    fn finalize(self) -> PluginResult<()> {
        Ok(())
    }
}
