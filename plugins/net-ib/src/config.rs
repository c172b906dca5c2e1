//! Tunables of the net-ib transport, read once at `init` through `Host::env`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_IB_DISABLE` | `0` | `1`: `can_connect` answers 0 for every peer |
//! | `FERROCX_IB_HCA` | — | devices and ports, NCCL syntax: `mlx5_0:1,mlx5_1:1` (prefixes, optional port), `=mlx5_0` (exact names), `^mlx5_3` (exclude) |
//! | `FERROCX_IB_TIMEOUT` | `20` | QP local ACK timeout exponent: 4.096 µs × 2^value per try (1–31) |
//! | `FERROCX_IB_RETRY_CNT` | `7` | QP transport retries before a completion fails (0–7) |
//! | `FERROCX_IB_GID_INDEX` | auto | GID table index (RoCE); auto prefers RoCE v2 IPv4-mapped GIDs |
//! | `FERROCX_IB_BACKUP` | `1` | `0`: no backup rail (a failed path fails the connection) |
//! | `FERROCX_IB_RECOVERY_MS` | `5000` | quiet window before a failed path is probed |
//! | `FERROCX_IB_CHUNK_BYTES` | `1048576` | bytes per RDMA WRITE (the unit that is resent on failover) |
//! | `FERROCX_IB_REG_CACHE` | `0` | unused transfer registrations kept per device (unsafe if memory is freed and remapped) |

use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::time::Duration;

/// One entry of an `FERROCX_IB_HCA` list: a device name (or prefix) and an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaEntry {
    /// Device name, or a prefix of it unless the list is exact.
    pub name: String,
    /// Port number (1-based), or `None` for every port.
    pub port: Option<u8>,
}

/// An `FERROCX_IB_HCA` value: which (device, port) pairs may be used.
///
/// Same rules as `FERROCX_SOCKET_IFNAME` (and NCCL's `NCCL_IB_HCA`), plus `:port`:
/// `^` excludes the listed entries, `=` makes names exact instead of prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaSpec {
    /// `^…`: the list names ports to avoid.
    pub exclude: bool,
    /// `=…`: names must match exactly (otherwise they are prefixes).
    pub exact: bool,
    /// The entries, in the order given.
    pub entries: Vec<HcaEntry>,
}

impl HcaSpec {
    /// Parse NCCL's syntax: `[^][=]name[:port][,name[:port]…]`.
    pub fn parse(s: &str) -> PluginResult<Self> {
        let (exclude, exact, rest) = ferrocx_sdk::iface::prefixes(s);
        let mut entries = Vec::new();
        for item in rest.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let (name, port) = match item.split_once(':') {
                None => (item, None),
                Some((name, port)) => {
                    let p: u8 = port.trim().parse().ok().filter(|&p| p >= 1).ok_or_else(|| {
                        PluginError::invalid(format!(
                            "FERROCX_IB_HCA={s:?}: port {port:?} of {name:?} is not a port number (1-255)"
                        ))
                    })?;
                    (name.trim(), Some(p))
                }
            };
            if name.is_empty() {
                return Err(PluginError::invalid(format!(
                    "FERROCX_IB_HCA={s:?}: entry {item:?} has no device name"
                )));
            }
            entries.push(HcaEntry {
                name: name.to_owned(),
                port,
            });
        }
        if entries.is_empty() {
            return Err(PluginError::invalid(format!(
                "FERROCX_IB_HCA={s:?} names no device (use e.g. mlx5_0:1,mlx5_1:1, =mlx5_0 or ^mlx5_3)"
            )));
        }
        Ok(HcaSpec {
            exclude,
            exact,
            entries,
        })
    }

    fn matches(&self, dev: &str, port: u8) -> bool {
        self.entries.iter().any(|e| {
            let name_ok = if self.exact {
                dev == e.name
            } else {
                dev.starts_with(e.name.as_str())
            };
            name_ok && e.port.is_none_or(|p| p == port)
        })
    }

    /// Whether port `port` of device `dev` may be used.
    pub fn allows(&self, dev: &str, port: u8) -> bool {
        self.matches(dev, port) != self.exclude
    }

    /// Position of the first entry that selects (`dev`, `port`) in an include list,
    /// so that the user's order can rank devices; `None` for exclude lists or no match.
    pub fn rank(&self, dev: &str, port: u8) -> Option<usize> {
        if self.exclude {
            return None;
        }
        self.entries.iter().position(|e| {
            let name_ok = if self.exact {
                dev == e.name
            } else {
                dev.starts_with(e.name.as_str())
            };
            name_ok && e.port.is_none_or(|p| p == port)
        })
    }
}

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `FERROCX_IB_DISABLE`: never offer this transport.
    pub disabled: bool,
    /// `FERROCX_IB_HCA`, when set.
    pub hca: Option<HcaSpec>,
    /// `FERROCX_IB_TIMEOUT`: the QP's local ACK timeout exponent.
    pub timeout: u8,
    /// `FERROCX_IB_RETRY_CNT`: transport retries.
    pub retry_cnt: u8,
    /// `FERROCX_IB_GID_INDEX`, when set.
    pub gid_index: Option<u8>,
    /// `FERROCX_IB_BACKUP`: open a backup rail per connection.
    pub backup: bool,
    /// `FERROCX_IB_RECOVERY_MS`: quiet window before a failed path is probed.
    pub recovery: Duration,
    /// `FERROCX_IB_CHUNK_BYTES`: bytes per RDMA WRITE.
    pub chunk_bytes: usize,
    /// `FERROCX_IB_REG_CACHE`: unused registrations kept per device.
    pub reg_cache: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            hca: None,
            timeout: 20,
            retry_cnt: 7,
            gid_index: None,
            backup: true,
            recovery: Duration::from_millis(5000),
            chunk_bytes: 1 << 20,
            reg_cache: 0,
        }
    }
}

