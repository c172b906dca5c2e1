//! Tunables of the shm transport, read once at `init` through `Host::env`
//! (parsed and checked by `ferrocx_sdk::same_host::config`).
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

use ferrocx_sdk::same_host::{Knobs, RingConfig};
use ferrocx_sdk::{Host, PluginResult};

/// Default bytes per ring slot.
pub const DEFAULT_CHUNK_SIZE: usize = 512 * 1024;
/// Default ring slots per connection.
pub const DEFAULT_NSLOTS: usize = 8;

/// shm's variables, defaults and limits (at most 4 GiB of ring per
/// connection keeps one segment within a sane share of /dev/shm).
pub static KNOBS: Knobs = Knobs::new("FERROCX_SHM", "SINGLE_COPY", "any large receive")
    .chunk(DEFAULT_CHUNK_SIZE, 64, 256 << 20, 64)
    .slots(DEFAULT_NSLOTS, 2, 1024)
    .max_fifo(4 << 30);

/// Effective configuration of one plugin context: the ring settings, under
/// shm's names (`direct` is `FERROCX_SHM_SINGLE_COPY`).
pub type Config = RingConfig;

/// The defaults.
pub fn defaults() -> Config {
    RingConfig::defaults(&KNOBS)
}

/// Read the variables through the core's environment view.
pub fn from_host(host: &Host) -> PluginResult<Config> {
    from_lookup(|name| host.env(name))
}

/// Read the variables through `lookup` (unset → default) and validate them.
pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> PluginResult<Config> {
    RingConfig::from_lookup(&KNOBS, &lookup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::env::ZeroCopy;

    fn with(v: &[(&str, &str)]) -> PluginResult<Config> {
        from_lookup(ferrocx_sdk::testing::vars(v))
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(with(&[]).unwrap(), defaults());
        let c = with(&[
            ("FERROCX_SHM_DISABLE", "1"),
            ("FERROCX_SHM_CHUNK_SIZE", "1000"),
            ("FERROCX_SHM_NSLOTS", "4"),
            ("FERROCX_SHM_SINGLE_COPY", "off"),
            ("FERROCX_SHM_SINGLE_COPY_MIN", "0"),
        ])
        .unwrap();
        assert!(c.disabled && c.direct == ZeroCopy::Off);
        assert_eq!((c.chunk_size, c.nslots, c.direct_min), (1024, 4, 0));
        assert_eq!(defaults().direct_min, 16 << 10);
    }

    #[test]
    fn single_copy_modes() {
        let mode = |v: &str| with(&[("FERROCX_SHM_SINGLE_COPY", v)]).map(|c| c.direct);
        assert_eq!(mode("1").unwrap(), ZeroCopy::Any);
        assert_eq!(mode("all").unwrap(), ZeroCopy::Any);
        assert_eq!(mode("registered").unwrap(), ZeroCopy::Registered);
        assert_eq!(mode("0").unwrap(), ZeroCopy::Off);
        let e = mode("sometimes").unwrap_err();
        assert!(e.message().contains("FERROCX_SHM_SINGLE_COPY"), "{e}");
    }

    #[test]
    fn bad_values_are_errors() {
        ferrocx_sdk::testing::assert_rejected(
            |env| from_lookup(env),
            &[
                ("FERROCX_SHM_NSLOTS", "1"),
                ("FERROCX_SHM_NSLOTS", "x"),
                ("FERROCX_SHM_CHUNK_SIZE", "8"),
                ("FERROCX_SHM_SINGLE_COPY", "maybe"),
            ],
        );
    }
}
