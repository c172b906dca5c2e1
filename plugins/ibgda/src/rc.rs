//! Connecting the mlx5 handler's RC queue pairs, sans-IO: what each rank
//! publishes for its two paths (its port's address, its window on that NIC,
//! the number of its QP to every peer), checked and encoded for the
//! bootstrap's all-gather, and the attributes of every QP's RESET → INIT →
//! RTR → RTS transitions, computed from both ends' records and the health
//! timeout. The verbs calls that create the QPs and apply these attributes
//! are the host side's (`ferrocx-ibgda-host`'s `mlx5` module; never run: no
//! RDMA NIC has been lent, docs/IBGDA.md).
//!
//! Path `p` of rank `a` to rank `b` is one RC QP on `a`'s path-`p` port,
//! connected to `b`'s QP for `a` on `b`'s path-`p` port: primary to primary,
//! backup to backup, so a path is down or up on both ends together.

use std::fmt;

/// Paths per peer: the primary (0) and the backup (1).
pub const PATHS: usize = 2;

/// Magic of an encoded [`Endpoints`] record ("FXRC", little-endian).
pub const MAGIC: u32 = 0x4352_5846;

/// Version of the record's layout.
pub const VERSION: u32 = 1;

/// Bytes of the record's header (magic, version, rank, ranks).
const HEADER: usize = 16;

/// Bytes of one path's fixed part (before its QP numbers).
const PATH_FIXED: usize = 40;

/// How a port is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// InfiniBand: addressed by LID within the subnet.
    InfiniBand,
    /// RoCE: addressed by GID (an IP address), always through a global route.
    Ethernet,
}

/// A port's address and what it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAddr {
    /// InfiniBand or Ethernet.
    pub link: Link,
    /// Local identifier (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// The GID at `gid_index`.
    pub gid: [u8; 16],
    /// Which of the port's GIDs this rank sends from.
    pub gid_index: u8,
    /// The port's number, from 1.
    pub port: u8,
    /// Its active MTU in bytes (256 … 4096).
    pub mtu: u32,
}

/// One path of one rank: its port and its window registered on that NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathEnd {
    /// The port.
    pub addr: PortAddr,
    /// The window's address as the NIC sees it.
    pub window: u64,
    /// Its bytes.
    pub window_bytes: u64,
    /// Its remote key on this NIC.
    pub rkey: u32,
    /// Per rank, the number of this rank's QP to it on this path (0 for
    /// this rank itself).
    pub qpn: Vec<u32>,
}

/// What a rank publishes for its RC connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// The rank.
    pub rank: u32,
    /// Primary, then backup.
    pub paths: [PathEnd; PATHS],
}

/// What is wrong with a record or a pair of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RcError {
    /// Not a record of this version (what was found).
    Format(String),
    /// A record that contradicts itself or its slot in the all-gather.
    Invalid {
        /// The rank whose record it is.
        rank: u32,
        /// What is wrong.
        why: String,
    },
    /// Two ends of one path cannot be connected.
    Mismatch {
        /// This rank.
        me: u32,
        /// The peer.
        peer: u32,
        /// The path (0 primary, 1 backup).
        path: usize,
        /// Why.
        why: String,
    },
    /// A timeout no QP can keep.
    Timeout(String),
}

impl fmt::Display for RcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RcError::Format(why) => write!(f, "an RC endpoint record is malformed: {why}"),
            RcError::Invalid { rank, why } => write!(f, "rank {rank}'s RC endpoints: {why}"),
            RcError::Mismatch {
                me,
                peer,
                path,
                why,
            } => write!(
                f,
                "the {} path between rank {me} and rank {peer} cannot be connected: {why}",
                path_name(*path)
            ),
            RcError::Timeout(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for RcError {}

/// "primary" or "backup".
pub fn path_name(path: usize) -> &'static str {
    if path == 0 {
        "primary"
    } else {
        "backup"
    }
}

