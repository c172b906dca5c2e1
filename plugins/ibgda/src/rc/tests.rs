use super::*;

/// Rank `rank` of `n` on one host's two ports: QP numbers made of (rank,
/// path, peer), windows at distinct addresses.
fn ends(rank: u32, n: usize, link: Link) -> Endpoints {
    let path = |p: usize| PathEnd {
        addr: PortAddr {
            link,
            lid: if link == Link::InfiniBand {
                10 + rank as u16 * 2 + p as u16
            } else {
                0
            },
            gid: [
                rank as u8 + 1,
                p as u8 + 1,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0xff,
                0xff,
                10,
                0,
                rank as u8,
                p as u8,
            ],
            gid_index: 3,
            port: 1 + p as u8,
            mtu: if p == 0 { 4096 } else { 1024 },
        },
        window: 0x7f00_0000_0000 + (rank as u64) * 0x1000_0000 + (p as u64) * 0x100_0000,
        window_bytes: 1 << 20,
        rkey: 0x1000 * (rank + 1) + p as u32,
        qpn: (0..n)
            .map(|q| {
                if q == rank as usize {
                    0
                } else {
                    0x100 * (rank + 1) + 0x10 * p as u32 + q as u32
                }
            })
            .collect(),
    };
    Endpoints {
        rank,
        paths: [path(0), path(1)],
    }
}

#[test]
fn records_round_trip_at_every_size() {
    for n in 1..=9 {
        for link in [Link::InfiniBand, Link::Ethernet] {
            for r in 0..n as u32 {
                let e = ends(r, n, link);
                let b = e.encode();
                assert_eq!(b.len(), Endpoints::encoded_len(n));
                assert_eq!(Endpoints::decode(&b, r, n).unwrap(), e);
            }
        }
    }
}

#[test]
fn malformed_and_misplaced_records_are_refused() {
    let e = ends(1, 3, Link::Ethernet);
    let b = e.encode();
    let mut bad = b.clone();
    bad[0] ^= 1;
    assert!(
        matches!(Endpoints::decode(&bad, 1, 3), Err(RcError::Format(w)) if w.contains("magic"))
    );
    let mut bad = b.clone();
    bad[4] = 2;
    assert!(
        matches!(Endpoints::decode(&bad, 1, 3), Err(RcError::Format(w)) if w.contains("version 2"))
    );
    for cut in [0, 3, 15, b.len() - 1] {
        assert!(Endpoints::decode(&b[..cut], 1, 3).is_err(), "cut at {cut}");
    }
    let mut long = b.clone();
    long.push(0);
    assert!(Endpoints::decode(&long, 1, 3).is_err());
    let e = Endpoints::decode(&b, 2, 3).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rank 1's RC endpoints: found in rank 2's slot of the all-gather"
    );
    let e = Endpoints::decode(&b, 1, 4).unwrap_err();
    assert!(
        e.to_string()
            .contains("written for 3 ranks, the communicator has 4"),
        "{e}"
    );
    let mut bad = b.clone();
    bad[HEADER] = 9;
    assert!(
        matches!(Endpoints::decode(&bad, 1, 3), Err(RcError::Format(w)) if w.contains("link kind 9"))
    );
}

#[test]
fn inconsistent_records_name_the_rank_and_path() {
    let check = |f: &dyn Fn(&mut Endpoints)| {
        let mut e = ends(1, 3, Link::InfiniBand);
        f(&mut e);
        let err = e.check().unwrap_err().to_string();
        // Through the wire too: decode checks.
        let back = Endpoints::decode(&e.encode(), e.rank, 3)
            .unwrap_err()
            .to_string();
        assert_eq!(err, back);
        err
    };
    assert!(check(&|e| e.paths[1].qpn[1] = 7).contains("backup path: a QP to itself (0x7)"));
    assert!(check(&|e| e.paths[0].qpn[2] = 0).contains("primary path: QP number 0x0 for rank 2"));
    assert!(check(&|e| e.paths[0].qpn[0] = 1 << 24).contains("QP number 0x1000000 for rank 0"));
    assert!(check(&|e| e.paths[0].addr.port = 0).contains("port 0"));
    assert!(check(&|e| e.paths[1].addr.mtu = 1500).contains("MTU 1500"));
    assert!(check(&|e| e.paths[0].window_bytes = 0).contains("a window of 0 bytes"));
    assert!(check(&|e| e.paths[0].window = u64::MAX).contains("a window of"));
    assert!(check(&|e| e.paths[1].addr.lid = 0).contains("backup path: InfiniBand without a LID"));
    assert!(check(&|e| e.rank = 3).contains("rank 3 of 3"));
    let mut e = ends(0, 3, Link::Ethernet);
    e.paths[1].qpn.pop();
    assert!(e
        .check()
        .unwrap_err()
        .to_string()
        .contains("backup path: 2 QP numbers, 3 ranks"));
    // RoCE needs no LID.
    assert_eq!(ends(0, 3, Link::Ethernet).check(), Ok(()));
}

