//! The plugin's knobs (docs/ENV.md), read through the host table with the
//! SDK's parsers, so they take the same forms as the core's.

use ferrocx_ibgda::fault::{parse_plans, FaultPlan};
use ferrocx_ibgda::health::HealthConfig;
use ferrocx_sdk::env::{duration, unsigned};
use ferrocx_sdk::iface::IfSpec;
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
    /// Which NIC handler (`FERROCX_IBGDA_HANDLER`).
    pub handler: Handler,
    /// `FERROCX_IBGDA_CARRIER=net`: every peer through the TCP carrier, also
    /// those of this host.
    pub force_net: bool,
    /// `FERROCX_IBGDA_NET_IFS`: the interfaces the TCP carrier may use.
    pub net_ifs: Option<IfSpec>,
}

/// `FERROCX_IBGDA_HANDLER`: which NIC handler `comm_init` sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// mlx5 where every rank can bring it up, else the proxy (the default).
    Auto,
    /// The proxy handler, mlx5 not tried.
    Proxy,
    /// mlx5 or an error saying why not.
    Mlx5,
}

impl Handler {
    /// From the variable's value (case-insensitive; empty is `auto`).
    pub fn parse(v: &str) -> PluginResult<Handler> {
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Handler::Auto),
            "proxy" => Ok(Handler::Proxy),
            "mlx5" => Ok(Handler::Mlx5),
            _ => Err(PluginError::invalid(format!(
                "FERROCX_IBGDA_HANDLER={v}: expected auto, proxy or mlx5"
            ))),
        }
    }
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
        let handler = Handler::parse(&lookup("FERROCX_IBGDA_HANDLER").unwrap_or_default())?;
        let force_net = force_net(&lookup("FERROCX_IBGDA_CARRIER").unwrap_or_default())?;
        let net_ifs = match lookup("FERROCX_IBGDA_NET_IFS") {
            Some(v) if !v.trim().is_empty() => Some(IfSpec::parse("FERROCX_IBGDA_NET_IFS", &v)?),
            _ => None,
        };
        Ok(Config {
            health,
            slots: slots as u32,
            signal_bytes,
            faults,
            handler,
            force_net,
            net_ifs,
        })
    }
}

/// `FERROCX_IBGDA_CARRIER`: `auto` (or empty: each peer by its host) or
/// `net` (every peer over TCP); whether it forces the net carrier.
pub fn force_net(v: &str) -> PluginResult<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(false),
        "net" => Ok(true),
        _ => Err(PluginError::invalid(format!(
            "FERROCX_IBGDA_CARRIER={v}: expected auto or net"
        ))),
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
        assert_eq!(cfg(&[]).unwrap().handler, Handler::Auto);
        for (v, h) in [
            ("proxy", Handler::Proxy),
            ("MLX5", Handler::Mlx5),
            (" auto ", Handler::Auto),
        ] {
            assert_eq!(
                cfg(&[("FERROCX_IBGDA_HANDLER", v)]).unwrap().handler,
                h,
                "{v}"
            );
        }
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
            (
                &[("FERROCX_IBGDA_HANDLER", "gpu")][..],
                "FERROCX_IBGDA_HANDLER=gpu: expected auto, proxy or mlx5",
            ),
        ] {
            let e = cfg(vars).unwrap_err().to_string();
            assert!(e.contains(needle), "{vars:?}: {e}");
        }
    }

    #[test]
    fn the_carrier_knob_takes_auto_or_net() {
        assert!(!force_net("").unwrap());
        assert!(!force_net(" Auto ").unwrap());
        assert!(force_net("NET").unwrap());
        let e = force_net("ib").unwrap_err().to_string();
        assert!(e.contains("FERROCX_IBGDA_CARRIER=ib"), "{e}");
    }
}
