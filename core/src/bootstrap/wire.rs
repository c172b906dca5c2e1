//! Framing and encodings on bootstrap sockets.
//!
//! Every message is one frame: `kind: u8 | tag: u64 LE | len: u64 LE | payload[len]`.
//! Lengths are checked against a cap before anything is allocated, and payloads are read
//! incrementally, so a garbage header cannot make us allocate its claimed size up front.
//!
//! Frames by phase:
//! - rendezvous (rank → root): `Hello { magic, version, rank, nranks, RankInfo, auth }`;
//!   (root → rank): `Table { magic, nonce, nranks, RankInfo × nranks }` or `Reject { reason }`;
//! - mesh (lower rank → higher rank): `PeerHello { magic, version, nonce, from, to, auth }`,
//!   answered by `PeerAck`;
//! - authentication (`auth.rs`), between a hello and its answer when the hello's `auth`
//!   carries a challenge (`auth = 1 | challenge[32]`; `0`: the sender has no job secret):
//!   (acceptor → connector) `AuthChallenge { challenge[32], answer[32] }`, (connector →
//!   acceptor) `AuthAnswer { answer[32] }`; either side may instead send
//!   `AuthFail { reason }` and close;
//! - steady state: `Data` (tag = message tag), `Abort { reason }`, `Goodbye`.

use super::auth::{Answer, Challenge, ANSWER_LEN, CHALLENGE_LEN};
use super::RankInfo;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// First field of every hello: tells a ferrocx bootstrap from anything else on the port.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"FRCXBOOT");
/// Bumped on any incompatible change of this file's encodings (2: authentication).
pub(crate) const VERSION: u32 = 2;
/// Largest payload accepted on an established connection.
pub(crate) const MAX_PAYLOAD: u64 = 1 << 30;
/// Largest hello accepted from a connection that has not identified itself yet.
pub(crate) const MAX_HELLO: u64 = 64 << 10;
/// Longest host name carried in a [`RankInfo`].
const MAX_HOST_NAME: usize = 1024;
const HEADER_LEN: usize = 17;
/// Payloads up to this size are copied next to their header so a frame is one write.
const COALESCE: usize = 64 << 10;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Hello = 1,
    Table = 2,
    Reject = 3,
    PeerHello = 4,
    PeerAck = 5,
    Data = 6,
    Goodbye = 7,
    Abort = 8,
    AuthChallenge = 9,
    AuthAnswer = 10,
    AuthFail = 11,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Table,
            3 => Kind::Reject,
            4 => Kind::PeerHello,
            5 => Kind::PeerAck,
            6 => Kind::Data,
            7 => Kind::Goodbye,
            8 => Kind::Abort,
            9 => Kind::AuthChallenge,
            10 => Kind::AuthAnswer,
            11 => Kind::AuthFail,
            _ => return None,
        })
    }
}

/// One decoded frame.
#[derive(Debug)]
pub(crate) struct Frame {
    pub kind: Kind,
    pub tag: u64,
    pub payload: Vec<u8>,
}

/// Why no frame could be read.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The peer closed the connection at a frame boundary.
    Closed,
    /// A read timeout (set by the caller) expired.
    Timeout,
    /// The connection failed, or closed inside a frame.
    Io(io::Error),
    /// The bytes are not a valid frame.
    Malformed(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Closed => f.write_str("connection closed"),
            WireError::Timeout => f.write_str("timed out"),
            WireError::Io(e) => write!(f, "{e}"),
            WireError::Malformed(m) => write!(f, "malformed frame: {m}"),
        }
    }
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => WireError::Timeout,
            _ => WireError::Io(e),
        }
    }
}

