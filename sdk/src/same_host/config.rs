//! The settings every same-host transport has, read once at `init` through
//! `Host::env` under the plugin's own prefix (`FERROCX_SHM_…`, `FERROCX_P2P_…`):
//!
//! | variable | meaning |
//! |---|---|
//! | `<PREFIX>_DISABLE` | `1` makes `can_connect` answer 0 (the transport is never chosen) |
//! | `<PREFIX>_CHUNK_SIZE` | bytes per FIFO slot (rounded up to the back end's alignment) |
//! | `<PREFIX>_NSLOTS` | FIFO slots per connection |
//! | `<PREFIX>_<DIRECT>` | `1`: any eligible receive of at least the minimum is offered for a direct write; `registered`: only registered receive buffers; `0`: never (always the FIFO) |
//! | `<PREFIX>_<DIRECT>_MIN` | smallest message (bytes) that may take the direct path |
//!
//! FIFO geometry is decided by the receiving side (it creates the FIFO) and
//! travels to the sender in the connect blob, so the two processes never need
//! to agree on these values. The direct-path settings are read on each side:
//! a receiver that offers nothing or a sender that does not wait for offers
//! both simply mean the FIFO.

use crate::env::{self, ZeroCopy};
use crate::error::{PluginError, PluginResult};

/// A plugin's variable names, defaults and limits.
#[derive(Debug, PartialEq, Eq)]
pub struct Knobs {
    /// Variable prefix, e.g. `FERROCX_SHM`.
    pub prefix: &'static str,
    /// Name of the direct-path setting after the prefix, e.g. `SINGLE_COPY`.
    pub direct: &'static str,
    /// What "any" means for the direct setting (for its error message).
    pub direct_any: &'static str,
    /// Default, smallest and largest bytes per slot.
    pub chunk: (usize, usize, usize),
    /// Slot sizes are rounded up to a multiple of this.
    pub chunk_align: usize,
    /// Default, smallest and largest slot count.
    pub nslots: (usize, usize, usize),
    /// Largest FIFO (slots × chunk) of one connection.
    pub max_fifo: usize,
    /// Default of `<PREFIX>_<DIRECT>_MIN`.
    pub direct_min: usize,
}

impl Knobs {
    /// A plugin's knobs under `prefix`, its direct setting named `direct`
    /// (`any` says what "any" means), with the defaults: 8 slots (2 ..= 256)
    /// of 1 MiB (4 KiB ..= 256 MiB, 4 KiB aligned), at most 2 GiB of FIFO per
    /// connection, direct writes from 16 KiB.
    pub const fn new(prefix: &'static str, direct: &'static str, any: &'static str) -> Self {
        Knobs {
            prefix,
            direct,
            direct_any: any,
            chunk: (1 << 20, 4096, 256 << 20),
            chunk_align: 4096,
            nslots: (8, 2, 256),
            max_fifo: 2 << 30,
            direct_min: 16 << 10,
        }
    }

    /// Slot size default, range and alignment.
    pub const fn chunk(self, default: usize, min: usize, max: usize, align: usize) -> Self {
        Knobs {
            chunk: (default, min, max),
            chunk_align: align,
            ..self
        }
    }

    /// Slot count default and range.
    pub const fn slots(self, default: usize, min: usize, max: usize) -> Self {
        Knobs {
            nslots: (default, min, max),
            ..self
        }
    }

    /// Largest FIFO of one connection.
    pub const fn max_fifo(self, bytes: usize) -> Self {
        Knobs {
            max_fifo: bytes,
            ..self
        }
    }

    /// The full name of variable `suffix`, e.g. `FERROCX_SHM_NSLOTS`.
    pub fn var(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.prefix)
    }
}

/// Effective ring settings of one plugin context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingConfig {
    /// Names and limits these came from.
    pub knobs: &'static Knobs,
    /// `<PREFIX>_DISABLE`: never offer this transport.
    pub disabled: bool,
    /// `<PREFIX>_CHUNK_SIZE`: bytes per FIFO slot.
    pub chunk_size: usize,
    /// `<PREFIX>_NSLOTS`: FIFO slots per connection.
    pub nslots: usize,
    /// `<PREFIX>_<DIRECT>`: which receive buffers are offered for direct writes.
    pub direct: ZeroCopy,
    /// `<PREFIX>_<DIRECT>_MIN`: smallest message for the direct path.
    pub direct_min: usize,
    /// Two ends in the same process use each other's addresses instead of
    /// the back end's cross-process path (CUDA IPC refuses a process's own
    /// handles). Tests turn it off to exercise that path in one process.
    pub same_process_shortcut: bool,
}