fn put_u16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_le_bytes());
}
/// Append `v` little-endian (also the mlx5 peer table's writer).
pub(crate) fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
/// Append `v` little-endian.
pub(crate) fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// Reads little-endian fields in order, failing past the end.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], RcError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| {
            RcError::Format(format!(
                "{} bytes, cut short at byte {}",
                self.b.len(),
                self.at
            ))
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, RcError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RcError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, RcError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, RcError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

impl Endpoints {
    /// Bytes of the record at `nranks` ranks (every rank's is as long).
    pub fn encoded_len(nranks: usize) -> usize {
        HEADER + PATHS * (PATH_FIXED + 16 + 4 * nranks)
    }

    /// Plain little-endian bytes for the bootstrap's all-gather.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.paths[0].qpn.len();
        let mut b = Vec::with_capacity(Self::encoded_len(n));
        put_u32(&mut b, MAGIC);
        put_u32(&mut b, VERSION);
        put_u32(&mut b, self.rank);
        put_u32(&mut b, n as u32);
        for p in &self.paths {
            let a = &p.addr;
            b.push(match a.link {
                Link::InfiniBand => 1,
                Link::Ethernet => 2,
            });
            b.push(a.port);
            b.push(a.gid_index);
            b.push(0);
            put_u16(&mut b, a.lid);
            put_u16(&mut b, 0);
            put_u32(&mut b, a.mtu);
            put_u32(&mut b, p.rkey);
            put_u64(&mut b, p.window);
            put_u64(&mut b, p.window_bytes);
            put_u64(&mut b, 0);
            b.extend_from_slice(&a.gid);
            // Every path has one QP number per rank, the rank itself's 0.
            for r in 0..n {
                put_u32(&mut b, p.qpn.get(r).copied().unwrap_or(0));
            }
        }
        debug_assert_eq!(b.len(), Self::encoded_len(n));
        b
    }

    /// Inverse of [`encode`](Self::encode), for the record found at `slot`
    /// of an all-gather of `nranks` ranks, checked ([`check`](Self::check)).
    pub fn decode(b: &[u8], slot: u32, nranks: usize) -> Result<Endpoints, RcError> {
        let mut r = Reader { b, at: 0 };
        let magic = r.u32()?;
        if magic != MAGIC {
            return Err(RcError::Format(format!("magic {magic:#x}, not {MAGIC:#x}")));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(RcError::Format(format!(
                "version {version}, this build reads {VERSION}"
            )));
        }
        let rank = r.u32()?;
        let n = r.u32()? as usize;
        if n != nranks {
            return Err(RcError::Invalid {
                rank,
                why: format!("written for {n} ranks, the communicator has {nranks}"),
            });
        }
        if b.len() != Self::encoded_len(n) {
            return Err(RcError::Format(format!(
                "{} bytes, {} expected at {n} ranks",
                b.len(),
                Self::encoded_len(n)
            )));
        }
        let mut path = || -> Result<PathEnd, RcError> {
            let link = match r.u8()? {
                1 => Link::InfiniBand,
                2 => Link::Ethernet,
                k => return Err(RcError::Format(format!("link kind {k}"))),
            };
            let port = r.u8()?;
            let gid_index = r.u8()?;
            r.u8()?;
            let lid = r.u16()?;
            r.u16()?;
            let mtu = r.u32()?;
            let rkey = r.u32()?;
            let window = r.u64()?;
            let window_bytes = r.u64()?;
            r.u64()?;
            let gid: [u8; 16] = r.take(16)?.try_into().expect("16");
            let qpn = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
            Ok(PathEnd {
                addr: PortAddr {
                    link,
                    lid,
                    gid,
                    gid_index,
                    port,
                    mtu,
                },
                window,
                window_bytes,
                rkey,
                qpn,
            })
        };
        let paths = [path()?, path()?];
        let e = Endpoints { rank, paths };
        if rank != slot {
            return Err(RcError::Invalid {
                rank,
                why: format!("found in rank {slot}'s slot of the all-gather"),
            });
        }
        e.check()?;
        Ok(e)
    }

    /// Whether the record is consistent: a QP number for every peer and none
    /// for the rank itself (24 bits, as verbs numbers them), a port and an
    /// MTU verbs can have, a window and its key, a LID on InfiniBand.
    pub fn check(&self) -> Result<(), RcError> {
        let bad = |why: String| RcError::Invalid {
            rank: self.rank,
            why,
        };
        let n = self.paths[0].qpn.len();
        if (self.rank as usize) >= n {
            return Err(bad(format!("rank {} of {n}", self.rank)));
        }
        for (i, p) in self.paths.iter().enumerate() {
            let which = path_name(i);
            if p.qpn.len() != n {
                return Err(bad(format!(
                    "{which} path: {} QP numbers, {n} ranks",
                    p.qpn.len()
                )));
            }
            for (r, &q) in p.qpn.iter().enumerate() {
                let me = r == self.rank as usize;
                if me && q != 0 {
                    return Err(bad(format!("{which} path: a QP to itself ({q:#x})")));
                }
                if !me && (q == 0 || q > 0xff_ffff) {
                    return Err(bad(format!(
                        "{which} path: QP number {q:#x} for rank {r} (1 … 0xffffff)"
                    )));
                }
            }
            if p.addr.port == 0 {
                return Err(bad(format!("{which} path: port 0 (ports count from 1)")));
            }
            if Mtu::from_bytes(p.addr.mtu).is_none() {
                return Err(bad(format!(
                    "{which} path: MTU {} (256, 512, 1024, 2048 or 4096)",
                    p.addr.mtu
                )));
            }
            if p.window_bytes == 0 || p.window.checked_add(p.window_bytes).is_none() {
                return Err(bad(format!(
                    "{which} path: a window of {} bytes at {:#x}",
                    p.window_bytes, p.window
                )));
            }
            if p.addr.link == Link::InfiniBand && p.addr.lid == 0 {
                return Err(bad(format!("{which} path: InfiniBand without a LID")));
            }
        }
        Ok(())
    }
}