/// Read one frame whose payload is at most `max_len` bytes.
pub(crate) fn read_frame<R: Read>(r: &mut R, max_len: u64) -> Result<Frame, WireError> {
    let mut hdr = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut hdr[got..]) {
            Ok(0) if got == 0 => return Err(WireError::Closed),
            Ok(0) => return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let kind = Kind::from_u8(hdr[0])
        .ok_or_else(|| WireError::Malformed(format!("unknown frame kind {}", hdr[0])))?;
    let tag = u64::from_le_bytes(hdr[1..9].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(hdr[9..17].try_into().expect("8 bytes"));
    if len > max_len {
        return Err(WireError::Malformed(format!(
            "{kind:?} frame claims {len} bytes, more than the {max_len} allowed"
        )));
    }
    // Grow with the data actually received rather than trusting `len` for the allocation.
    let mut payload = Vec::with_capacity(len.min(1 << 20) as usize);
    r.take(len).read_to_end(&mut payload)?;
    if (payload.len() as u64) < len {
        return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(Frame { kind, tag, payload })
}

/// Write one frame. Uses plain `write` (never `writev`): std sends with `MSG_NOSIGNAL`,
/// so a dead peer yields `EPIPE` instead of killing a host process that did not ignore SIGPIPE.
pub(crate) fn write_frame<W: Write>(
    w: &mut W,
    kind: Kind,
    tag: u64,
    payload: &[u8],
) -> io::Result<()> {
    let mut hdr = [0u8; HEADER_LEN];
    hdr[0] = kind as u8;
    hdr[1..9].copy_from_slice(&tag.to_le_bytes());
    hdr[9..17].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    if payload.len() <= COALESCE {
        let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
        buf.extend_from_slice(&hdr);
        buf.extend_from_slice(payload);
        w.write_all(&buf)?;
    } else {
        w.write_all(&hdr)?;
        w.write_all(payload)?;
    }
    w.flush()
}

/// Little-endian encoder.
#[derive(Default)]
pub(crate) struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    pub fn addr(&mut self, a: &SocketAddr) -> &mut Self {
        match a {
            SocketAddr::V4(a) => {
                self.u8(4).0.extend_from_slice(&a.ip().octets());
                self.u16(a.port())
            }
            SocketAddr::V6(a) => {
                self.u8(6).0.extend_from_slice(&a.ip().octets());
                self.u16(a.port()).u32(a.flowinfo()).u32(a.scope_id())
            }
        }
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    /// A hello's authentication field: `0` (no secret) or `1 | challenge`.
    pub fn auth(&mut self, challenge: &Option<Challenge>) -> &mut Self {
        match challenge {
            None => self.u8(0),
            Some(c) => self.u8(1).bytes(c),
        }
    }
    pub fn rank_info(&mut self, info: &RankInfo) -> &mut Self {
        self.u64(info.rank as u64)
            .u32(info.pid)
            .str(&info.host_name)
            .u64(info.host_hash)
            .u64(info.local_rank as u64)
            .u32(info.cuda_device as u32)
            .addr(&info.addr)
    }
}

/// Little-endian decoder over a received payload; errors say what was truncated or wrong.
pub(crate) struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| {
            format!(
                "truncated payload ({} bytes, needed {} more at offset {})",
                self.buf.len(),
                n,
                self.pos
            )
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    pub fn auth(&mut self) -> Result<Option<Challenge>, String> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.array()?)),
            m => Err(format!("unknown authentication method {m}")),
        }
    }
    pub fn usize(&mut self) -> Result<usize, String> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| format!("value {v} does not fit in usize"))
    }
    pub fn str(&mut self, max: usize) -> Result<String, String> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(format!("string of {n} bytes exceeds {max}"));
        }
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "string is not UTF-8".to_string())
    }
    pub fn addr(&mut self) -> Result<SocketAddr, String> {
        match self.u8()? {
            4 => {
                let ip: [u8; 4] = self.take(4)?.try_into().expect("4 bytes");
                Ok(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(ip),
                    self.u16()?,
                )))
            }
            6 => {
                let ip: [u8; 16] = self.take(16)?.try_into().expect("16 bytes");
                let port = self.u16()?;
                let flow = self.u32()?;
                let scope = self.u32()?;
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(ip),
                    port,
                    flow,
                    scope,
                )))
            }
            f => Err(format!("unknown address family tag {f}")),
        }
    }
    pub fn rank_info(&mut self) -> Result<RankInfo, String> {
        Ok(RankInfo {
            rank: self.usize()?,
            pid: self.u32()?,
            host_name: self.str(MAX_HOST_NAME)?,
            host_hash: self.u64()?,
            local_rank: self.usize()?,
            cuda_device: self.u32()? as i32,
            addr: self.addr()?,
        })
    }
    /// Everything must have been consumed: trailing bytes mean a version mismatch or garbage.
    pub fn finish(&self) -> Result<(), String> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(format!(
                "{} unexpected trailing bytes",
                self.buf.len() - self.pos
            ))
        }
    }
}

