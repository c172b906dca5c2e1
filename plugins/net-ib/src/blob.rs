//! The connect blob: what one end tells the other at setup — per rail the QP number,
//! first PSN, LID, GID, MTU and the remote key of its control region, plus the region's
//! address. Plain bytes only ([`Shareable`](ferrocx_sdk::Shareable)); decoding checks
//! magic, version, size, role, connection id and the region geometry, and says what
//! did not match.

use crate::ctrl::{self, RAILS};
use ferrocx_sdk::{shareable, Blob, PluginError, PluginResult};

/// `"FXIB"` in little-endian byte order.
pub const MAGIC: u32 = u32::from_le_bytes(*b"FXIB");
/// Wire version; bumped on any change of [`ConnBlob`] or of the control region.
pub const VERSION: u16 = 1;
/// Bytes of a device name in a blob (NUL-padded).
pub const DEV_NAME_BYTES: usize = 20;

/// The sending end of a connection.
pub const ROLE_SEND: u8 = 1;
/// The receiving end.
pub const ROLE_RECV: u8 = 2;
/// `link_layer`: InfiniBand.
pub const LL_IB: u8 = 1;
/// `link_layer`: Ethernet (RoCE).
pub const LL_ETH: u8 = 2;

shareable! {
    /// One rail of one end: a QP on one port.
    pub struct RailWire {
        /// QP number.
        pub qpn: u32,
        /// First packet sequence number of this QP's send queue.
        pub psn: u32,
        /// Remote key of the control region on this rail's device.
        pub rkey: u32,
        /// LID of the port (InfiniBand).
        pub lid: u16,
        /// Port number.
        pub port: u8,
        /// [`LL_IB`] or [`LL_ETH`].
        pub link_layer: u8,
        /// GID of the port.
        pub gid: [u8; 16],
        /// Active MTU (verbs enum: 1 = 256 … 5 = 4096).
        pub mtu: u8,
        /// GID index used (for logs).
        pub gid_index: u8,
        /// Zero.
        pub reserved: u16,
        /// Device name, NUL-padded.
        pub dev: [u8; DEV_NAME_BYTES],
    }
}

shareable! {
    /// The whole blob.
    pub struct ConnBlob {
        /// [`MAGIC`].
        pub magic: u32,
        /// [`VERSION`].
        pub version: u16,
        /// `size_of::<ConnBlob>()` as the writer was built.
        pub size: u16,
        /// Rails present (1 or 2).
        pub nrails: u8,
        /// [`ROLE_SEND`] or [`ROLE_RECV`].
        pub role: u8,
        /// Zero.
        pub reserved: u16,
        /// Rank of the writer (for error messages).
        pub rank: i32,
        /// The connection id the core gave both ends.
        pub conn_id: u64,
        /// Address of the writer's control region.
        pub region: u64,
        /// Its length.
        pub region_len: u64,
        /// Bounce slot size the writer was built with.
        pub bounce_bytes: u32,
        /// FIFO depth the writer was built with.
        pub depth: u32,
        /// Rails; entries past `nrails` are zero.
        pub rails: [RailWire; RAILS],
    }
}

impl RailWire {
    /// The device name as text.
    pub fn dev_name(&self) -> String {
        let end = self
            .dev
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(DEV_NAME_BYTES);
        String::from_utf8_lossy(&self.dev[..end]).into_owned()
    }

    /// Set the device name (truncated to fit).
    pub fn set_dev_name(&mut self, name: &str) {
        self.dev = [0; DEV_NAME_BYTES];
        let n = name.len().min(DEV_NAME_BYTES - 1);
        self.dev[..n].copy_from_slice(&name.as_bytes()[..n]);
    }

    /// An all-zero rail.
    pub fn zeroed() -> Self {
        RailWire {
            qpn: 0,
            psn: 0,
            rkey: 0,
            lid: 0,
            port: 0,
            link_layer: 0,
            gid: [0; 16],
            mtu: 0,
            gid_index: 0,
            reserved: 0,
            dev: [0; DEV_NAME_BYTES],
        }
    }
}

