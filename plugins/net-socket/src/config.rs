//! Tunables of the net-socket transport, read once at `init` through `Host::env`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_SOCKET_DISABLE` | `0` | `1` makes `can_connect` answer 0 for every peer |
//! | `FERROCX_SOCKET_IFNAME` | — | interfaces to use, NCCL syntax: `eth0,ib` (prefixes), `=eth0` (exact names), `^docker,lo` (exclude) |

use ferrocx_sdk::{Host, PluginError, PluginResult};

/// An `FERROCX_SOCKET_IFNAME` value: which interface names may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfSpec {
    /// `^…`: the list names interfaces to avoid.
    pub exclude: bool,
    /// `=…`: names must match exactly (otherwise they are prefixes).
    pub exact: bool,
    /// The names or prefixes.
    pub names: Vec<String>,
}

impl IfSpec {
    /// Parse NCCL's syntax: `[^][=]name[,name…]`.
    pub fn parse(s: &str) -> PluginResult<Self> {
        let mut rest = s.trim();
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let names: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        if names.is_empty() {
            return Err(PluginError::invalid(format!(
                "FERROCX_SOCKET_IFNAME={s:?} names no interface (use e.g. eth0, =eth0 or ^docker,lo)"
            )));
        }
        Ok(IfSpec {
            exclude,
            exact,
            names,
        })
    }

    /// The default when the variable is unset: anything but docker bridges and loopback.
    pub fn default_spec() -> Self {
        IfSpec {
            exclude: true,
            exact: false,
            names: vec!["docker".into(), "lo".into()],
        }
    }

    /// Whether the interface `name` may be used.
    pub fn allows(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// `FERROCX_SOCKET_DISABLE`: never offer this transport.
    pub disabled: bool,
    /// `FERROCX_SOCKET_IFNAME`, when set.
    pub ifname: Option<IfSpec>,
}

impl Config {
    /// Read the variables through the core's environment view.
    pub fn from_host(host: &Host) -> PluginResult<Self> {
        Self::from_lookup(|name| host.env(name))
    }

    /// Read the variables through `lookup` (unset → default).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> PluginResult<Self> {
        let disabled = match lookup("FERROCX_SOCKET_DISABLE") {
            None => false,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "" | "0" | "false" | "no" | "off" => false,
                "1" | "true" | "yes" | "on" => true,
                _ => {
                    return Err(PluginError::invalid(format!(
                        "FERROCX_SOCKET_DISABLE={v:?} is not a boolean (use 0 or 1)"
                    )))
                }
            },
        };
        let ifname = match lookup("FERROCX_SOCKET_IFNAME") {
            Some(v) if !v.trim().is_empty() => Some(IfSpec::parse(&v)?),
            _ => None,
        };
        Ok(Config { disabled, ifname })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_match_by_default() {
        let s = IfSpec::parse("eth").unwrap();
        assert!(!s.exclude && !s.exact);
        assert!(s.allows("eth0") && s.allows("eth1") && !s.allows("ib0") && !s.allows("lo"));
        let s = IfSpec::parse("lo").unwrap();
        assert!(s.allows("lo") && !s.allows("eth0"));
    }

    #[test]
    fn exact_match() {
        let s = IfSpec::parse("=eth0").unwrap();
        assert!(s.exact && !s.exclude);
        assert!(s.allows("eth0") && !s.allows("eth01") && !s.allows("eth"));
    }

    #[test]
    fn exclude_lists() {
        let s = IfSpec::parse("^docker,lo").unwrap();
        assert_eq!(s.names, vec!["docker", "lo"]);
        assert!(s.exclude);
        assert!(!s.allows("docker0") && !s.allows("lo") && s.allows("eth0"));
        let s = IfSpec::parse("^=eth0").unwrap();
        assert!(s.exclude && s.exact);
        assert!(!s.allows("eth0") && s.allows("eth01"));
        assert_eq!(IfSpec::default_spec(), IfSpec::parse("^docker,lo").unwrap());
    }

    #[test]
    fn lists_and_blanks() {
        let s = IfSpec::parse(" eth0 , ib ,").unwrap();
        assert_eq!(s.names, vec!["eth0", "ib"]);
        assert!(s.allows("ib3") && s.allows("eth0") && !s.allows("enp1"));
        assert!(IfSpec::parse("^").is_err());
        assert!(IfSpec::parse(",").is_err());
    }

    #[test]
    fn config_from_lookup() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c, Config::default());
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
