//! The mlx5 handler's table a kernel reads, one entry per peer: `struct
//! fxg_mlx5_peer` of the device header — both paths' send queue, doorbell
//! record, UAR and completion queue as the GPU maps them, the peer's window
//! on each path's NIC ([`crate::rc`]'s records), the path health at its start
//! and the put timeout — built as bytes in the header's layout (64-bit
//! little-endian: pointers are 8 bytes), so the host side copies the table to
//! device memory once, then rewrites only the window keys when a window is
//! registered ([`window_patch`]). The host side that creates the queues is
//! `ferrocx-ibgda-host`'s `mlx5` module; no NIC has run any of it
//! (docs/IBGDA.md).

use crate::rc::{self, put_u32, put_u64, PathEnd};

/// Bytes of `struct fxg_mlx5_path`.
pub const PATH_BYTES: usize = 88;
/// Bytes of `struct fxg_path_slot` (the health of one path).
pub const SLOT_BYTES: usize = 40;
/// Bytes of `struct fxg_health`.
pub const HEALTH_BYTES: usize = 2 * SLOT_BYTES + 8 + 8 + 8;
/// Bytes of `struct fxg_mlx5_peer`.
pub const PEER_BYTES: usize = 2 * PATH_BYTES + HEALTH_BYTES + 8;

/// Offset in `struct fxg_mlx5_path` of `raddr`, followed by `rkey` and
/// `lkey`: the 16 bytes that name the window a put goes from and to.
pub const PATH_KEYS_AT: usize = 56;

/// Bytes of one send-queue slot (a 64-byte basic block).
pub const SQ_SLOT_BYTES: u64 = 64;

/// One path's queues, as this rank's GPU reaches them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalQueues {
    /// The send queue's first slot.
    pub sq: u64,
    /// Its slots (a power of two).
    pub slots: u32,
    /// The QP's number.
    pub qpn: u32,
    /// The send doorbell record (4 bytes).
    pub dbrec: u64,
    /// The UAR's doorbell register (8 bytes).
    pub uar: u64,
    /// The completion queue's first entry.
    pub cq: u64,
    /// log2 of its entries.
    pub cq_log: u32,
    /// The CQ's doorbell record (4 bytes).
    pub cq_dbrec: u64,
    /// The local key of the sources on this NIC.
    pub lkey: u32,
}

/// One path of the entry: the local queues and the peer's window on that path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mlx5Path {
    /// This rank's queues.
    pub local: LocalQueues,
    /// The peer's window as that NIC addresses it.
    pub raddr: u64,
    /// Its remote key.
    pub rkey: u32,
}

/// One peer's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mlx5Peer {
    /// Primary, backup.
    pub paths: [Mlx5Path; 2],
    /// Whether the backup path exists.
    pub has_backup: bool,
    /// The first recovery window (ns): how long a failed path stays down.
    pub recovery_ns: u64,
    /// Its cap as failures double it (ns).
    pub max_recovery_ns: u64,
    /// How long a put waits for its completion on one path (ns).
    pub timeout_ns: u64,
}

impl Mlx5Path {
    /// This rank's queues toward a peer whose record for this path is `remote`.
    pub fn new(local: LocalQueues, remote: &PathEnd) -> Mlx5Path {
        Mlx5Path {
            local,
            raddr: remote.window,
            rkey: remote.rkey,
        }
    }

    fn check(&self, path: usize) -> Result<(), String> {
        let q = &self.local;
        let which = rc::path_name(path);
        if !q.slots.is_power_of_two() {
            return Err(format!(
                "{which} path: {} send queue slots (a power of two)",
                q.slots
            ));
        }
        if q.cq_log > 24 || (1u64 << q.cq_log) < u64::from(q.slots) {
            return Err(format!(
                "{which} path: a CQ of 2^{} entries for {} send queue slots",
                q.cq_log, q.slots
            ));
        }
        if q.qpn == 0 || q.qpn > 0xff_ffff {
            return Err(format!("{which} path: QP number {:#x}", q.qpn));
        }
        for (what, at, align) in [
            ("send queue", q.sq, SQ_SLOT_BYTES),
            ("doorbell record", q.dbrec, 4),
            ("UAR", q.uar, 8),
            ("completion queue", q.cq, 64),
            ("CQ doorbell record", q.cq_dbrec, 4),
        ] {
            if at == 0 || at % align != 0 {
                return Err(format!(
                    "{which} path: the {what} at {at:#x} ({align}-byte aligned, not null)"
                ));
            }
        }
        Ok(())
    }
}