impl ConnBlob {
    /// A blob for `role` with this build's constants and no rails yet.
    pub fn new(role: u8, rank: i32, conn_id: u64, region: u64) -> Self {
        ConnBlob {
            magic: MAGIC,
            version: VERSION,
            size: std::mem::size_of::<ConnBlob>() as u16,
            nrails: 0,
            role,
            reserved: 0,
            rank,
            conn_id,
            region,
            region_len: ctrl::region_len() as u64,
            bounce_bytes: ctrl::BOUNCE_BYTES as u32,
            depth: ctrl::DEPTH as u32,
            rails: [RailWire::zeroed(); RAILS],
        }
    }

    /// Store into a blob.
    pub fn encode(&self, out: &mut Blob) -> PluginResult<()> {
        out.write(self)
    }

    /// Decode the peer's blob and check that it is a net-ib blob of this version, from
    /// the other end (`expect_role`) of connection `conn_id`, with usable rails.
    pub fn decode(blob: &Blob, expect_role: u8, conn_id: u64, peer: i32) -> PluginResult<Self> {
        let want = std::mem::size_of::<ConnBlob>();
        let bytes = blob.as_bytes();
        let bad = |what: String| {
            PluginError::invalid(format!("net-ib: connect blob from rank {peer}: {what}"))
        };
        if bytes.len() >= 4 {
            let magic = u32::from_le_bytes(bytes[..4].try_into().unwrap());
            if magic != MAGIC {
                return Err(bad(format!(
                    "magic {magic:#010x} is not net-ib's {MAGIC:#010x} (another transport's blob?)"
                )));
            }
        }
        if bytes.len() >= 8 {
            let version = u16::from_ne_bytes(bytes[4..6].try_into().unwrap());
            if version != VERSION {
                return Err(bad(format!(
                    "wire version {version}, this build speaks {VERSION} (mismatched plugin versions)"
                )));
            }
        }
        if bytes.len() != want {
            return Err(bad(format!(
                "{} bytes, expected {want} (mismatched plugin versions?)",
                bytes.len()
            )));
        }
        let b: ConnBlob = blob.read()?;
        if b.size as usize != want {
            return Err(bad(format!("size field {} != {want}", b.size)));
        }
        if b.role != expect_role {
            return Err(bad(format!(
                "role {} where {} was expected (both ends set up the same direction?)",
                b.role, expect_role
            )));
        }
        if b.conn_id != conn_id {
            return Err(bad(format!(
                "connection id {:#x}, expected {conn_id:#x}",
                b.conn_id
            )));
        }
        if b.depth as usize != ctrl::DEPTH
            || b.bounce_bytes as usize != ctrl::BOUNCE_BYTES
            || b.region_len as usize != ctrl::region_len()
        {
            return Err(bad(format!(
                "control region geometry depth {} bounce {} len {} differs from this build's {} {} {}",
                b.depth,
                b.bounce_bytes,
                b.region_len,
                ctrl::DEPTH,
                ctrl::BOUNCE_BYTES,
                ctrl::region_len()
            )));
        }
        if b.nrails == 0 || b.nrails as usize > RAILS {
            return Err(bad(format!("{} rails (1 or {RAILS} expected)", b.nrails)));
        }
        if b.region == 0 {
            return Err(bad("null control region".into()));
        }
        for (i, r) in b.rails[..b.nrails as usize].iter().enumerate() {
            if r.qpn == 0 || r.port == 0 || !matches!(r.link_layer, LL_IB | LL_ETH) {
                return Err(bad(format!(
                    "rail {i} ({}:{}) has qpn {} port {} link layer {}",
                    r.dev_name(),
                    r.port,
                    r.qpn,
                    r.port,
                    r.link_layer
                )));
            }
            if r.link_layer == LL_ETH && r.gid == [0; 16] {
                return Err(bad(format!(
                    "rail {i} ({}:{}) is RoCE but carries no GID",
                    r.dev_name(),
                    r.port
                )));
            }
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ConnBlob {
        let mut b = ConnBlob::new(ROLE_RECV, 3, 0xabcd, 0x7f00_0000_1000);
        for (i, ll) in [(0usize, LL_ETH), (1, LL_IB)] {
            let r = &mut b.rails[i];
            r.qpn = 0x100 + i as u32;
            r.psn = 0x123456 + i as u32;
            r.rkey = 0xdead_0000 + i as u32;
            r.lid = 7 + i as u16;
            r.port = 1 + i as u8;
            r.link_layer = ll;
            r.gid = [0xfe; 16];
            r.mtu = 5;
            r.gid_index = 3;
            r.set_dev_name(&format!("mlx5_{i}"));
        }
        b.nrails = 2;
        b
    }

    fn encoded(b: &ConnBlob) -> Blob {
        let mut out = Blob::new();
        b.encode(&mut out).unwrap();
        out
    }

    fn err(blob: &Blob) -> String {
        ConnBlob::decode(blob, ROLE_RECV, 0xabcd, 3)
            .unwrap_err()
            .message()
            .to_string()
    }

    #[test]
    fn round_trip() {
        let b = sample();
        let blob = encoded(&b);
        assert_eq!(blob.len as usize, std::mem::size_of::<ConnBlob>());
        assert!(blob.len as usize <= ferrocx_sdk::abi::FX_BLOB_BYTES);
        let back = ConnBlob::decode(&blob, ROLE_RECV, 0xabcd, 3).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.rails[1].dev_name(), "mlx5_1");
        assert_eq!(&blob.bytes[..4], b"FXIB");
        // A single rail is fine; the unused entry stays zero.
        let mut one = sample();
        one.nrails = 1;
        one.rails[1] = RailWire::zeroed();
        assert_eq!(
            ConnBlob::decode(&encoded(&one), ROLE_RECV, 0xabcd, 3).unwrap(),
            one
        );
    }

    #[test]
    fn long_device_names_are_truncated() {
        let mut r = RailWire::zeroed();
        r.set_dev_name("a_very_long_device_name_0123");
        assert_eq!(r.dev_name().len(), DEV_NAME_BYTES - 1);
        assert_eq!(r.dev_name(), "a_very_long_device_");
    }

    #[test]
    fn rejects_wrong_magic_version_and_size() {
        let good = encoded(&sample());
        let mut b = good;
        b.bytes[0] = b'X';
        assert!(
            err(&b).contains("magic") && err(&b).contains("rank 3"),
            "{}",
            err(&b)
        );
        let mut b = good;
        b.bytes[4..6].copy_from_slice(&(VERSION + 1).to_ne_bytes());
        assert!(err(&b).contains("wire version 2"), "{}", err(&b));
        let mut b = good;
        b.len -= 8;
        assert!(err(&b).contains("expected 160"), "{}", err(&b));
        let mut b = good;
        b.len += 8;
        assert!(err(&b).contains("168 bytes"), "{}", err(&b));
        let mut bad = sample();
        bad.size = 100;
        assert!(err(&encoded(&bad)).contains("size field 100"));
        // An empty blob (e.g. from a transport that sends none).
        assert!(err(&Blob::new()).contains("0 bytes"));
    }

    #[test]
    fn rejects_inconsistent_contents() {
        type Edit = Box<dyn Fn(&mut ConnBlob)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|b| b.role = ROLE_SEND), "role 1"),
            (Box::new(|b| b.conn_id = 1), "connection id 0x1"),
            (Box::new(|b| b.depth = 8), "geometry"),
            (Box::new(|b| b.bounce_bytes = 1), "geometry"),
            (Box::new(|b| b.nrails = 0), "0 rails"),
            (Box::new(|b| b.nrails = 3), "3 rails"),
            (Box::new(|b| b.region = 0), "null control region"),
            (
                Box::new(|b| b.rails[1].qpn = 0),
                "rail 1 (mlx5_1:2) has qpn 0",
            ),
            (Box::new(|b| b.rails[0].link_layer = 9), "link layer 9"),
            (
                Box::new(|b| b.rails[0].gid = [0; 16]),
                "RoCE but carries no GID",
            ),
        ];
        for (edit, want) in cases {
            let mut b = sample();
            edit(&mut b);
            let e = err(&encoded(&b));
            assert!(e.contains(want), "want {want:?} in {e:?}");
        }
        // A zero GID is fine on InfiniBand (LID routed).
        let mut b = sample();
        b.rails[1].gid = [0; 16];
        assert!(ConnBlob::decode(&encoded(&b), ROLE_RECV, 0xabcd, 3).is_ok());
    }
}
