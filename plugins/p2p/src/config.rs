//! Tunables of the p2p transport, read once at `init` through `Host::env`.
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

use ferrocx_sdk::{env, Host, PluginError, PluginResult};

/// Default bytes per FIFO slot.
pub const DEFAULT_CHUNK_SIZE: usize = 1 << 20;
/// Default FIFO slots per connection.
pub const DEFAULT_NSLOTS: usize = 8;
/// Default threshold of the direct path.
pub const DEFAULT_DIRECT_MIN: usize = 16 << 10;
/// Default opened peer allocations per sending connection.
pub const DEFAULT_IPC_CACHE: usize = 64;
/// Default exported allocations per context.
pub const DEFAULT_EXPORT_CACHE: usize = 256;

const CHUNK_ALIGN: usize = 4096;
const MIN_CHUNK: usize = 4096;
const MAX_CHUNK: usize = 256 << 20;
const MIN_SLOTS: usize = 2;
const MAX_SLOTS: usize = 256;
/// Keeps one connection's FIFO within a sane share of GPU memory.
const MAX_FIFO_BYTES: usize = 2 << 30;

/// When the receiver offers its buffer for a direct write (`Any`: any receive
/// buffer in CUDA device memory, legacy-IPC capable).
pub use ferrocx_sdk::env::ZeroCopy as Direct;

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `FERROCX_P2P_DISABLE`: never offer this transport.
    pub disabled: bool,
    /// `FERROCX_P2P_CHUNK_SIZE`: bytes per FIFO slot (a multiple of 4 KiB).
    pub chunk_size: usize,
    /// `FERROCX_P2P_NSLOTS`: FIFO slots per connection.
    pub nslots: usize,
    /// `FERROCX_P2P_DIRECT`.
    pub direct: Direct,
    /// `FERROCX_P2P_DIRECT_MIN`: smallest message for the direct path.
    pub direct_min: usize,
    /// `FERROCX_P2P_IPC_CACHE`: opened peer allocations per sending connection.
    pub ipc_cache: usize,
    /// `FERROCX_P2P_EXPORT_CACHE`: exported unregistered allocations per context.
    pub export_cache: usize,
    /// `FERROCX_P2P_INVISIBLE`: assume GPUs hidden from this process are reachable.
    pub invisible_peers: bool,
    /// Two ends in the same process use each other's addresses instead of
    /// CUDA IPC (which refuses handles of the calling process). Tests turn it
    /// off to exercise the IPC path in one process with the stand-in backend.
    pub same_process_shortcut: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            chunk_size: DEFAULT_CHUNK_SIZE,
            nslots: DEFAULT_NSLOTS,
            direct: Direct::Any,
            direct_min: DEFAULT_DIRECT_MIN,
            ipc_cache: DEFAULT_IPC_CACHE,
            export_cache: DEFAULT_EXPORT_CACHE,
            invisible_peers: true,
            same_process_shortcut: true,
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
        let cfg = Config {
            disabled: env::boolean(&lookup, "FERROCX_P2P_DISABLE", d.disabled)?,
            chunk_size: env::unsigned(&lookup, "FERROCX_P2P_CHUNK_SIZE", d.chunk_size)?,
            nslots: env::unsigned(&lookup, "FERROCX_P2P_NSLOTS", d.nslots)?,
            direct: parse_direct(&lookup)?,
            direct_min: env::unsigned(&lookup, "FERROCX_P2P_DIRECT_MIN", d.direct_min)?,
            ipc_cache: env::unsigned(&lookup, "FERROCX_P2P_IPC_CACHE", d.ipc_cache)?,
            export_cache: env::unsigned(&lookup, "FERROCX_P2P_EXPORT_CACHE", d.export_cache)?,
            invisible_peers: env::boolean(&lookup, "FERROCX_P2P_INVISIBLE", d.invisible_peers)?,
            same_process_shortcut: true,
        };
        cfg.validated()
    }

    /// Check the ranges and round the chunk size up to 4 KiB.
    pub fn validated(mut self) -> PluginResult<Self> {
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&self.chunk_size) {
            return Err(PluginError::invalid(format!(
                "FERROCX_P2P_CHUNK_SIZE={} is outside {MIN_CHUNK}..={MAX_CHUNK}",
                self.chunk_size
            )));
        }
        self.chunk_size = self.chunk_size.next_multiple_of(CHUNK_ALIGN);
        if !(MIN_SLOTS..=MAX_SLOTS).contains(&self.nslots) {
            return Err(PluginError::invalid(format!(
                "FERROCX_P2P_NSLOTS={} is outside {MIN_SLOTS}..={MAX_SLOTS}",
                self.nslots
            )));
        }
        if self.nslots * self.chunk_size > MAX_FIFO_BYTES {
            return Err(PluginError::invalid(format!(
                "FERROCX_P2P_NSLOTS × FERROCX_P2P_CHUNK_SIZE = {} bytes exceeds {MAX_FIFO_BYTES} per connection",
                self.nslots * self.chunk_size
            )));
        }
        if self.ipc_cache == 0 {
            return Err(PluginError::invalid(
                "FERROCX_P2P_IPC_CACHE=0: at least one opened allocation is needed (use FERROCX_P2P_DIRECT=0 to turn the direct path off)",
            ));
        }
        Ok(self)
    }

    /// The FIFO bytes one receiving connection allocates on its GPU.
    pub fn fifo_bytes(&self) -> usize {
        self.nslots * self.chunk_size
    }
}