/// Every pair, both paths: each end's destination is the other's QP for it
/// on the same path, so the primaries meet and the backups meet.
#[test]
fn every_pair_meets_on_each_path() {
    for link in [Link::InfiniBand, Link::Ethernet] {
        let n = 4;
        let all: Vec<Endpoints> = (0..n as u32).map(|r| ends(r, n, link)).collect();
        for a in 0..n {
            for b in (0..n).filter(|&b| b != a) {
                for p in 0..PATHS {
                    let ab = connect(&all[a], &all[b], p, 1_000_000_000).unwrap();
                    let ba = connect(&all[b], &all[a], p, 1_000_000_000).unwrap();
                    assert_eq!(ab.rtr.dest_qpn, all[b].paths[p].qpn[a]);
                    assert_eq!(ba.rtr.dest_qpn, all[a].paths[p].qpn[b]);
                    assert_eq!(ab.init.port, all[a].paths[p].addr.port);
                    assert_eq!(ab.init.access, REMOTE_ACCESS);
                    assert_eq!(
                        (ab.rtr.rq_psn, ba.rts.sq_psn),
                        (0, 0),
                        "fresh QPs agree on PSNs"
                    );
                    assert_eq!(ab.rtr.mtu, if p == 0 { Mtu::B4096 } else { Mtu::B1024 });
                    match link {
                        Link::InfiniBand => {
                            assert!(!ab.rtr.global);
                            assert_eq!(ab.rtr.dlid, all[b].paths[p].addr.lid);
                        }
                        Link::Ethernet => {
                            assert!(ab.rtr.global && ab.rtr.hop_limit > 0);
                            assert_eq!(ab.rtr.dgid, all[b].paths[p].addr.gid);
                            assert_eq!(ab.rtr.sgid_index, 3);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn ends_that_cannot_meet_are_refused() {
    let a = ends(0, 2, Link::InfiniBand);
    let mut b = ends(1, 2, Link::Ethernet);
    let e = connect(&a, &b, 1, 1_000_000_000).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the backup path between rank 0 and rank 1 cannot be connected: InfiniBand on rank 0, Ethernet on rank 1"
    );
    b = ends(1, 2, Link::InfiniBand);
    b.paths[0].addr.mtu = 512;
    assert_eq!(
        connect(&a, &b, 0, 1_000_000_000).unwrap().rtr.mtu,
        Mtu::B512,
        "the smaller MTU"
    );
    assert!(connect(&a, &a, 0, 1_000_000_000)
        .unwrap_err()
        .to_string()
        .contains("not connected to itself"));
    assert!(connect(&a, &b, 2, 1_000_000_000).is_err());
    assert!(connect(&a, &ends(1, 3, Link::InfiniBand), 0, 1_000_000_000).is_err());
    assert!(matches!(
        connect(&a, &b, 0, 10_000),
        Err(RcError::Timeout(_))
    ));
}

/// The ACK timeout's retry budget fits the health timeout, as large as it can.
#[test]
fn ack_timeouts_fit_the_health_timeout() {
    let budget = |t: u32| 8 * 4096 * (1u64 << t);
    for t in 1..=31u32 {
        assert_eq!(ack_timeout(budget(t)).unwrap(), t as u8);
        assert_eq!(ack_timeout(budget(t) + 1).unwrap(), t as u8);
        if t > 1 {
            assert_eq!(
                ack_timeout(budget(t) - 1).unwrap(),
                t as u8 - 1,
                "just below 2^{t}"
            );
        }
    }
    // The plugin's default (FERROCX_IBGDA_TIMEOUT = 1 s): 8 tries of 4.096 µs × 2^14 (537 ms).
    assert_eq!(ack_timeout(1_000_000_000).unwrap(), 14);
    // 100 ms: 2^11 (67 ms); 20 ms (the tests' timeout): 2^9 (16.8 ms).
    assert_eq!(ack_timeout(100_000_000).unwrap(), 11);
    assert_eq!(ack_timeout(20_000_000).unwrap(), 9);
    assert_eq!(ack_timeout(u64::MAX).unwrap(), 31);
    let e = ack_timeout(budget(1) - 1).unwrap_err().to_string();
    assert!(e.contains("below what an RC QP can keep"), "{e}");
}