/// Rank → root at rendezvous.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RootHello {
    pub version: u32,
    pub rank: usize,
    pub nranks: usize,
    pub info: RankInfo,
    /// The rank's challenge; `None`: it has no job secret.
    pub challenge: Option<Challenge>,
}

impl RootHello {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u64(MAGIC)
            .u32(self.version)
            .u64(self.rank as u64)
            .u64(self.nranks as u64)
            .rank_info(&self.info)
            .auth(&self.challenge);
        e.0
    }
    /// Magic and version come first so a foreign client is told apart before anything else.
    pub fn decode(buf: &[u8]) -> Result<RootHello, String> {
        let mut d = Dec::new(buf);
        let version = check_header(&mut d)?;
        let hello = RootHello {
            version,
            rank: d.usize()?,
            nranks: d.usize()?,
            info: d.rank_info()?,
            challenge: d.auth()?,
        };
        d.finish()?;
        Ok(hello)
    }
}

/// Root → every rank: the communicator nonce and the table of all ranks.
pub(crate) fn encode_table(nonce: u64, table: &[RankInfo]) -> Vec<u8> {
    let mut e = Enc::default();
    e.u64(MAGIC).u64(nonce).u64(table.len() as u64);
    for info in table {
        e.rank_info(info);
    }
    e.0
}

pub(crate) fn decode_table(buf: &[u8]) -> Result<(u64, Vec<RankInfo>), String> {
    let mut d = Dec::new(buf);
    check_magic(&mut d)?;
    let nonce = d.u64()?;
    let n = d.usize()?;
    // Each entry is well over 8 bytes: bounds the allocation by the bytes received.
    if n > buf.len() / 8 {
        return Err(format!("table claims {n} ranks in {} bytes", buf.len()));
    }
    let mut table = Vec::with_capacity(n);
    for _ in 0..n {
        table.push(d.rank_info()?);
    }
    d.finish()?;
    Ok((nonce, table))
}

/// Lower rank → higher rank when building the mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerHello {
    pub nonce: u64,
    pub from: usize,
    pub to: usize,
    /// The connecting rank's challenge; `None`: it has no job secret.
    pub challenge: Option<Challenge>,
}

impl PeerHello {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u64(MAGIC)
            .u32(VERSION)
            .u64(self.nonce)
            .u64(self.from as u64)
            .u64(self.to as u64)
            .auth(&self.challenge);
        e.0
    }
    pub fn decode(buf: &[u8]) -> Result<PeerHello, String> {
        let mut d = Dec::new(buf);
        check_header(&mut d)?;
        let h = PeerHello {
            nonce: d.u64()?,
            from: d.usize()?,
            to: d.usize()?,
            challenge: d.auth()?,
        };
        d.finish()?;
        Ok(h)
    }

    /// Whether rank `me` of communicator `nonce` should accept this hello; `Err` says why not.
    pub fn check(&self, me: usize, nonce: u64) -> Result<(), String> {
        if self.nonce != nonce {
            return Err(format!(
                "it belongs to another communicator (nonce {:#018x}, ours {nonce:#018x}): a stale or foreign job",
                self.nonce
            ));
        }
        if self.to != me {
            return Err(format!(
                "it is addressed to rank {}, we are rank {me}",
                self.to
            ));
        }
        if self.from >= me {
            return Err(format!(
                "rank {} should not connect to us: only lower ranks connect to higher ones",
                self.from
            ));
        }
        Ok(())
    }
}