fn parse_direct(lookup: &impl Fn(&str) -> Option<String>) -> PluginResult<Direct> {
    env::zero_copy(lookup, "FERROCX_P2P_DIRECT", "any device receive buffer")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> PluginResult<Config> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|n| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(with(&[]).unwrap(), Config::default());
        let c = with(&[
            ("FERROCX_P2P_DISABLE", "1"),
            ("FERROCX_P2P_CHUNK_SIZE", "5000"),
            ("FERROCX_P2P_NSLOTS", "4"),
            ("FERROCX_P2P_DIRECT", "registered"),
            ("FERROCX_P2P_DIRECT_MIN", "0"),
            ("FERROCX_P2P_IPC_CACHE", "3"),
            ("FERROCX_P2P_EXPORT_CACHE", "0"),
            ("FERROCX_P2P_INVISIBLE", "0"),
        ])
        .unwrap();
        assert!(c.disabled && !c.invisible_peers);
        assert_eq!(c.direct, Direct::Registered);
        assert_eq!(
            (
                c.chunk_size,
                c.nslots,
                c.direct_min,
                c.ipc_cache,
                c.export_cache
            ),
            (8192, 4, 0, 3, 0)
        );
        assert_eq!(c.fifo_bytes(), 4 * 8192);
    }

    #[test]
    fn direct_modes() {
        let mode = |v: &str| with(&[("FERROCX_P2P_DIRECT", v)]).map(|c| c.direct);
        assert_eq!(mode("1").unwrap(), Direct::Any);
        assert_eq!(mode("any").unwrap(), Direct::Any);
        assert_eq!(mode("registered").unwrap(), Direct::Registered);
        assert_eq!(mode("off").unwrap(), Direct::Off);
        let e = mode("sometimes").unwrap_err();
        assert!(e.message().contains("FERROCX_P2P_DIRECT"), "{e}");
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("FERROCX_P2P_NSLOTS", "1"),
            ("FERROCX_P2P_NSLOTS", "x"),
            ("FERROCX_P2P_CHUNK_SIZE", "100"),
            ("FERROCX_P2P_CHUNK_SIZE", "1073741824"),
            ("FERROCX_P2P_IPC_CACHE", "0"),
            ("FERROCX_P2P_INVISIBLE", "maybe"),
        ] {
            let err = with(&[(k, v)]).unwrap_err();
            assert!(err.message().contains(k), "{k}={v}: {err}");
        }
        let err = with(&[
            ("FERROCX_P2P_NSLOTS", "256"),
            ("FERROCX_P2P_CHUNK_SIZE", "268435456"),
        ])
        .unwrap_err();
        assert!(err.message().contains("per connection"), "{err}");
    }
}
