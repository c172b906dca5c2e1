//! Which local addresses the two paths listen on: the interfaces net-socket
//! would choose (the SDK's `iface`, which both use: up, not loopback or
//! docker, IPv4 first; loopback when nothing else qualifies), or those
//! `FERROCX_IBGDA_NET_IFS` allows (`FERROCX_SOCKET_IFNAME`'s syntax). The primary path
//! takes the first rail, the backup the second; a host with one rail carries
//! both paths on it (two connections, the same interface).

use ferrocx_sdk::iface::{self, IfSpec};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};

/// The two paths' local addresses (port 0), and the interfaces' names for
/// `describe`.
pub fn choose(spec: Option<&IfSpec>) -> Result<([SocketAddr; 2], [String; 2]), String> {
    let list = iface::list().map_err(|e| e.message().to_string())?;
    let rails = iface::choose_rails(&list, spec, 2).map_err(|e| e.message().to_string())?;
    let addr = |a: &iface::IfAddr| match a.ip {
        IpAddr::V4(ip) => SocketAddr::new(ip.into(), 0),
        IpAddr::V6(ip) => SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, a.scope_id)),
    };
    let first = &rails[0];
    let second = rails.get(1).unwrap_or(first);
    Ok((
        [addr(first), addr(second)],
        [first.name.clone(), second.name.clone()],
    ))
}