/// Acceptor → connector: its challenge and its answer (`auth.rs`).
pub(crate) fn encode_auth_challenge(challenge: &Challenge, answer: &Answer) -> Vec<u8> {
    let mut e = Enc::default();
    e.bytes(challenge).bytes(answer);
    e.0
}

pub(crate) fn decode_auth_challenge(buf: &[u8]) -> Result<(Challenge, Answer), String> {
    let mut d = Dec::new(buf);
    let c = d.array::<CHALLENGE_LEN>()?;
    let a = d.array::<ANSWER_LEN>()?;
    d.finish()?;
    Ok((c, a))
}

/// Magic, then a version this build speaks; returns the version.
fn check_header(d: &mut Dec<'_>) -> Result<u32, String> {
    check_magic(d)?;
    let version = d.u32()?;
    if version != VERSION {
        return Err(format!(
            "bootstrap protocol version {version}, this build speaks {VERSION}"
        ));
    }
    Ok(version)
}

fn check_magic(d: &mut Dec<'_>) -> Result<(), String> {
    let magic = d.u64()?;
    if magic != MAGIC {
        return Err(format!(
            "wrong magic {magic:#018x}: not a ferrocx bootstrap peer"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn info(rank: usize, addr: &str) -> RankInfo {
        RankInfo {
            rank,
            pid: 4242,
            host_name: "node-é".into(),
            host_hash: 0xdead_beef_0123_4567,
            local_rank: rank % 2,
            cuda_device: -1,
            addr: addr.parse().unwrap(),
        }
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, Kind::Data, 7, b"hello").unwrap();
        write_frame(&mut buf, Kind::Goodbye, 0, &[]).unwrap();
        let big = vec![0xabu8; COALESCE + 3];
        write_frame(&mut buf, Kind::Data, u64::MAX, &big).unwrap();
        let mut r = Cursor::new(buf);
        let f = read_frame(&mut r, MAX_PAYLOAD).unwrap();
        assert_eq!(
            (f.kind, f.tag, f.payload.as_slice()),
            (Kind::Data, 7, &b"hello"[..])
        );
        let f = read_frame(&mut r, MAX_PAYLOAD).unwrap();
        assert_eq!((f.kind, f.payload.len()), (Kind::Goodbye, 0));
        let f = read_frame(&mut r, MAX_PAYLOAD).unwrap();
        assert_eq!((f.tag, f.payload), (u64::MAX, big));
        assert!(matches!(
            read_frame(&mut r, MAX_PAYLOAD),
            Err(WireError::Closed)
        ));
    }

    #[test]
    fn bad_frames_are_rejected() {
        // Length over the cap: rejected from the header alone, nothing allocated.
        let mut hdr = vec![Kind::Data as u8];
        hdr.extend_from_slice(&0u64.to_le_bytes());
        hdr.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            read_frame(&mut Cursor::new(&hdr), MAX_PAYLOAD),
            Err(WireError::Malformed(_))
        ));
        // Within the cap but the data never comes: fails without allocating the claim.
        let mut hdr = vec![Kind::Data as u8];
        hdr.extend_from_slice(&0u64.to_le_bytes());
        hdr.extend_from_slice(&(MAX_PAYLOAD).to_le_bytes());
        hdr.extend_from_slice(b"abc");
        assert!(matches!(
            read_frame(&mut Cursor::new(&hdr), MAX_PAYLOAD),
            Err(WireError::Io(_))
        ));
        // Unknown kind (an HTTP request, say).
        let r = read_frame(
            &mut Cursor::new(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            MAX_HELLO,
        );
        assert!(matches!(r, Err(WireError::Malformed(_))), "{r:?}");
        // Truncated header.
        assert!(matches!(
            read_frame(&mut Cursor::new(&[6u8, 1, 2]), MAX_PAYLOAD),
            Err(WireError::Io(_))
        ));
    }

    #[test]
    fn hello_and_table_round_trip() {
        let hello = RootHello {
            version: VERSION,
            rank: 3,
            nranks: 4,
            info: info(3, "10.0.0.7:4000"),
            challenge: None,
        };
        assert_eq!(RootHello::decode(&hello.encode()).unwrap(), hello);
        let with_auth = RootHello {
            challenge: Some([0x5a; CHALLENGE_LEN]),
            ..hello.clone()
        };
        assert_eq!(RootHello::decode(&with_auth.encode()).unwrap(), with_auth);
        let mut bad_method = with_auth.encode();
        let method = bad_method.len() - CHALLENGE_LEN - 1;
        bad_method[method] = 7;
        assert!(RootHello::decode(&bad_method)
            .unwrap_err()
            .contains("unknown authentication method 7"));
        let table = vec![
            info(0, "10.0.0.1:1"),
            info(1, "[fe80::1%3]:29500"),
            info(2, "[::1]:2"),
        ];
        let (nonce, back) = decode_table(&encode_table(99, &table)).unwrap();
        assert_eq!((nonce, back), (99, table.clone()));
        if let SocketAddr::V6(a) = table[1].addr {
            assert_eq!(a.scope_id(), 3);
        }
        // Wrong magic, truncation, trailing garbage, version.
        let mut bad = hello.encode();
        bad[0] ^= 1;
        assert!(RootHello::decode(&bad).unwrap_err().contains("magic"));
        let enc = hello.encode();
        assert!(RootHello::decode(&enc[..enc.len() - 1])
            .unwrap_err()
            .contains("truncated"));
        let mut long = hello.encode();
        long.push(0);
        assert!(RootHello::decode(&long).unwrap_err().contains("trailing"));
        let old = RootHello {
            version: VERSION + 1,
            ..hello
        };
        assert!(RootHello::decode(&old.encode())
            .unwrap_err()
            .contains("version"));
        // A table claiming far more entries than bytes.
        let mut e = Enc::default();
        e.u64(MAGIC).u64(1).u64(u32::MAX as u64);
        assert!(decode_table(&e.0).is_err());
    }

    #[test]
    fn auth_challenge_round_trip() {
        let (c, a) = ([1u8; CHALLENGE_LEN], [2u8; ANSWER_LEN]);
        let enc = encode_auth_challenge(&c, &a);
        assert_eq!(enc.len(), CHALLENGE_LEN + ANSWER_LEN);
        assert_eq!(decode_auth_challenge(&enc).unwrap(), (c, a));
        assert!(decode_auth_challenge(&enc[1..]).is_err());
        let mut long = enc;
        long.push(0);
        assert!(decode_auth_challenge(&long).is_err());
    }

    #[test]
    fn peer_hello_checks() {
        let h = PeerHello {
            nonce: 5,
            from: 1,
            to: 3,
            challenge: None,
        };
        assert_eq!(PeerHello::decode(&h.encode()).unwrap(), h);
        let a = PeerHello {
            challenge: Some([3; CHALLENGE_LEN]),
            ..h
        };
        assert_eq!(PeerHello::decode(&a.encode()).unwrap(), a);
        // A challenge cut short.
        let enc = a.encode();
        assert!(PeerHello::decode(&enc[..enc.len() - 1])
            .unwrap_err()
            .contains("truncated"));
        assert!(h.check(3, 5).is_ok());
        assert!(h.check(3, 6).unwrap_err().contains("another communicator"));
        assert!(h.check(2, 5).unwrap_err().contains("addressed to rank 3"));
        assert!(PeerHello { from: 3, ..h }.check(3, 5).is_err());
        let mut bad = h.encode();
        bad[3] ^= 0xff;
        assert!(PeerHello::decode(&bad).unwrap_err().contains("magic"));
    }
}