impl RingConfig {
    /// The defaults of `knobs`.
    pub fn defaults(knobs: &'static Knobs) -> Self {
        RingConfig {
            knobs,
            disabled: false,
            chunk_size: knobs.chunk.0,
            nslots: knobs.nslots.0,
            direct: ZeroCopy::Any,
            direct_min: knobs.direct_min,
            same_process_shortcut: true,
        }
    }

    /// Read the variables through `lookup` (unset → default) and validate them.
    pub fn from_lookup(
        knobs: &'static Knobs,
        lookup: &impl Fn(&str) -> Option<String>,
    ) -> PluginResult<Self> {
        let d = Self::defaults(knobs);
        let direct = knobs.var(knobs.direct);
        RingConfig {
            knobs,
            disabled: env::boolean(lookup, &knobs.var("DISABLE"), d.disabled)?,
            chunk_size: env::unsigned(lookup, &knobs.var("CHUNK_SIZE"), d.chunk_size)?,
            nslots: env::unsigned(lookup, &knobs.var("NSLOTS"), d.nslots)?,
            direct: env::zero_copy(lookup, &direct, knobs.direct_any)?,
            direct_min: env::unsigned(lookup, &format!("{direct}_MIN"), d.direct_min)?,
            same_process_shortcut: true,
        }
        .validated()
    }

    /// Check the ranges and round the chunk size up to the alignment.
    pub fn validated(mut self) -> PluginResult<Self> {
        let k = self.knobs;
        let (_, min_chunk, max_chunk) = k.chunk;
        if !(min_chunk..=max_chunk).contains(&self.chunk_size) {
            return Err(PluginError::invalid(format!(
                "{}={} is outside {min_chunk}..={max_chunk}",
                k.var("CHUNK_SIZE"),
                self.chunk_size
            )));
        }
        self.chunk_size = self.chunk_size.next_multiple_of(k.chunk_align);
        let (_, min_slots, max_slots) = k.nslots;
        if !(min_slots..=max_slots).contains(&self.nslots) {
            return Err(PluginError::invalid(format!(
                "{}={} is outside {min_slots}..={max_slots}",
                k.var("NSLOTS"),
                self.nslots
            )));
        }
        if self.fifo_bytes() > k.max_fifo {
            return Err(PluginError::invalid(format!(
                "{} × {} = {} bytes exceeds {} per connection",
                k.var("NSLOTS"),
                k.var("CHUNK_SIZE"),
                self.fifo_bytes(),
                k.max_fifo
            )));
        }
        Ok(self)
    }

    /// The FIFO bytes of one connection.
    pub fn fifo_bytes(&self) -> usize {
        self.nslots * self.chunk_size
    }

    /// How the direct path is set, for the log line at `init`.
    pub fn direct_summary(&self) -> String {
        let k = self.knobs;
        match self.direct {
            ZeroCopy::Off => format!("off ({}=0)", k.var(k.direct)),
            ZeroCopy::Registered => {
                format!("registered buffers only ({}=registered)", k.var(k.direct))
            }
            ZeroCopy::Any => k.direct_any.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static K: Knobs = Knobs::new("FX_T", "DIRECT", "any receive")
        .chunk(4096, 64, 1 << 20, 64)
        .slots(8, 2, 16)
        .max_fifo(8 << 20);

    fn with(vars: &[(&str, &str)]) -> PluginResult<RingConfig> {
        RingConfig::from_lookup(&K, &crate::testing::vars(vars))
    }

    #[test]
    fn defaults_overrides_and_rounding() {
        assert_eq!(with(&[]).unwrap(), RingConfig::defaults(&K));
        let c = with(&[
            ("FX_T_DISABLE", "1"),
            ("FX_T_CHUNK_SIZE", "1000"),
            ("FX_T_NSLOTS", "4"),
            ("FX_T_DIRECT", "registered"),
            ("FX_T_DIRECT_MIN", "0"),
        ])
        .unwrap();
        assert_eq!(RingConfig::defaults(&K).direct_min, 16 << 10);
        assert!(c.disabled);
        assert_eq!(c.direct, ZeroCopy::Registered);
        assert_eq!((c.chunk_size, c.nslots, c.direct_min), (1024, 4, 0));
        assert_eq!(c.fifo_bytes(), 4096);
        assert!(c.direct_summary().contains("FX_T_DIRECT=registered"));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("FX_T_NSLOTS", "1"),
            ("FX_T_NSLOTS", "x"),
            ("FX_T_CHUNK_SIZE", "8"),
            ("FX_T_DIRECT", "maybe"),
            ("FX_T_DISABLE", "perhaps"),
        ] {
            let err = with(&[(k, v)]).unwrap_err();
            assert!(err.message().contains(k), "{k}={v}: {err}");
        }
        let err = with(&[("FX_T_NSLOTS", "16"), ("FX_T_CHUNK_SIZE", "1048576")]).unwrap_err();
        assert!(err.message().contains("per connection"), "{err}");
    }
}
