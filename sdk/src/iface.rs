//! Network interfaces: which names a list in NCCL's syntax allows, their
//! enumeration (`getifaddrs`) and the choice of the addresses to listen on —
//! shared by the transports that open sockets (net-socket, ibgda's TCP
//! carrier).

use crate::{PluginError, PluginResult};
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An interface list in NCCL's syntax (`FERROCX_SOCKET_IFNAME`,
/// `FERROCX_IBGDA_NET_IFS`): which interface names may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfSpec {
    /// `^…`: the list names interfaces to avoid.
    pub exclude: bool,
    /// `=…`: names must match exactly (otherwise they are prefixes).
    pub exact: bool,
    /// The names or prefixes.
    pub names: Vec<String>,
}

/// NCCL's list prefixes (`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`): whether `s`
/// (trimmed) excludes (`^`), matches exactly (`=`, after `^`), and the list
/// that follows.
pub fn prefixes(s: &str) -> (bool, bool, &str) {
    let rest = s.trim();
    let (exclude, rest) = match rest.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    (exclude, exact, rest)
}

impl IfSpec {
    /// Parse NCCL's syntax: `[^][=]name[,name…]`, the value of `var` (named
    /// in the error).
    pub fn parse(var: &str, s: &str) -> PluginResult<Self> {
        let (exclude, exact, rest) = prefixes(s);
        let names: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        if names.is_empty() {
            return Err(PluginError::invalid(format!(
                "{var}={s:?} names no interface (use e.g. eth0, =eth0 or ^docker,lo)"
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

/// One address of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    /// Interface name, e.g. `eth0`.
    pub name: String,
    /// Its address.
    pub ip: IpAddr,
    /// IPv6 scope (interface index) for link-local addresses, else 0.
    pub scope_id: u32,
    /// `IFF_UP` is set.
    pub up: bool,
    /// `IFF_LOOPBACK` is set.
    pub loopback: bool,
}

/// Every IPv4/IPv6 address of every interface, in the kernel's order.
pub fn list() -> PluginResult<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(PluginError::last_os("getifaddrs"));
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr points to a sockaddr at least as large as its family's struct.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let (ip, scope_id) = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means the address is a sockaddr_in.
                let sin =
                    unsafe { std::ptr::read_unaligned(ifa.ifa_addr as *const libc::sockaddr_in) };
                (
                    IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())),
                    0,
                )
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means the address is a sockaddr_in6.
                let sin6 =
                    unsafe { std::ptr::read_unaligned(ifa.ifa_addr as *const libc::sockaddr_in6) };
                (
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    sin6.sin6_scope_id,
                )
            }
            _ => continue,
        };
        let flags = ifa.ifa_flags;
        out.push(IfAddr {
            name,
            ip,
            scope_id,
            up: flags & libc::IFF_UP as u32 != 0,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
        });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

fn link_local_v6(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

/// Pick the address to listen on from `addrs`: the first interface allowed by
/// `spec` (default: not loopback, not docker) that is up, IPv4 before IPv6 on
/// the same interface, IPv6 link-local skipped; with no `spec`, fall back to
/// loopback when nothing else qualifies.
pub fn choose(addrs: &[IfAddr], spec: Option<&IfSpec>) -> PluginResult<IfAddr> {
    Ok(choose_rails(addrs, spec, 1)?.swap_remove(0))
}

/// The rails: up to `max` interfaces chosen as [`choose`] chooses the first, one
/// address each, all of the first one's family (a rail pairs with the peer's rail of
/// the same index, so families must agree).
pub fn choose_rails(
    addrs: &[IfAddr],
    spec: Option<&IfSpec>,
    max: usize,
) -> PluginResult<Vec<IfAddr>> {
    let default = IfSpec::default_spec();
    let allowed = |a: &IfAddr| {
        a.up && !link_local_v6(&a.ip)
            && match spec {
                Some(s) => s.allows(&a.name),
                None => !a.loopback && default.allows(&a.name),
            }
    };
    let loopback = |a: &IfAddr| a.up && a.loopback;
    let pick = |ok: &dyn Fn(&IfAddr) -> bool| -> Vec<IfAddr> {
        let Some(first) = addrs.iter().find(|a| ok(a)) else {
            return Vec::new();
        };
        // The first interface's IPv4 address when it has one.
        let first = addrs
            .iter()
            .filter(|a| a.name == first.name && ok(a))
            .find(|a| a.ip.is_ipv4())
            .unwrap_or(first);
        let mut rails = vec![first.clone()];
        for a in addrs {
            if rails.len() >= max {
                break;
            }
            if ok(a)
                && a.ip.is_ipv4() == first.ip.is_ipv4()
                && rails.iter().all(|r| r.name != a.name)
            {
                rails.push(a.clone());
            }
        }
        rails
    };
    let mut rails = pick(&allowed);
    if rails.is_empty() && spec.is_none() {
        rails = pick(&loopback);
    }
    if !rails.is_empty() {
        return Ok(rails);
    }
    let seen: Vec<String> = addrs
        .iter()
        .map(|a| format!("{}={}{}", a.name, a.ip, if a.up { "" } else { "(down)" }))
        .collect();
    Err(PluginError::invalid(format!(
        "net-socket: no usable interface{} among {seen:?}",
        match spec {
            Some(s) => format!(" matches FERROCX_SOCKET_IFNAME ({s:?})"),
            None => String::new(),
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, ip: &str, up: bool) -> IfAddr {
        let ip: IpAddr = ip.parse().unwrap();
        IfAddr {
            name: name.into(),
            loopback: ip.is_loopback(),
            ip,
            scope_id: 0,
            up,
        }
    }

    #[test]
    fn default_skips_loopback_docker_and_down() {
        let l = vec![
            a("lo", "127.0.0.1", true),
            a("docker0", "172.17.0.1", true),
            a("eth0", "10.0.0.1", false),
            a("eth1", "fe80::1", true),
            a("eth1", "2001:db8::1", true),
            a("eth1", "10.0.1.1", true),
        ];
        let c = choose(&l, None).unwrap();
        assert_eq!(
            (c.name.as_str(), c.ip.to_string()),
            ("eth1", "10.0.1.1".into())
        );
    }

    #[test]
    fn falls_back_to_loopback_and_honours_ifname() {
        let l = vec![a("lo", "127.0.0.1", true), a("lo", "::1", true)];
        assert_eq!(choose(&l, None).unwrap().ip.to_string(), "127.0.0.1");
        let six = vec![a("lo", "::1", true), a("eth0", "10.0.0.1", true)];
        let lo = IfSpec::parse("V", "lo").unwrap();
        assert_eq!(choose(&six, Some(&lo)).unwrap().ip.to_string(), "::1");
        let none = IfSpec::parse("V", "=ib0").unwrap();
        assert!(choose(&six, Some(&none)).is_err());
    }

    #[test]
    fn rails_are_one_address_per_interface_of_one_family() {
        let l = vec![
            a("fxr0", "10.200.0.1", true),
            a("fxr0", "fd00::1", true),
            a("eth0", "192.0.2.2", true),
            a("fxr1", "fd01::1", true),
            a("fxr1", "10.201.0.1", true),
            a("fxr2", "10.202.0.1", false),
            a("fxr3", "10.203.0.1", true),
        ];
        let fxr = IfSpec::parse("V", "fxr").unwrap();
        let names = |r: Vec<IfAddr>| -> Vec<String> {
            r.iter().map(|a| format!("{}={}", a.name, a.ip)).collect()
        };
        assert_eq!(
            names(choose_rails(&l, Some(&fxr), 4).unwrap()),
            ["fxr0=10.200.0.1", "fxr1=10.201.0.1", "fxr3=10.203.0.1"]
        );
        assert_eq!(names(choose_rails(&l, Some(&fxr), 2).unwrap()).len(), 2);
        assert_eq!(
            names(choose_rails(&l, None, 1).unwrap()),
            ["fxr0=10.200.0.1"]
        );
        let v6 = vec![
            a("fxr0", "fd00::1", true),
            a("fxr1", "10.201.0.1", true),
            a("fxr1", "fd01::1", true),
        ];
        assert_eq!(
            names(choose_rails(&v6, Some(&fxr), 4).unwrap()),
            ["fxr0=fd00::1", "fxr1=fd01::1"]
        );
    }

    #[test]
    fn the_machine_has_a_usable_address() {
        let l = list().unwrap();
        assert!(choose(&l, None).is_ok(), "{l:?}");
    }

    #[test]
    fn prefix_match_by_default() {
        let s = IfSpec::parse("V", "eth").unwrap();
        assert!(!s.exclude && !s.exact);
        assert!(s.allows("eth0") && s.allows("eth1") && !s.allows("ib0") && !s.allows("lo"));
        let s = IfSpec::parse("V", "lo").unwrap();
        assert!(s.allows("lo") && !s.allows("eth0"));
    }

    #[test]
    fn exact_match() {
        let s = IfSpec::parse("V", "=eth0").unwrap();
        assert!(s.exact && !s.exclude);
        assert!(s.allows("eth0") && !s.allows("eth01") && !s.allows("eth"));
    }

    #[test]
    fn exclude_lists() {
        let s = IfSpec::parse("V", "^docker,lo").unwrap();
        assert_eq!(s.names, vec!["docker", "lo"]);
        assert!(s.exclude);
        assert!(!s.allows("docker0") && !s.allows("lo") && s.allows("eth0"));
        let s = IfSpec::parse("V", "^=eth0").unwrap();
        assert!(s.exclude && s.exact);
        assert!(!s.allows("eth0") && s.allows("eth01"));
        assert_eq!(
            IfSpec::default_spec(),
            IfSpec::parse("V", "^docker,lo").unwrap()
        );
    }

    #[test]
    fn lists_and_blanks() {
        let s = IfSpec::parse("V", " eth0 , ib ,").unwrap();
        assert_eq!(s.names, vec!["eth0", "ib"]);
        assert!(s.allows("ib3") && s.allows("eth0") && !s.allows("enp1"));
        assert!(IfSpec::parse("V", "^").is_err());
        assert!(IfSpec::parse("V", ",").is_err());
    }
}
