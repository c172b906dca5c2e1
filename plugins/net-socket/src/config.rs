//! Tunables of the net-socket transport, read once at `init` through `Host::env`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_SOCKET_DISABLE` | `0` | `1` makes `can_connect` answer 0 for every peer |
//! | `FERROCX_SOCKET_IFNAME` | — | interfaces to use, NCCL syntax: `eth0,ib` (prefixes), `=eth0` (exact names), `^docker,lo` (exclude) |
//! | `FERROCX_SOCKET_NRAILS` | `4` | most interfaces (rails) one connection stripes over |
//! | `FERROCX_SOCKET_NSOCKS` | `1` | TCP sockets per rail and connection |
//! | `FERROCX_SOCKET_CHUNK_SIZE` | `524288` | bytes per striped chunk |
//! | `FERROCX_SOCKET_WINDOW` | `33554432` | unacknowledged bytes per multi-rail connection |
//! | `FERROCX_SOCKET_RAIL_TIMEOUT` | `5s` | a rail whose data is unacknowledged this long has failed |
//! | `FERROCX_SOCKET_RECOVERY` | `10s` | quiet time before a failed rail is probed again |

use ferrocx_sdk::iface::IfSpec;
use ferrocx_sdk::{env, Host, PluginError, PluginResult};
use std::time::Duration;

/// Most rails a connection uses (bounded by what fits in a connect blob).
pub const MAX_RAILS: usize = 4;
/// Most sockets per rail.
pub const MAX_NSOCKS: usize = 8;

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `FERROCX_SOCKET_DISABLE`: never offer this transport.
    pub disabled: bool,
    /// `FERROCX_SOCKET_IFNAME`, when set.
    pub ifname: Option<IfSpec>,
    /// `FERROCX_SOCKET_NRAILS`: most interfaces used at once (1..=4).
    pub max_rails: usize,
    /// `FERROCX_SOCKET_NSOCKS`: sockets per rail (1..=8).
    pub nsocks: usize,
    /// `FERROCX_SOCKET_CHUNK_SIZE`: bytes per striped chunk.
    pub chunk: usize,
    /// `FERROCX_SOCKET_WINDOW`: unacknowledged bytes per multi-rail connection.
    pub window: usize,
    /// `FERROCX_SOCKET_RAIL_TIMEOUT`: unacknowledged data this old fails its rail.
    pub rail_timeout: Duration,
    /// `FERROCX_SOCKET_RECOVERY`: quiet time before a failed rail is probed.
    pub recovery: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            ifname: None,
            max_rails: MAX_RAILS,
            nsocks: 1,
            chunk: 512 << 10,
            window: 32 << 20,
            rail_timeout: Duration::from_secs(5),
            recovery: Duration::from_secs(10),
        }
    }
}

impl Config {
    /// Read the variables through the core's environment view.
    pub fn from_host(host: &Host) -> PluginResult<Self> {
        Self::from_lookup(|name| host.env(name))
    }

    /// Read the variables through `lookup` (unset → default).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> PluginResult<Self> {
        let d = Config::default();
        let ifname = match lookup("FERROCX_SOCKET_IFNAME") {
            Some(v) if !v.trim().is_empty() => Some(IfSpec::parse("FERROCX_SOCKET_IFNAME", &v)?),
            _ => None,
        };
        let cfg = Config {
            disabled: env::boolean(&lookup, "FERROCX_SOCKET_DISABLE", d.disabled)?,
            ifname,
            max_rails: env::unsigned(&lookup, "FERROCX_SOCKET_NRAILS", d.max_rails)?,
            nsocks: env::unsigned(&lookup, "FERROCX_SOCKET_NSOCKS", d.nsocks)?,
            chunk: env::unsigned(&lookup, "FERROCX_SOCKET_CHUNK_SIZE", d.chunk)?,
            window: env::unsigned(&lookup, "FERROCX_SOCKET_WINDOW", d.window)?,
            rail_timeout: env::duration(&lookup, "FERROCX_SOCKET_RAIL_TIMEOUT", d.rail_timeout)?,
            recovery: env::duration(&lookup, "FERROCX_SOCKET_RECOVERY", d.recovery)?,
        };
        let range = |name: &str, v: usize, lo: usize, hi: usize| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(PluginError::invalid(format!(
                    "{name}={v} is outside {lo}..={hi}"
                )))
            }
        };
        range("FERROCX_SOCKET_NRAILS", cfg.max_rails, 1, MAX_RAILS)?;
        range("FERROCX_SOCKET_NSOCKS", cfg.nsocks, 1, MAX_NSOCKS)?;
        range("FERROCX_SOCKET_CHUNK_SIZE", cfg.chunk, 4096, 1 << 30)?;
        range("FERROCX_SOCKET_WINDOW", cfg.window, cfg.chunk, usize::MAX)?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_from_lookup() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c, Config::default());
        let e = Config::from_lookup(|n| (n == "FERROCX_SOCKET_NSOCKS").then(|| "9".into()))
            .unwrap_err();
        assert!(e.message().contains("FERROCX_SOCKET_NSOCKS=9"), "{e}");
        let c = Config::from_lookup(|n| match n {
            "FERROCX_SOCKET_NRAILS" => Some("2".into()),
            "FERROCX_SOCKET_RAIL_TIMEOUT" => Some("300ms".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            (c.max_rails, c.rail_timeout),
            (2, Duration::from_millis(300))
        );
        let c = Config::from_lookup(|n| match n {
            "FERROCX_SOCKET_DISABLE" => Some("1".into()),
            "FERROCX_SOCKET_IFNAME" => Some("=lo".into()),
            _ => None,
        })
        .unwrap();
        assert!(c.disabled);
        assert_eq!(c.ifname.unwrap().names, vec!["lo"]);
        let e = Config::from_lookup(|n| (n == "FERROCX_SOCKET_DISABLE").then(|| "maybe".into()))
            .unwrap_err();
        assert!(e.message().contains("FERROCX_SOCKET_DISABLE"), "{e}");
    }
}