/// An IB path MTU (the `IBV_MTU_*` enumeration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes (`IBV_MTU_256` = 1).
    B256 = 1,
    /// 512 bytes.
    B512 = 2,
    /// 1024 bytes.
    B1024 = 3,
    /// 2048 bytes.
    B2048 = 4,
    /// 4096 bytes (`IBV_MTU_4096` = 5).
    B4096 = 5,
}

impl Mtu {
    /// From a byte count (one of the five).
    pub fn from_bytes(b: u32) -> Option<Mtu> {
        Some(match b {
            256 => Mtu::B256,
            512 => Mtu::B512,
            1024 => Mtu::B1024,
            2048 => Mtu::B2048,
            4096 => Mtu::B4096,
            _ => return None,
        })
    }
}

/// Access a window's QP grants its peer: remote write, read and atomics
/// (`IBV_ACCESS_REMOTE_WRITE | _READ | _ATOMIC`).
pub const REMOTE_ACCESS: u32 = 0x2 | 0x4 | 0x8;

/// RESET → INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Init {
    /// The local port.
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// [`REMOTE_ACCESS`].
    pub access: u32,
}

/// INIT → RTR: where the peer's QP is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtr {
    /// The smaller of the two ports' MTUs.
    pub mtu: Mtu,
    /// The peer's QP for this rank on this path.
    pub dest_qpn: u32,
    /// The first packet sequence number expected.
    pub rq_psn: u32,
    /// RDMA reads and atomics the peer may have outstanding at this QP.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer (encoded, `12` = 0.64 ms).
    pub min_rnr_timer: u8,
    /// The peer's LID (InfiniBand).
    pub dlid: u16,
    /// Whether the route is global (always on Ethernet).
    pub global: bool,
    /// The peer's GID (global routes).
    pub dgid: [u8; 16],
    /// This port's GID index (global routes).
    pub sgid_index: u8,
    /// Hop limit (global routes).
    pub hop_limit: u8,
}

/// RTR → RTS: how long the NIC keeps trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rts {
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout ([`ack_timeout`]).
    pub timeout: u8,
    /// Retries after a timeout before the QP fails (at most 7).
    pub retry_cnt: u8,
    /// Retries after RNR NAKs (7: forever; an RDMA WRITE never meets one).
    pub rnr_retry: u8,
    /// The first packet sequence number sent.
    pub sq_psn: u32,
    /// RDMA reads and atomics this QP may have outstanding.
    pub max_rd_atomic: u8,
}

