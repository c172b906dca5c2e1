//! What the two ends tell each other at connect time: where each rail
//! listens and the token every socket must present (receiver), how many rails
//! and sockets open and how messages are cut (sender).

use crate::config::{MAX_NSOCKS, MAX_RAILS};
use crate::wire::VERSION;
use ferrocx_sdk::{Blob, PluginError, PluginResult};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Blob magic of the receiving end ("FXSR").
pub const RECV_MAGIC: u32 = 0x4658_5352;
/// Blob magic of the sending end ("FXSS").
pub const SEND_MAGIC: u32 = 0x4658_5353;

ferrocx_sdk::shareable! {
    /// One rail's listening address.
    pub struct RailAddr {
        pub family: u32,
        pub port: u32,
        pub addr: [u8; 16],
        pub scope_id: u32,
    }
}

ferrocx_sdk::shareable! {
    /// What the receiving end tells the sender: where each rail listens and the token
    /// every socket must present.
    pub struct RecvInfo {
        pub magic: u32,
        pub version: u32,
        pub conn_id: u64,
        pub token: u64,
        pub nrails: u32,
        pub reserved: u32,
        pub rails: [RailAddr; MAX_RAILS],
    }
}

ferrocx_sdk::shareable! {
    /// What the sending end tells the receiver: how many rails and sockets it opens
    /// and how it cuts messages.
    pub struct SendInfo {
        pub magic: u32,
        pub version: u32,
        pub conn_id: u64,
        pub nrails: u32,
        pub nsocks: u32,
        pub chunk: u64,
    }
}

impl RailAddr {
    /// Describe a listening address.
    pub fn new(addr: SocketAddr) -> Self {
        let (family, bytes, scope_id) = match addr {
            SocketAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.ip().octets());
                (4, b, 0)
            }
            SocketAddr::V6(a) => (6, a.ip().octets(), a.scope_id()),
        };
        RailAddr {
            family,
            port: u32::from(addr.port()),
            addr: bytes,
            scope_id,
        }
    }

    /// The address to connect to.
    pub fn socket_addr(&self) -> PluginResult<SocketAddr> {
        let port = u16::try_from(self.port).map_err(|_| {
            PluginError::invalid(format!("net-socket blob: bad port {}", self.port))
        })?;
        match self.family {
            4 => {
                let ip = Ipv4Addr::new(self.addr[0], self.addr[1], self.addr[2], self.addr[3]);
                Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
            }
            6 => Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(self.addr),
                port,
                0,
                self.scope_id,
            ))),
            f => Err(PluginError::invalid(format!(
                "net-socket blob: unknown address family {f}"
            ))),
        }
    }
}

impl RecvInfo {
    /// Describe the listening sockets, one per rail (at most [`MAX_RAILS`]).
    pub fn new(conn_id: u64, token: u64, rails: &[SocketAddr]) -> Self {
        let empty = RailAddr {
            family: 0,
            port: 0,
            addr: [0; 16],
            scope_id: 0,
        };
        let mut info = RecvInfo {
            magic: RECV_MAGIC,
            version: VERSION,
            conn_id,
            token,
            nrails: rails.len().min(MAX_RAILS) as u32,
            reserved: 0,
            rails: [empty; MAX_RAILS],
        };
        for (slot, a) in info.rails.iter_mut().zip(rails) {
            *slot = RailAddr::new(*a);
        }
        info
    }

    /// Read and check the receiver's blob.
    pub fn parse(blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        let info: RecvInfo = blob.read()?;
        check(info.magic, RECV_MAGIC, info.version, info.conn_id, conn_id)?;
        if info.nrails == 0 || info.nrails as usize > MAX_RAILS {
            return Err(PluginError::invalid(format!(
                "net-socket blob: {} rails (1..={MAX_RAILS} expected)",
                info.nrails
            )));
        }
        Ok(info)
    }

    /// The listening address of every rail.
    pub fn addrs(&self) -> PluginResult<Vec<SocketAddr>> {
        self.rails[..self.nrails as usize]
            .iter()
            .map(RailAddr::socket_addr)
            .collect()
    }
}

impl SendInfo {
    /// The sender's blob.
    pub fn new(conn_id: u64, nrails: usize, nsocks: usize, chunk: usize) -> Self {
        SendInfo {
            magic: SEND_MAGIC,
            version: VERSION,
            conn_id,
            nrails: nrails as u32,
            nsocks: nsocks as u32,
            chunk: chunk as u64,
        }
    }

    /// Read and check the sender's blob.
    pub fn parse(blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        let info: SendInfo = blob.read()?;
        check(info.magic, SEND_MAGIC, info.version, info.conn_id, conn_id)?;
        let bad = info.nrails == 0
            || info.nrails as usize > MAX_RAILS
            || info.nsocks == 0
            || info.nsocks as usize > MAX_NSOCKS
            || info.chunk == 0;
        if bad {
            return Err(PluginError::invalid(format!(
                "net-socket blob: {} rails × {} sockets, chunks of {} bytes: out of range",
                info.nrails, info.nsocks, info.chunk
            )));
        }
        Ok(info)
    }
}

fn check(magic: u32, want: u32, version: u32, id: u64, conn_id: u64) -> PluginResult<()> {
    if magic != want {
        return Err(PluginError::invalid(format!(
            "net-socket blob: magic {magic:#x}, expected {want:#x} (not a net-socket peer, or both ends set up the same direction)"
        )));
    }
    if version != VERSION {
        return Err(PluginError::invalid(format!(
            "net-socket blob: peer speaks version {version}, this plugin {VERSION}"
        )));
    }
    if id != conn_id {
        return Err(PluginError::invalid(format!(
            "net-socket blob: peer's connection id {id:#x} differs from ours {conn_id:#x} (miswired exchange)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_round_trip_and_are_checked() {
        let rails: Vec<SocketAddr> = ["127.0.0.1:4242", "[::1]:9"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let mut blob = Blob::new();
        blob.write(&RecvInfo::new(7, 99, &rails)).unwrap();
        let back = RecvInfo::parse(&blob, 7).unwrap();
        assert_eq!((back.token, back.addrs().unwrap()), (99, rails.clone()));
        assert!(RecvInfo::parse(&blob, 8).is_err());
        assert!(SendInfo::parse(&blob, 7).is_err());
        let mut blob = Blob::new();
        blob.write(&SendInfo::new(5, 2, 3, 1 << 19)).unwrap();
        let s = SendInfo::parse(&blob, 5).unwrap();
        assert_eq!((s.nrails, s.nsocks, s.chunk), (2, 3, 1 << 19));
        let mut blob = Blob::new();
        blob.write(&SendInfo::new(5, 0, 3, 1 << 19)).unwrap();
        assert!(SendInfo::parse(&blob, 5)
            .unwrap_err()
            .message()
            .contains("0 rails"));
        let mut blob = Blob::new();
        blob.write(&RecvInfo::new(7, 99, &[])).unwrap();
        assert!(RecvInfo::parse(&blob, 7).is_err());
    }
}