fn parse_bool(name: &str, v: &str) -> PluginResult<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" | "off" => Ok(false),
        "1" | "true" | "yes" | "on" => Ok(true),
        _ => Err(PluginError::invalid(format!(
            "{name}={v:?} is not a boolean (use 0 or 1)"
        ))),
    }
}

fn parse_num(name: &str, v: &str, min: u64, max: u64) -> PluginResult<u64> {
    match v.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(PluginError::invalid(format!(
            "{name}={v:?} is not a number in {min}..={max}"
        ))),
    }
}

impl Config {
    /// Read the variables through the core's environment view.
    pub fn from_host(host: &Host) -> PluginResult<Self> {
        Self::from_lookup(|name| host.env(name))
    }

    /// Read the variables through `lookup` (unset or empty → default).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> PluginResult<Self> {
        let get = |n: &str| lookup(n).filter(|v| !v.trim().is_empty());
        let mut c = Config::default();
        if let Some(v) = get("FERROCX_IB_DISABLE") {
            c.disabled = parse_bool("FERROCX_IB_DISABLE", &v)?;
        }
        if let Some(v) = get("FERROCX_IB_HCA") {
            c.hca = Some(HcaSpec::parse(&v)?);
        }
        if let Some(v) = get("FERROCX_IB_TIMEOUT") {
            c.timeout = parse_num("FERROCX_IB_TIMEOUT", &v, 1, 31)? as u8;
        }
        if let Some(v) = get("FERROCX_IB_RETRY_CNT") {
            c.retry_cnt = parse_num("FERROCX_IB_RETRY_CNT", &v, 0, 7)? as u8;
        }
        if let Some(v) = get("FERROCX_IB_GID_INDEX") {
            c.gid_index = Some(parse_num("FERROCX_IB_GID_INDEX", &v, 0, 255)? as u8);
        }
        if let Some(v) = get("FERROCX_IB_BACKUP") {
            c.backup = parse_bool("FERROCX_IB_BACKUP", &v)?;
        }
        if let Some(v) = get("FERROCX_IB_RECOVERY_MS") {
            c.recovery =
                Duration::from_millis(parse_num("FERROCX_IB_RECOVERY_MS", &v, 1, 3_600_000)?);
        }
        if let Some(v) = get("FERROCX_IB_CHUNK_BYTES") {
            c.chunk_bytes = parse_num("FERROCX_IB_CHUNK_BYTES", &v, 4096, 1 << 30)? as usize;
        }
        if let Some(v) = get("FERROCX_IB_REG_CACHE") {
            c.reg_cache = parse_num("FERROCX_IB_REG_CACHE", &v, 0, 1 << 20)? as usize;
        }
        Ok(c)
    }

    /// How long a QP retries before a completion fails (the time to detect a dead path):
    /// 4.096 µs × 2^timeout × (retry_cnt + 1).
    pub fn detect_time(&self) -> Duration {
        let per_try_ns = 4096u128 << self.timeout;
        Duration::from_nanos((per_try_ns * (self.retry_cnt as u128 + 1)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, port: Option<u8>) -> HcaEntry {
        HcaEntry {
            name: name.into(),
            port,
        }
    }

    #[test]
    fn hca_prefixes_with_ports() {
        let s = HcaSpec::parse("mlx5_0:1,mlx5_1:1").unwrap();
        assert!(!s.exclude && !s.exact);
        assert_eq!(s.entries, vec![e("mlx5_0", Some(1)), e("mlx5_1", Some(1))]);
        assert!(s.allows("mlx5_0", 1) && s.allows("mlx5_1", 1));
        assert!(!s.allows("mlx5_0", 2), "port 2 is not listed");
        assert!(!s.allows("mlx5_2", 1));
        // Prefixes: mlx5_1 also selects mlx5_10 (as in NCCL; use = to avoid it).
        assert!(s.allows("mlx5_10", 1));
        assert_eq!(s.rank("mlx5_1", 1), Some(1));
        let s = HcaSpec::parse("mlx5").unwrap();
        assert!(s.allows("mlx5_7", 1) && s.allows("mlx5_7", 2) && !s.allows("bnxt_re0", 1));
    }

    #[test]
    fn hca_exact_and_exclude() {
        let s = HcaSpec::parse("=mlx5_0").unwrap();
        assert!(s.exact && !s.exclude);
        assert!(s.allows("mlx5_0", 1) && s.allows("mlx5_0", 2));
        assert!(!s.allows("mlx5_01", 1) && !s.allows("mlx5_", 1));
        let s = HcaSpec::parse("^mlx5_3").unwrap();
        assert!(s.exclude && !s.exact);
        assert!(!s.allows("mlx5_3", 1) && s.allows("mlx5_2", 1));
        assert_eq!(s.rank("mlx5_2", 1), None, "exclude lists do not rank");
        let s = HcaSpec::parse("^=mlx5_3:2").unwrap();
        assert!(s.exclude && s.exact);
        assert!(!s.allows("mlx5_3", 2) && s.allows("mlx5_3", 1) && s.allows("mlx5_30", 2));
        let s = HcaSpec::parse(" =mlx5_0:1 , mlx5_4 ,").unwrap();
        assert_eq!(s.entries, vec![e("mlx5_0", Some(1)), e("mlx5_4", None)]);
    }

    #[test]
    fn hca_errors_name_the_problem() {
        for bad in ["", "^", "=", ",", "^=,"] {
            let err = HcaSpec::parse(bad).unwrap_err();
            assert!(err.message().contains("names no device"), "{bad:?}: {err}");
        }
        let err = HcaSpec::parse("mlx5_0:x").unwrap_err();
        assert!(err.message().contains("port \"x\" of \"mlx5_0\""), "{err}");
        assert!(HcaSpec::parse("mlx5_0:0").is_err(), "ports start at 1");
        assert!(HcaSpec::parse("mlx5_0:256").is_err());
        let err = HcaSpec::parse(":1").unwrap_err();
        assert!(err.message().contains("no device name"), "{err}");
    }

    #[test]
    fn config_defaults_and_overrides() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!((c.timeout, c.retry_cnt), (20, 7));
        // NCCL's figure: 4.096 µs × 2^20 × 8 tries ≈ 34 s.
        assert_eq!(c.detect_time().as_secs(), 34);
        let c = Config::from_lookup(|n| {
            Some(
                match n {
                    "FERROCX_IB_DISABLE" => "1",
                    "FERROCX_IB_HCA" => "^mlx5_3",
                    "FERROCX_IB_TIMEOUT" => "14",
                    "FERROCX_IB_RETRY_CNT" => "3",
                    "FERROCX_IB_GID_INDEX" => "3",
                    "FERROCX_IB_BACKUP" => "0",
                    "FERROCX_IB_RECOVERY_MS" => "250",
                    "FERROCX_IB_CHUNK_BYTES" => "65536",
                    "FERROCX_IB_REG_CACHE" => "16",
                    _ => return None,
                }
                .into(),
            )
        })
        .unwrap();
        assert!(c.disabled && !c.backup);
        assert!(c.hca.unwrap().exclude);
        assert_eq!((c.timeout, c.retry_cnt, c.gid_index), (14, 3, Some(3)));
        assert_eq!(c.recovery, Duration::from_millis(250));
        assert_eq!((c.chunk_bytes, c.reg_cache), (65536, 16));
    }

    #[test]
    fn config_rejects_out_of_range_values() {
        for (name, v) in [
            ("FERROCX_IB_TIMEOUT", "0"),
            ("FERROCX_IB_TIMEOUT", "32"),
            ("FERROCX_IB_RETRY_CNT", "8"),
            ("FERROCX_IB_GID_INDEX", "-1"),
            ("FERROCX_IB_DISABLE", "maybe"),
            ("FERROCX_IB_CHUNK_BYTES", "12"),
            ("FERROCX_IB_HCA", "^"),
        ] {
            let err = Config::from_lookup(|n| (n == name).then(|| v.to_string())).unwrap_err();
            assert!(err.message().contains(name), "{name}={v}: {err}");
        }
    }
}