/// One QP's three transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// RESET → INIT.
    pub init: Init,
    /// INIT → RTR.
    pub rtr: Rtr,
    /// RTR → RTS.
    pub rts: Rts,
}

/// Retries after an ACK timeout: the most verbs allows, so a lost packet
/// costs a retry, not the path.
pub const RETRY_CNT: u8 = 7;

/// The RC ACK timeout exponent for a health timeout: the largest `t`
/// (1 … 31; 0 would mean "never") whose whole retry budget, (retries + 1) ×
/// 4.096 µs × 2^t, fits in `health_timeout_ns`, so the NIC reports a dead
/// path (retry exceeded) no later than the GPU fails its requests over. A
/// timeout below the smallest budget (65.5 µs) is refused: the GPU would fail
/// over paths that are only slow.
pub fn ack_timeout(health_timeout_ns: u64) -> Result<u8, RcError> {
    let tries = u64::from(RETRY_CNT) + 1;
    let budget = |t: u32| tries * 4096 * (1u64 << t);
    if budget(1) > health_timeout_ns {
        return Err(RcError::Timeout(format!(
            "a path timeout of {health_timeout_ns} ns is below what an RC QP can keep ({} ns: {tries} tries of 8.192 µs)",
            budget(1)
        )));
    }
    Ok((1..=31u32)
        .rev()
        .find(|&t| budget(t) <= health_timeout_ns)
        .expect("t = 1 fits") as u8)
}

/// Reads and atomics outstanding per QP (both directions).
pub const RD_ATOMIC: u8 = 16;

/// The transitions of `local`'s QP to `peer` on `path`, connected to
/// `remote`'s QP for `local` on the same path, with `health_timeout_ns` the
/// per-path health timeout. Both records checked ([`Endpoints::check`]).
pub fn connect(
    local: &Endpoints,
    remote: &Endpoints,
    path: usize,
    health_timeout_ns: u64,
) -> Result<Connect, RcError> {
    let mismatch = |why: String| RcError::Mismatch {
        me: local.rank,
        peer: remote.rank,
        path,
        why,
    };
    if path >= PATHS {
        return Err(mismatch(format!("path {path} (0 primary, 1 backup)")));
    }
    local.check()?;
    remote.check()?;
    if local.rank == remote.rank {
        return Err(mismatch("a rank is not connected to itself".into()));
    }
    let (l, r) = (&local.paths[path], &remote.paths[path]);
    if l.qpn.len() != r.qpn.len() {
        return Err(mismatch(format!(
            "records for {} and {} ranks",
            l.qpn.len(),
            r.qpn.len()
        )));
    }
    if l.addr.link != r.addr.link {
        return Err(mismatch(format!(
            "{:?} on rank {}, {:?} on rank {}",
            l.addr.link, local.rank, r.addr.link, remote.rank
        )));
    }
    let mtu = Mtu::from_bytes(l.addr.mtu.min(r.addr.mtu)).expect("checked");
    let global = l.addr.link == Link::Ethernet;
    let dest_qpn = r.qpn[local.rank as usize];
    Ok(Connect {
        init: Init {
            port: l.addr.port,
            pkey_index: 0,
            access: REMOTE_ACCESS,
        },
        rtr: Rtr {
            mtu,
            dest_qpn,
            // Fresh QPs on both ends start their sequences at 0.
            rq_psn: 0,
            max_dest_rd_atomic: RD_ATOMIC,
            min_rnr_timer: 12,
            dlid: if global { 0 } else { r.addr.lid },
            global,
            dgid: if global { r.addr.gid } else { [0; 16] },
            sgid_index: l.addr.gid_index,
            hop_limit: if global { 255 } else { 0 },
        },
        rts: Rts {
            timeout: ack_timeout(health_timeout_ns)?,
            retry_cnt: RETRY_CNT,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: RD_ATOMIC,
        },
    })
}

#[cfg(test)]
mod tests;
