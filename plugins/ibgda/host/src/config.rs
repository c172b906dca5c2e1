//! The plugin's knobs (docs/ENV.md), read through the host table with the
//! SDK's parsers, so they take the same forms as the core's.

use ferrocx_ibgda::fault::{parse_plans, FaultPlan};
use ferrocx_ibgda::health::HealthConfig;
use ferrocx_sdk::env::{duration, unsigned};
use ferrocx_sdk::{PluginError, PluginResult};
use std::time::Duration;

/// What `comm_init` sets up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Completion deadline per attempt and recovery window per path.
    pub health: HealthConfig,
    /// Slots of each request and completion ring.
    pub slots: u32,
    /// Bytes of each rank's signal words.
    pub signal_bytes: usize,
    /// Injected faults (`FERROCX_IBGDA_FAULT`).
    pub faults: Vec<FaultPlan>,
}

impl Config {
    /// From `lookup` (the host table's getenv), checked.
    pub fn from_env(lookup: &impl Fn(&str) -> Option<String>) -> PluginResult<Config> {
        let timeout = duration(lookup, "FERROCX_IBGDA_TIMEOUT", Duration::from_secs(1))?;
        let recovery = duration(lookup, "FERROCX_IBGDA_RECOVERY", timeout.saturating_mul(3))?;
        let max_recovery = duration(
            lookup,
            "FERROCX_IBGDA_RECOVERY_MAX",
            recovery.saturating_mul(8),
        )?;
        let health = HealthConfig {
            timeout,
            recovery,
            max_recovery,
        };
        health.validate().map_err(|e| {
            PluginError::invalid(format!(
                "FERROCX_IBGDA_TIMEOUT / FERROCX_IBGDA_RECOVERY / FERROCX_IBGDA_RECOVERY_MAX: {e}"
            ))
        })?;
        let slots = unsigned(lookup, "FERROCX_IBGDA_SLOTS", 256)?;
        if !slots.is_power_of_two() || !(2..=65536).contains(&slots) {
            return Err(PluginError::invalid(format!(
                "FERROCX_IBGDA_SLOTS={slots}: expected a power of two from 2 to 65536"
            )));
        }
        let signal_bytes = unsigned(lookup, "FERROCX_IBGDA_SIGNAL_BYTES", 64 << 10)?;
        if signal_bytes < 8 || !signal_bytes.is_multiple_of(8) || signal_bytes > 1 << 30 {
            return Err(PluginError::invalid(format!(
                "FERROCX_IBGDA_SIGNAL_BYTES={signal_bytes}: expected a multiple of 8 bytes, at most 1G"
            )));
        }
        let faults = match lookup("FERROCX_IBGDA_FAULT") {
            Some(v) if !v.trim().is_empty() => parse_plans(&v).map_err(PluginError::invalid)?,
            _ => Vec::new(),
        };
        Ok(Config {
            health,
            slots: slots as u32,
            signal_bytes,
            faults,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> PluginResult<Config> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_env(&|n| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_overrides() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.health.timeout, Duration::from_secs(1));
        assert_eq!(c.health.recovery, Duration::from_secs(3));
        assert_eq!(c.health.max_recovery, Duration::from_secs(24));
        assert_eq!(
            (c.slots, c.signal_bytes, c.faults.len()),
            (256, 64 << 10, 0)
        );
        let c = cfg(&[
            ("FERROCX_IBGDA_TIMEOUT", "20ms"),
            ("FERROCX_IBGDA_SLOTS", "64"),
            ("FERROCX_IBGDA_SIGNAL_BYTES", "4K"),
            ("FERROCX_IBGDA_FAULT", "path=primary,after=3,count=2,drop"),
        ])
        .unwrap();
        assert_eq!(c.health.timeout, Duration::from_millis(20));
        assert_eq!(c.health.recovery, Duration::from_millis(60));
        assert_eq!(c.health.max_recovery, Duration::from_millis(480));
        assert_eq!((c.slots, c.signal_bytes, c.faults.len()), (64, 4096, 1));
        let c = cfg(&[("FERROCX_IBGDA_RECOVERY_MAX", "3s")]).unwrap();
        assert_eq!(c.health.max_recovery, c.health.recovery, "no back-off");
        assert!(cfg(&[("FERROCX_IBGDA_RECOVERY_MAX", "2s")])
            .unwrap_err()
            .message()
            .contains("FERROCX_IBGDA_RECOVERY_MAX"));
    }

    #[test]
    fn bad_values_are_refused_naming_the_variable() {
        for (vars, needle) in [
            (
                &[("FERROCX_IBGDA_SLOTS", "100")][..],
                "FERROCX_IBGDA_SLOTS=100",
            ),
            (
                &[("FERROCX_IBGDA_SIGNAL_BYTES", "12")][..],
                "FERROCX_IBGDA_SIGNAL_BYTES=12",
            ),
            (
                &[("FERROCX_IBGDA_TIMEOUT", "soon")][..],
                "FERROCX_IBGDA_TIMEOUT",
            ),
            (
                &[
                    ("FERROCX_IBGDA_TIMEOUT", "2s"),
                    ("FERROCX_IBGDA_RECOVERY", "1s"),
                ][..],
                "FERROCX_IBGDA_RECOVERY",
            ),
            (
                &[("FERROCX_IBGDA_FAULT", "pth=primary")][..],
                "FERROCX_IBGDA_FAULT",
            ),
        ] {
            let e = cfg(vars).unwrap_err().to_string();
            assert!(e.contains(needle), "{vars:?}: {e}");
        }
    }
}
