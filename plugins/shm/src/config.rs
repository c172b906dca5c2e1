//! Tunables of the shm transport, read once at `init` through `Host::env`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_SHM_DISABLE` | `0` | `1` makes `can_connect` answer 0 (the transport is never chosen) |
//! | `FERROCX_SHM_CHUNK_SIZE` | `524288` | bytes per ring slot (rounded up to 64; 64 B ..= 256 MiB) |
//! | `FERROCX_SHM_NSLOTS` | `8` | ring slots per connection (2 ..= 1024) |
//! | `FERROCX_SHM_SINGLE_COPY` | `1` | `1`: any receive of at least the minimum is offered for single copy; `registered`: only registered receive buffers; `0`: never (always the ring) |
//! | `FERROCX_SHM_SINGLE_COPY_MIN` | `16384` | smallest message (bytes) that may take the single-copy path |
//!
//! Ring geometry is decided by the receiving side (it creates the segment) and
//! travels to the sender in the connect blob, so the two processes never need
//! to agree on these values.

use ferrocx_sdk::env::{self, ZeroCopy};
use ferrocx_sdk::{Host, PluginError, PluginResult};

/// Default bytes per ring slot.
pub const DEFAULT_CHUNK_SIZE: usize = 512 * 1024;
/// Default ring slots per connection.
pub const DEFAULT_NSLOTS: usize = 8;
/// Default threshold of the single-copy path.
pub const DEFAULT_SINGLE_COPY_MIN: usize = 16 << 10;

const MIN_CHUNK: usize = 64;
const MAX_CHUNK: usize = 256 << 20;
const MIN_SLOTS: usize = 2;
const MAX_SLOTS: usize = 1024;
/// Keeps one connection's segment within a sane share of /dev/shm.
const MAX_RING_BYTES: usize = 4 << 30;

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `FERROCX_SHM_DISABLE`: never offer this transport.
    pub disabled: bool,
    /// `FERROCX_SHM_CHUNK_SIZE`: bytes per ring slot (a multiple of 64).
    pub chunk_size: usize,
    /// `FERROCX_SHM_NSLOTS`: ring slots per connection.
    pub nslots: usize,
    /// `FERROCX_SHM_SINGLE_COPY`: allow the `process_vm_writev` path.
    pub single_copy: bool,
    /// `FERROCX_SHM_SINGLE_COPY=1` (default) rather than `registered`: offer
    /// unregistered receive buffers too. A posted receive already guarantees
    /// its buffer stays valid until it completes, and CMA needs no per-buffer
    /// setup, so registration buys nothing here but is still honoured.
    pub single_copy_unregistered: bool,
    /// `FERROCX_SHM_SINGLE_COPY_MIN`: smallest message for the single-copy path.
    pub single_copy_min: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            chunk_size: DEFAULT_CHUNK_SIZE,
            nslots: DEFAULT_NSLOTS,
            single_copy: true,
            single_copy_unregistered: true,
            single_copy_min: DEFAULT_SINGLE_COPY_MIN,
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
        let mode = parse_single_copy(&lookup)?;
        let cfg = Config {
            disabled: env::boolean(&lookup, "FERROCX_SHM_DISABLE", d.disabled)?,
            chunk_size: env::unsigned(&lookup, "FERROCX_SHM_CHUNK_SIZE", d.chunk_size)?,
            nslots: env::unsigned(&lookup, "FERROCX_SHM_NSLOTS", d.nslots)?,
            single_copy: mode != ZeroCopy::Off,
            single_copy_unregistered: mode == ZeroCopy::Any,
            single_copy_min: env::unsigned(
                &lookup,
                "FERROCX_SHM_SINGLE_COPY_MIN",
                d.single_copy_min,
            )?,
        };
        cfg.validated()
    }

    /// Check the ranges and round the chunk size up to a cache-line multiple.
    pub fn validated(mut self) -> PluginResult<Self> {
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&self.chunk_size) {
            return Err(PluginError::invalid(format!(
                "FERROCX_SHM_CHUNK_SIZE={} is outside {MIN_CHUNK}..={MAX_CHUNK}",
                self.chunk_size
            )));
        }
        self.chunk_size = self.chunk_size.next_multiple_of(64);
        if !(MIN_SLOTS..=MAX_SLOTS).contains(&self.nslots) {
            return Err(PluginError::invalid(format!(
                "FERROCX_SHM_NSLOTS={} is outside {MIN_SLOTS}..={MAX_SLOTS}",
                self.nslots
            )));
        }
        if self.nslots * self.chunk_size > MAX_RING_BYTES {
            return Err(PluginError::invalid(format!(
                "FERROCX_SHM_NSLOTS × FERROCX_SHM_CHUNK_SIZE = {} bytes exceeds {MAX_RING_BYTES} per connection",
                self.nslots * self.chunk_size
            )));
        }
        Ok(self)
    }
}

fn parse_single_copy(lookup: &impl Fn(&str) -> Option<String>) -> PluginResult<ZeroCopy> {
    env::zero_copy(lookup, "FERROCX_SHM_SINGLE_COPY", "any large receive")
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
            ("FERROCX_SHM_DISABLE", "1"),
            ("FERROCX_SHM_CHUNK_SIZE", "1000"),
            ("FERROCX_SHM_NSLOTS", "4"),
            ("FERROCX_SHM_SINGLE_COPY", "off"),
            ("FERROCX_SHM_SINGLE_COPY_MIN", "0"),
        ])
        .unwrap();
        assert!(c.disabled && !c.single_copy);
        assert_eq!((c.chunk_size, c.nslots, c.single_copy_min), (1024, 4, 0));
    }

    #[test]
    fn single_copy_modes() {
        let mode = |v: &str| {
            with(&[("FERROCX_SHM_SINGLE_COPY", v)])
                .map(|c| (c.single_copy, c.single_copy_unregistered))
        };
        assert_eq!(mode("1").unwrap(), (true, true));
        assert_eq!(mode("all").unwrap(), (true, true));
        assert_eq!(mode("registered").unwrap(), (true, false));
        assert_eq!(mode("0").unwrap(), (false, false));
        let e = mode("sometimes").unwrap_err();
        assert!(e.message().contains("FERROCX_SHM_SINGLE_COPY"), "{e}");
    }

    #[test]
    fn bad_values_are_errors() {
        for (k, v) in [
            ("FERROCX_SHM_NSLOTS", "1"),
            ("FERROCX_SHM_NSLOTS", "x"),
            ("FERROCX_SHM_CHUNK_SIZE", "8"),
            ("FERROCX_SHM_SINGLE_COPY", "maybe"),
        ] {
            let err = with(&[(k, v)]).unwrap_err();
            assert!(err.message().contains(k), "{err}");
        }
    }
}
