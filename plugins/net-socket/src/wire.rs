//! What travels: the connect blobs, the hello on each socket, and the frame headers.

use crate::config::{MAX_NSOCKS, MAX_RAILS};
use ferrocx_sdk::{Blob, PluginError, PluginResult};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Blob magic of the receiving end ("FXSR").
pub const RECV_MAGIC: u32 = 0x4658_5352;
/// Blob magic of the sending end ("FXSS").
pub const SEND_MAGIC: u32 = 0x4658_5353;
/// Hello magic, the first bytes a sender writes on each socket ("FXSH").
pub const HELLO_MAGIC: u32 = 0x4658_5348;
/// Frame magic ("FXSM").
pub const FRAME_MAGIC: u32 = 0x4658_534d;
/// Wire version (2: rails, chunked frames, acknowledgements).
pub const VERSION: u32 = 2;
/// Bytes of the hello.
pub const HELLO_BYTES: usize = 24;
/// Bytes of a frame header (data, acknowledgement or ping).
pub const FRAME_BYTES: usize = 32;

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

/// The hello a sender writes first on each socket: magic, version, token, socket index.
pub fn encode_hello(token: u64, stream: u32) -> [u8; HELLO_BYTES] {
    let mut b = [0u8; HELLO_BYTES];
    b[..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&token.to_le_bytes());
    b[16..20].copy_from_slice(&stream.to_le_bytes());
    b
}

/// The socket index a hello announces, if it carries `token`.
pub fn hello_stream(b: &[u8; HELLO_BYTES], token: u64) -> Option<u32> {
    let mut s = [0u8; 4];
    s.copy_from_slice(&b[16..20]);
    let stream = u32::from_le_bytes(s);
    (*b == encode_hello(token, stream)).then_some(stream)
}

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Sender → receiver: a chunk of message `seq` (of `total` bytes) at `offset`,
    /// payload follows.
    Data,
    /// Receiver → sender: the chunk of `seq` at `offset` is in place.
    Ack,
    /// Sender → receiver, no payload: keeps unacknowledged TCP data on an idle
    /// socket so a dead path is noticed (`TCP_USER_TIMEOUT`).
    Ping,
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// What it is.
    pub kind: Kind,
    /// Message sequence number on the connection.
    pub seq: u64,
    /// Message length (data frames).
    pub total: u64,
    /// Chunk offset in the message.
    pub offset: u64,
}

impl Frame {
    /// The 32 bytes on the wire.
    pub fn encode(&self) -> [u8; FRAME_BYTES] {
        let kind: u32 = match self.kind {
            Kind::Data => 1,
            Kind::Ack => 2,
            Kind::Ping => 3,
        };
        let mut b = [0u8; FRAME_BYTES];
        b[..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&kind.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.total.to_le_bytes());
        b[24..].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    /// Decode, or say why these bytes are not a frame.
    pub fn decode(b: &[u8; FRAME_BYTES]) -> PluginResult<Self> {
        let word = |r: std::ops::Range<usize>| -> u64 {
            let mut w = [0u8; 8];
            w[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(w)
        };
        let kind = match word(4..8) {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Ping,
            _ => Kind::Ping, // rejected below together with a bad magic
        };
        if word(0..4) != u64::from(FRAME_MAGIC) || !(1..=3).contains(&word(4..8)) {
            return Err(PluginError::internal(format!(
                "net-socket protocol error: bad frame header {b:02x?}"
            )));
        }
        Ok(Frame {
            kind,
            seq: word(8..16),
            total: word(16..24),
            offset: word(24..32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        for kind in [Kind::Data, Kind::Ack, Kind::Ping] {
            let f = Frame {
                kind,
                seq: u64::from(u32::MAX) + 5,
                total: 1 << 40,
                offset: 3 << 20,
            };
            assert_eq!(Frame::decode(&f.encode()).unwrap(), f);
        }
        let good = Frame {
            kind: Kind::Data,
            seq: 1,
            total: 2,
            offset: 0,
        }
        .encode();
        let mut bad = good;
        bad[0] ^= 1;
        assert!(Frame::decode(&bad).is_err());
        let mut bad = good;
        bad[4] = 9;
        assert!(Frame::decode(&bad).is_err());
    }

    #[test]
    fn hello_and_blobs() {
        assert_eq!(hello_stream(&encode_hello(42, 3), 42), Some(3));
        assert_eq!(hello_stream(&encode_hello(42, 3), 43), None);
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
