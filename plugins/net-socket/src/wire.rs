//! What travels: the connect blobs, the sender's hello, and the per-message header.

use ferrocx_sdk::{Blob, PluginError, PluginResult};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Blob magic of the receiving end ("FXSR").
pub const RECV_MAGIC: u32 = 0x4658_5352;
/// Blob magic of the sending end ("FXSS").
pub const SEND_MAGIC: u32 = 0x4658_5353;
/// Hello magic, the first bytes a sender writes on its socket ("FXSH").
pub const HELLO_MAGIC: u32 = 0x4658_5348;
/// Message header magic ("FXSM").
pub const MSG_MAGIC: u32 = 0x4658_534d;
/// Wire version.
pub const VERSION: u32 = 1;
/// Bytes of the hello.
pub const HELLO_BYTES: usize = 16;
/// Bytes of a message header.
pub const HEADER_BYTES: usize = 16;

ferrocx_sdk::shareable! {
    /// What the receiving end tells the sender: where to connect and the token to present.
    pub struct RecvInfo {
        pub magic: u32,
        pub version: u32,
        pub conn_id: u64,
        pub token: u64,
        pub family: u32,
        pub port: u32,
        pub addr: [u8; 16],
        pub scope_id: u32,
        pub reserved: u32,
    }
}

ferrocx_sdk::shareable! {
    /// What the sending end tells the receiver.
    pub struct SendInfo {
        pub magic: u32,
        pub version: u32,
        pub conn_id: u64,
    }
}

impl RecvInfo {
    /// Describe a listening socket.
    pub fn new(conn_id: u64, token: u64, addr: SocketAddr) -> Self {
        let (family, bytes, scope_id) = match addr {
            SocketAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.ip().octets());
                (4, b, 0)
            }
            SocketAddr::V6(a) => (6, a.ip().octets(), a.scope_id()),
        };
        RecvInfo {
            magic: RECV_MAGIC,
            version: VERSION,
            conn_id,
            token,
            family,
            port: u32::from(addr.port()),
            addr: bytes,
            scope_id,
            reserved: 0,
        }
    }

    /// Read and check the receiver's blob.
    pub fn parse(blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        let info: RecvInfo = blob.read()?;
        check(info.magic, RECV_MAGIC, info.version, info.conn_id, conn_id)?;
        Ok(info)
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

impl SendInfo {
    /// The sender's blob.
    pub fn new(conn_id: u64) -> Self {
        SendInfo {
            magic: SEND_MAGIC,
            version: VERSION,
            conn_id,
        }
    }

    /// Read and check the sender's blob.
    pub fn parse(blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        let info: SendInfo = blob.read()?;
        check(info.magic, SEND_MAGIC, info.version, info.conn_id, conn_id)?;
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

/// The hello a sender writes first: magic, version, token.
pub fn encode_hello(token: u64) -> [u8; HELLO_BYTES] {
    let mut b = [0u8; HELLO_BYTES];
    b[..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..].copy_from_slice(&token.to_le_bytes());
    b
}

/// Whether `b` is the hello carrying `token`.
pub fn hello_matches(b: &[u8; HELLO_BYTES], token: u64) -> bool {
    *b == encode_hello(token)
}

/// Header of message number `seq` (low 32 bits travel, as a check) of `len` bytes.
pub fn encode_header(seq: u64, len: u64) -> [u8; HEADER_BYTES] {
    let mut b = [0u8; HEADER_BYTES];
    b[..4].copy_from_slice(&MSG_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&(seq as u32).to_le_bytes());
    b[8..].copy_from_slice(&len.to_le_bytes());
    b
}

/// `(seq low 32 bits, length)` of a header, or why it is not one.
pub fn decode_header(b: &[u8; HEADER_BYTES]) -> PluginResult<(u32, u64)> {
    let word = |r: std::ops::Range<usize>| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&b[r]);
        u32::from_le_bytes(w)
    };
    if word(0..4) != MSG_MAGIC {
        return Err(PluginError::internal(format!(
            "net-socket protocol error: bad message header {b:02x?}"
        )));
    }
    let mut l = [0u8; 8];
    l.copy_from_slice(&b[8..]);
    Ok((word(4..8), u64::from_le_bytes(l)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        for (seq, len) in [
            (0, 0),
            (1, 7),
            (u64::from(u32::MAX) + 5, 1 << 40),
            (9, u64::MAX),
        ] {
            let h = encode_header(seq, len);
            assert_eq!(decode_header(&h).unwrap(), (seq as u32, len));
        }
        let mut h = encode_header(3, 4);
        h[0] ^= 1;
        assert!(decode_header(&h).is_err());
        assert_eq!(&encode_header(1, 2)[8..], &2u64.to_le_bytes());
    }

    #[test]
    fn hello_and_blobs() {
        assert!(hello_matches(&encode_hello(42), 42));
        assert!(!hello_matches(&encode_hello(42), 43));
        for addr in ["127.0.0.1:4242", "[::1]:9"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let mut blob = Blob::new();
            blob.write(&RecvInfo::new(7, 99, addr)).unwrap();
            let back = RecvInfo::parse(&blob, 7).unwrap();
            assert_eq!((back.token, back.socket_addr().unwrap()), (99, addr));
            assert!(RecvInfo::parse(&blob, 8).is_err());
            assert!(SendInfo::parse(&blob, 7).is_err());
        }
        let mut blob = Blob::new();
        blob.write(&SendInfo::new(5)).unwrap();
        assert!(SendInfo::parse(&blob, 5).is_ok());
    }
}