impl Mlx5Peer {
    /// Whether the entry can be handed to a kernel: both paths' queues sound
    /// (the backup's only where it exists) and a timeout.
    pub fn check(&self) -> Result<(), String> {
        self.paths[0].check(0)?;
        if self.has_backup {
            self.paths[1].check(1)?;
        }
        if self.timeout_ns == 0 || self.recovery_ns == 0 {
            return Err("a put timeout and a recovery window above 0".into());
        }
        Ok(())
    }

    /// The entry's bytes ([`PEER_BYTES`]): the paths with their counters at
    /// 0 (fresh queues), the health as `fxg_health_init` leaves it.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(PEER_BYTES);
        for p in &self.paths {
            let q = &p.local;
            put_u64(&mut b, q.sq);
            put_u32(&mut b, q.slots);
            put_u32(&mut b, q.qpn);
            put_u64(&mut b, q.dbrec);
            put_u64(&mut b, q.uar);
            put_u64(&mut b, q.cq);
            put_u32(&mut b, q.cq_log);
            put_u32(&mut b, 0);
            put_u64(&mut b, q.cq_dbrec);
            put_u64(&mut b, p.raddr);
            put_u32(&mut b, p.rkey);
            put_u32(&mut b, q.lkey);
            // pi, done, ci; padding.
            b.extend_from_slice(&[0; 16]);
        }
        for _ in 0..2 {
            // down, has_restored, since, last_failure; window; restored.
            b.extend_from_slice(&[0; 24]);
            put_u64(&mut b, self.recovery_ns);
            put_u64(&mut b, 0);
        }
        put_u32(&mut b, self.has_backup as u32);
        put_u32(&mut b, 0);
        put_u64(&mut b, self.recovery_ns);
        put_u64(&mut b, self.max_recovery_ns.max(self.recovery_ns));
        put_u64(&mut b, self.timeout_ns);
        debug_assert_eq!(b.len(), PEER_BYTES);
        b
    }
}

/// The table for rank `me`: one entry per rank in rank order (zeros for
/// `me` itself), each checked; an error names the peer.
pub fn table(me: usize, peers: &[Option<Mlx5Peer>]) -> Result<Vec<u8>, String> {
    let mut b = Vec::with_capacity(peers.len() * PEER_BYTES);
    for (r, p) in peers.iter().enumerate() {
        match (r == me, p) {
            (true, None) => b.extend_from_slice(&[0; PEER_BYTES]),
            (true, Some(_)) => return Err(format!("rank {me} has an mlx5 entry for itself")),
            (false, None) => return Err(format!("rank {me} has no mlx5 entry for rank {r}")),
            (false, Some(p)) => {
                p.check()
                    .map_err(|e| format!("rank {me}'s mlx5 entry for rank {r}: {e}"))?;
                b.extend_from_slice(&p.encode());
            }
        }
    }
    Ok(b)
}

/// The health settings every entry starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthStart {
    /// The first recovery window (ns).
    pub recovery_ns: u64,
    /// Its cap (ns).
    pub max_recovery_ns: u64,
    /// The put timeout per path (ns).
    pub timeout_ns: u64,
}

/// Rank `me`'s table from every rank's RC record (`all`, rank order, as
/// the all-gather gave them) and this rank's queues toward each peer
/// (`queues[q][path]`; `None` for itself and for a backup it has not): each
/// path takes the peer's window and key from the peer's record for that path,
/// and its QP must be the one this rank published for that peer and path.
pub fn from_records(
    me: usize,
    all: &[rc::Endpoints],
    queues: &[[Option<LocalQueues>; 2]],
    health: HealthStart,
) -> Result<Vec<u8>, String> {
    if queues.len() != all.len() || me >= all.len() {
        return Err(format!(
            "rank {me}: {} ranks' records, queues toward {}",
            all.len(),
            queues.len()
        ));
    }
    let mine = &all[me];
    let peers: Vec<Option<Mlx5Peer>> = (0..all.len())
        .map(|q| {
            if q == me {
                return Ok(None);
            }
            let mut paths = [Mlx5Path::default(); 2];
            for (p, slot) in paths.iter_mut().enumerate() {
                let Some(local) = queues[q][p] else {
                    if p == 0 {
                        return Err(format!("rank {me} has no primary queue toward rank {q}"));
                    }
                    continue;
                };
                let published = mine.paths[p].qpn[q];
                if local.qpn != published {
                    return Err(format!(
                        "rank {me}'s {} QP toward rank {q} is {:#x}, its record says {published:#x}",
                        rc::path_name(p),
                        local.qpn
                    ));
                }
                *slot = Mlx5Path::new(local, &all[q].paths[p]);
            }
            Ok(Some(Mlx5Peer {
                paths,
                has_backup: queues[q][1].is_some(),
                recovery_ns: health.recovery_ns,
                max_recovery_ns: health.max_recovery_ns,
                timeout_ns: health.timeout_ns,
            }))
        })
        .collect::<Result<_, String>>()?;
    table(me, &peers)
}

