//! Tunables of the p2p transport, read once at `init` through `Host::env`
//! (the ring settings parsed and checked by `ferrocx_sdk::same_host::config`).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_P2P_DISABLE` | `0` | `1` makes `can_connect` answer 0 (the transport is never chosen) |
//! | `FERROCX_P2P_CHUNK_SIZE` | `1048576` | bytes per FIFO slot (rounded up to 4 KiB; 4 KiB ..= 256 MiB) |
//! | `FERROCX_P2P_NSLOTS` | `8` | FIFO slots per connection (2 ..= 256); the receiver's GPU holds `NSLOTS × CHUNK_SIZE` per connection |
//! | `FERROCX_P2P_DIRECT` | `1` | `1`: any receive into CUDA device memory of at least the minimum is offered for a direct (zero-copy) write; `registered`: only registered receive buffers; `0`: never (always the FIFO) |
//! | `FERROCX_P2P_DIRECT_MIN` | `16384` | smallest message (bytes) that may take the direct path |
//! | `FERROCX_P2P_IPC_CACHE` | `64` | peer allocations a sending connection keeps opened (`cuIpcOpenMemHandle`), least recently used closed first |
//! | `FERROCX_P2P_EXPORT_CACHE` | `256` | handles of unregistered receive allocations a context keeps (`cuIpcGetMemHandle`) |
//! | `FERROCX_P2P_INVISIBLE` | `1` | a peer GPU that `CUDA_VISIBLE_DEVICES` hides from this process is assumed reachable (as NCCL does: CUDA IPC maps it anyway); `0` refuses such peers |
//!
//! FIFO geometry is decided by the receiving side (it allocates the FIFO) and
//! travels to the sender in the connect blob, so the two processes never need
//! to agree on these values. The direct-path settings are read on each side:
//! a receiver that offers nothing or a sender that does not wait for offers
//! both simply mean the FIFO.

use ferrocx_sdk::same_host::{Knobs, RingConfig};
use ferrocx_sdk::{env, Host, PluginError, PluginResult};

/// Default opened peer allocations per sending connection.
pub const DEFAULT_IPC_CACHE: usize = 64;
/// Default exported allocations per context.
pub const DEFAULT_EXPORT_CACHE: usize = 256;

/// p2p's ring variables: the SDK's defaults and limits (8 slots of 1 MiB, at
/// most 2 GiB of the receiver's GPU memory per connection).
pub static KNOBS: Knobs = Knobs::new("FERROCX_P2P", "DIRECT", "any device buffer");

/// When the receiver offers its buffer for a direct write (`Any`: any receive
/// buffer in CUDA device memory, legacy-IPC capable).
pub use ferrocx_sdk::env::ZeroCopy as Direct;

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The ring settings (`FERROCX_P2P_DISABLE`, `_CHUNK_SIZE`, `_NSLOTS`,
    /// `_DIRECT`, `_DIRECT_MIN`).
    pub ring: RingConfig,
    /// `FERROCX_P2P_IPC_CACHE`: opened peer allocations per sending connection.
    pub ipc_cache: usize,
    /// `FERROCX_P2P_EXPORT_CACHE`: exported unregistered allocations per context.
    pub export_cache: usize,
    /// `FERROCX_P2P_INVISIBLE`: assume GPUs hidden from this process are reachable.
    pub invisible_peers: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ring: RingConfig::defaults(&KNOBS),
            ipc_cache: DEFAULT_IPC_CACHE,
            export_cache: DEFAULT_EXPORT_CACHE,
            invisible_peers: true,
        }
    }
}

impl Config {
    /// Read the variables through the core's environment view.
    pub fn from_host(host: &Host) -> PluginResult<Self> {
        Self::from_lookup(|name| host.env(name))
    }

    /// Read the variables through `lookup` (unset → default) and validate them.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> PluginResult<Self> {
        let d = Config::default();
        Config {
            ring: RingConfig::from_lookup(&KNOBS, &lookup)?,
            ipc_cache: env::unsigned(&lookup, "FERROCX_P2P_IPC_CACHE", d.ipc_cache)?,
            export_cache: env::unsigned(&lookup, "FERROCX_P2P_EXPORT_CACHE", d.export_cache)?,
            invisible_peers: env::boolean(&lookup, "FERROCX_P2P_INVISIBLE", d.invisible_peers)?,
        }
        .validated()
    }

    /// Check the ranges (the ring's too).
    pub fn validated(mut self) -> PluginResult<Self> {
        self.ring = self.ring.validated()?;
        if self.ipc_cache == 0 {
            return Err(PluginError::invalid(
                "FERROCX_P2P_IPC_CACHE=0: at least one opened allocation is needed (use FERROCX_P2P_DIRECT=0 to turn the direct path off)",
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(v: &[(&str, &str)]) -> PluginResult<Config> {
        Config::from_lookup(ferrocx_sdk::testing::vars(v))
    }

    #[test]
    fn p2p_names_limits_and_caches() {
        assert_eq!(with(&[]).unwrap(), Config::default());
        let c = with(&[
            ("FERROCX_P2P_CHUNK_SIZE", "5000"),
            ("FERROCX_P2P_DIRECT", "registered"),
            ("FERROCX_P2P_IPC_CACHE", "3"),
            ("FERROCX_P2P_EXPORT_CACHE", "0"),
            ("FERROCX_P2P_INVISIBLE", "0"),
        ])
        .unwrap();
        assert!(!c.invisible_peers);
        assert_eq!(c.ring.direct, Direct::Registered);
        assert_eq!(
            (c.ring.chunk_size, c.ipc_cache, c.export_cache),
            (8192, 3, 0)
        );
        ferrocx_sdk::testing::assert_rejected(
            |env| Config::from_lookup(env),
            &[
                ("FERROCX_P2P_CHUNK_SIZE", "100"),
                ("FERROCX_P2P_CHUNK_SIZE", "1073741824"),
                ("FERROCX_P2P_IPC_CACHE", "0"),
                ("FERROCX_P2P_INVISIBLE", "maybe"),
            ],
        );
        let err = with(&[
            ("FERROCX_P2P_NSLOTS", "256"),
            ("FERROCX_P2P_CHUNK_SIZE", "268435456"),
        ])
        .unwrap_err();
        assert!(err.message().contains("per connection"), "{err}");
    }
}