/// One rank's window on one path's NIC: its address there and remote key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowKey {
    /// The window's address as the NIC addresses it.
    pub addr: u64,
    /// Its remote key on that NIC.
    pub rkey: u32,
}

/// The writes that turn rank `me`'s table toward another window: for every
/// peer and path, its offset in the table and the 16 bytes of `raddr`,
/// `rkey`, `lkey` — the peer's window on that path (`windows[q][path]`) and
/// the local key of this rank's sources there (`lkeys[path]`). Only those
/// fields: the queues' counters and the path health the GPU keeps in the
/// same entries are not touched, so a table in use stays consistent.
/// `backup`: whether entries have a backup path (else only the primary's).
pub fn window_patch(
    me: usize,
    windows: &[[WindowKey; 2]],
    lkeys: [u32; 2],
    backup: bool,
) -> Vec<(usize, [u8; 16])> {
    let paths = if backup { 2 } else { 1 };
    let mut out = Vec::with_capacity(windows.len() * paths);
    for (q, w) in windows.iter().enumerate() {
        if q == me {
            continue;
        }
        for p in 0..paths {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&w[p].addr.to_le_bytes());
            b[8..12].copy_from_slice(&w[p].rkey.to_le_bytes());
            b[12..].copy_from_slice(&lkeys[p].to_le_bytes());
            out.push((q * PEER_BYTES + p * PATH_BYTES + PATH_KEYS_AT, b));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(k: u64) -> LocalQueues {
        LocalQueues {
            sq: 0x7f00_0000_0000 + k * 0x10_0000,
            slots: 16,
            qpn: 0x100 + k as u32,
            dbrec: 0x7f10_0000_0000 + k * 0x40,
            uar: 0x7f20_0000_0000 + k * 0x1000,
            cq: 0x7f30_0000_0000 + k * 0x10_0000,
            cq_log: 5,
            cq_dbrec: 0x7f40_0000_0000 + k * 0x40,
            lkey: 0xaa00 + k as u32,
        }
    }

    fn peer(k: u64) -> Mlx5Peer {
        Mlx5Peer {
            paths: [
                Mlx5Path {
                    local: queues(2 * k),
                    raddr: 0x5000 + k,
                    rkey: 0xbb00 + k as u32,
                },
                Mlx5Path {
                    local: queues(2 * k + 1),
                    raddr: 0x6000 + k,
                    rkey: 0xcc00 + k as u32,
                },
            ],
            has_backup: true,
            recovery_ns: 3_000_000_000,
            max_recovery_ns: 60_000_000_000,
            timeout_ns: 1_000_000_000,
        }
    }

    #[test]
    fn entries_are_laid_out_as_the_header_reads_them() {
        assert_eq!((PATH_BYTES, HEALTH_BYTES, PEER_BYTES), (88, 104, 288));
        let p = peer(1);
        let b = p.encode();
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        // The backup path's fields at their offsets.
        let o = PATH_BYTES;
        assert_eq!(u64_at(o), p.paths[1].local.sq);
        assert_eq!((u32_at(o + 8), u32_at(o + 12)), (16, p.paths[1].local.qpn));
        assert_eq!(u64_at(o + 48), p.paths[1].local.cq_dbrec);
        assert_eq!(u64_at(o + 56), 0x6001);
        assert_eq!(
            (u32_at(o + 64), u32_at(o + 68)),
            (0xcc01, p.paths[1].local.lkey)
        );
        // Health: each path's window starts at the recovery window.
        let h = 2 * PATH_BYTES;
        assert_eq!(u64_at(h + 24), 3_000_000_000);
        assert_eq!(u64_at(h + SLOT_BYTES + 24), 3_000_000_000);
        assert_eq!(u32_at(h + 2 * SLOT_BYTES), 1);
        assert_eq!(u64_at(PEER_BYTES - 8), 1_000_000_000);
    }

    /// A table patched toward a window equals the table built with that
    /// window's keys, and a table whose GPU state moved keeps that state.
    #[test]
    fn a_window_patch_rewrites_only_the_keys() {
        let me = 1;
        let mut peers = [Some(peer(0)), None, Some(peer(2)), Some(peer(3))];
        let mut t = table(me, &peers).unwrap();
        // The GPU has posted on rank 3's primary and a path went down.
        let pi = 3 * PEER_BYTES + 72;
        t[pi..pi + 4].copy_from_slice(&7u32.to_le_bytes());
        let down = 3 * PEER_BYTES + 2 * PATH_BYTES;
        t[down] = 1;
        let moved = t.clone();
        let key = |q: usize, p: usize| WindowKey {
            addr: 0x9000_0000 + (q as u64) * 0x100 + p as u64,
            rkey: 0xd000 + (10 * q + p) as u32,
        };
        let windows: Vec<[WindowKey; 2]> = (0..4).map(|q| [key(q, 0), key(q, 1)]).collect();
        for (at, b) in window_patch(me, &windows, [0xe0, 0xe1], true) {
            t[at..at + 16].copy_from_slice(&b);
        }
        for (q, p) in peers.iter_mut().enumerate() {
            if let Some(p) = p {
                for (k, path) in p.paths.iter_mut().enumerate() {
                    path.raddr = key(q, k).addr;
                    path.rkey = key(q, k).rkey;
                    path.local.lkey = 0xe0 + k as u32;
                }
            }
        }
        let mut want = table(me, &peers).unwrap();
        want[pi..pi + 4].copy_from_slice(&7u32.to_le_bytes());
        want[down] = 1;
        assert_eq!(t, want);
        // Nothing but keys changed: every differing byte is in a key field.
        for (i, (a, b)) in moved.iter().zip(&t).enumerate() {
            if a != b {
                let o = i % PEER_BYTES % PATH_BYTES;
                assert!(
                    i % PEER_BYTES < 2 * PATH_BYTES
                        && (PATH_KEYS_AT..PATH_KEYS_AT + 16).contains(&o),
                    "byte {i}"
                );
            }
        }
        // Without a backup, primaries only; never this rank's zero entry.
        let w = window_patch(me, &windows, [1, 2], false);
        assert_eq!(w.len(), 3);
        assert!(w
            .iter()
            .all(|(at, _)| at % PEER_BYTES == PATH_KEYS_AT && at / PEER_BYTES != me));
    }

    #[test]
    fn a_table_holds_every_peer_and_names_what_is_wrong() {
        let peers = [Some(peer(0)), None, Some(peer(2))];
        let t = table(1, &peers).unwrap();
        assert_eq!(t.len(), 3 * PEER_BYTES);
        assert!(t[PEER_BYTES..2 * PEER_BYTES].iter().all(|&x| x == 0));
        assert_eq!(&t[2 * PEER_BYTES..], &peer(2).encode()[..]);
        assert_eq!(
            table(0, &peers).unwrap_err(),
            "rank 0 has an mlx5 entry for itself"
        );
        assert_eq!(
            table(1, &[Some(peer(0)), None, None]).unwrap_err(),
            "rank 1 has no mlx5 entry for rank 2"
        );
        let bad = |f: &dyn Fn(&mut Mlx5Peer)| {
            let mut p = peer(0);
            f(&mut p);
            table(1, &[Some(p), None]).unwrap_err()
        };
        assert!(bad(&|p| p.paths[0].local.slots = 12).contains("primary path: 12 send queue slots"));
        assert!(bad(&|p| p.paths[1].local.cq_log = 3)
            .contains("backup path: a CQ of 2^3 entries for 16"));
        assert!(bad(&|p| p.paths[0].local.qpn = 0).contains("QP number 0x0"));
        assert!(bad(&|p| p.paths[0].local.uar = 0x1004).contains("the UAR at 0x1004"));
        assert!(bad(&|p| p.paths[1].local.sq = 0).contains("backup path: the send queue at 0x0"));
        assert!(bad(&|p| p.timeout_ns = 0).contains("timeout"));
        assert!(bad(&|p| p.paths[0].local.cq_log = 25).contains("2^25"));
        // Without a backup its path is not looked at.
        let mut lone = peer(0);
        lone.has_backup = false;
        lone.paths[1] = Mlx5Path::default();
        assert!(table(1, &[Some(lone), None]).is_ok());
    }

    /// An entry from both ends' records: the peer's window and key on each
    /// path's NIC.
    #[test]
    fn paths_take_the_peer_s_window_on_their_nic() {
        let remote = PathEnd {
            addr: rc::PortAddr {
                link: rc::Link::Ethernet,
                lid: 0,
                gid: [1; 16],
                gid_index: 0,
                port: 1,
                mtu: 4096,
            },
            window: 0xdead_0000,
            window_bytes: 1 << 20,
            rkey: 0x4242,
            qpn: vec![0x11, 0],
        };
        let p = Mlx5Path::new(queues(0), &remote);
        assert_eq!((p.raddr, p.rkey), (0xdead_0000, 0x4242));
    }

    /// From the all-gathered records: each peer's window on each path's NIC,
    /// this rank's QPs checked against what it published.
    #[test]
    fn a_table_from_the_records() {
        let n = 3;
        let record = |rank: u32| rc::Endpoints {
            rank,
            paths: [0, 1].map(|p| PathEnd {
                addr: rc::PortAddr {
                    link: rc::Link::Ethernet,
                    lid: 0,
                    gid: [rank as u8; 16],
                    gid_index: 0,
                    port: 1 + p as u8,
                    mtu: 4096,
                },
                window: 0x1_0000_0000 * (rank as u64 + 1) + p as u64 * 0x1000_0000,
                window_bytes: 1 << 20,
                rkey: 0x100 * (rank + 1) + p,
                qpn: (0..n as u32)
                    .map(|q| {
                        if q == rank {
                            0
                        } else {
                            0x1000 + rank * 0x10 + p * 0x8 + q
                        }
                    })
                    .collect(),
            }),
        };
        let all: Vec<rc::Endpoints> = (0..n as u32).map(record).collect();
        let me = 1;
        let queues: Vec<[Option<LocalQueues>; 2]> = (0..n)
            .map(|q| {
                if q == me {
                    return [None, None];
                }
                [0, 1].map(|p| {
                    Some(LocalQueues {
                        qpn: all[me].paths[p].qpn[q],
                        ..queues(q as u64 * 2 + p as u64)
                    })
                })
            })
            .collect();
        let h = HealthStart {
            recovery_ns: 3_000_000_000,
            max_recovery_ns: 60_000_000_000,
            timeout_ns: 1_000_000_000,
        };
        let t = from_records(me, &all, &queues, h).unwrap();
        assert_eq!(t.len(), n * PEER_BYTES);
        let u64_at = |o: usize| u64::from_le_bytes(t[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(t[o..o + 4].try_into().unwrap());
        for q in [0, 2] {
            for p in 0..2 {
                let o = q * PEER_BYTES + p * PATH_BYTES;
                assert_eq!(u64_at(o + 56), all[q].paths[p].window, "raddr {q}/{p}");
                assert_eq!(u32_at(o + 64), all[q].paths[p].rkey, "rkey {q}/{p}");
                assert_eq!(u32_at(o + 12), all[me].paths[p].qpn[q], "qpn {q}/{p}");
            }
        }
        // A QP that is not the published one, a missing primary.
        let mut wrong = queues.clone();
        wrong[2][1].as_mut().unwrap().qpn += 1;
        let e = from_records(me, &all, &wrong, h).unwrap_err();
        assert!(
            e.starts_with("rank 1's backup QP toward rank 2 is 0x"),
            "{e}"
        );
        let mut none = queues.clone();
        none[0][0] = None;
        assert_eq!(
            from_records(me, &all, &none, h).unwrap_err(),
            "rank 1 has no primary queue toward rank 0"
        );
        // No backup: the entry says so.
        let mut lone = queues.clone();
        lone[0][1] = None;
        let t = from_records(me, &all, &lone, h).unwrap();
        assert_eq!(u32_at_of(&t, 2 * PATH_BYTES + 2 * SLOT_BYTES), 0);
        assert!(from_records(3, &all, &queues, h).is_err());
    }

    fn u32_at_of(t: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(t[o..o + 4].try_into().unwrap())
    }
}
