use super::*;
use ferrocx_ibgda::mlx5_peer::{self, Mlx5Path, Mlx5Peer};

/// What mlx5dv gives for a QP of 128 send WRs: 512 basic blocks of 64
/// bytes (libmlx5 sizes an RC WQE for every send operation, memory-window
/// binds included: 4 blocks), a CQ asked for 4 × 128 entries (1024: libmlx5
/// rounds n + 1 up to a power of two) of 64-byte CQEs, BlueFlame of 256 bytes.
fn raw() -> Raw {
    Raw {
        qpn: 0x1a2b,
        sq_buf: 0x7f00_0001_0000,
        sq_wqe_cnt: 512,
        sq_stride: 64,
        dbrec: 0x7f00_0000_0040,
        bf_reg: 0x7f10_0000_0800,
        bf_size: 256,
        cq_buf: 0x7f00_0004_0000,
        cqe_cnt: 1024,
        cqe_size: 64,
        cq_dbrec: 0x7f00_0000_0080,
    }
}

#[test]
fn queues_as_returned_become_the_table_s_local_queues() {
    let h = raw().check().unwrap();
    assert_eq!((h.slots, h.cq_log, h.qpn), (512, 10, 0x1a2b));
    assert_eq!(
        h.host_ranges(),
        [
            (0x7f00_0001_0000, 512 * 64),
            (0x7f00_0000_0040, 8),
            (0x7f00_0004_0000, 1024 * 64),
            (0x7f00_0000_0080, 8)
        ]
    );
    assert_eq!(h.io_range(), (0x7f10_0000_0800, 8));
    // Host pages mapped 1:1 at another base; the UAR page elsewhere.
    let dev = |a: u64| Some(a - 0x7f00_0000_0000 + 0x2_0000_0000);
    let io = |a: u64| (a & !0xfff == 0x7f10_0000_0000).then(|| 0x3_0000_0000 + (a & 0xfff));
    let l = h.local(0x55, dev, io).unwrap();
    assert_eq!(
        l,
        LocalQueues {
            sq: 0x2_0001_0000,
            slots: 512,
            qpn: 0x1a2b,
            // The send counter: the record's second word.
            dbrec: 0x2_0000_0044,
            uar: 0x3_0000_0800,
            cq: 0x2_0004_0000,
            cq_log: 10,
            cq_dbrec: 0x2_0000_0080,
            lkey: 0x55,
        }
    );
    // The table accepts it.
    let p = Mlx5Peer {
        paths: [
            Mlx5Path {
                local: l,
                raddr: 0x1000,
                rkey: 7,
            },
            Mlx5Path::default(),
        ],
        has_backup: false,
        recovery_ns: 3,
        max_recovery_ns: 24,
        timeout_ns: 1,
    };
    assert!(mlx5_peer::table(1, &[Some(p), None]).is_ok());
    // An unmapped address is named.
    let e = h.local(1, |_| None, io).unwrap_err();
    assert!(
        e.contains("the send queue at 0x7f0000010000 is not mapped"),
        "{e}"
    );
    let e = h.local(1, dev, |_| None).unwrap_err();
    assert!(e.contains("doorbell register at 0x7f1000000800"), "{e}");
}

#[test]
fn buffers_the_device_header_cannot_drive_are_refused_with_the_value() {
    let bad = |f: &dyn Fn(&mut Raw)| {
        let mut r = raw();
        f(&mut r);
        r.check().unwrap_err()
    };
    assert_eq!(bad(&|r| r.sq_wqe_cnt = 96), QueueError::SqSlots(96));
    assert_eq!(bad(&|r| r.sq_wqe_cnt = 0), QueueError::SqSlots(0));
    assert_eq!(bad(&|r| r.sq_stride = 128), QueueError::Stride(128));
    assert_eq!(bad(&|r| r.bf_size = 100), QueueError::BfSize(100));
    assert_eq!(bad(&|r| r.bf_size = 4096), QueueError::BfSize(4096));
    assert_eq!(bad(&|r| r.cqe_size = 128), QueueError::CqeSize(128));
    assert_eq!(
        bad(&|r| r.cqe_cnt = 64),
        QueueError::CqEntries {
            cqes: 64,
            slots: 512
        }
    );
    assert_eq!(
        bad(&|r| r.cqe_cnt = 300),
        QueueError::CqEntries {
            cqes: 300,
            slots: 512
        }
    );
    assert_eq!(bad(&|r| r.sq_buf = 0), QueueError::Address("send queue", 0));
    assert_eq!(
        bad(&|r| r.sq_buf += 32),
        QueueError::Address("send queue", 0x7f00_0001_0020)
    );
    assert_eq!(
        bad(&|r| r.bf_reg = 0),
        QueueError::Address("BlueFlame register", 0)
    );
    assert_eq!(
        bad(&|r| r.cq_dbrec += 4),
        QueueError::Address("CQ doorbell record", 0x7f00_0000_0084)
    );
    assert!(bad(&|r| r.cqe_size = 128)
        .to_string()
        .contains("MLX5_CQE_SIZE"));
    // No BlueFlame (doorbell only) is fine.
    let mut r = raw();
    r.bf_size = 0;
    assert!(r.check().is_ok());
}

fn record(rank: u32, link: rc::Link) -> rc::Endpoints {
    rc::Endpoints {
        rank,
        paths: [0, 1].map(|p| rc::PathEnd {
            addr: rc::PortAddr {
                link,
                lid: 0x10 + rank as u16,
                gid: [rank as u8 + 1; 16],
                gid_index: 3,
                port: 1 + p as u8,
                mtu: if rank == 0 { 4096 } else { 1024 },
            },
            window: 0x1000,
            window_bytes: 64,
            rkey: 9,
            qpn: (0..2)
                .map(|q| {
                    if q == rank {
                        0
                    } else {
                        0x100 + rank * 2 + p as u32
                    }
                })
                .collect(),
        }),
    }
}

/// `rc::connect`'s attributes land in the verbs fields the masks name.
#[test]
fn the_transitions_carry_rc_s_attributes_under_their_masks() {
    for link in [rc::Link::Ethernet, rc::Link::InfiniBand] {
        let c = rc::connect(&record(0, link), &record(1, link), 1, 1_000_000_000).unwrap();
        let [(i, im, a), (r, rm, b), (s, sm, d)] = transitions(&c);
        assert_eq!((a, b, d), ("INIT", "RTR", "RTS"));
        assert_eq!(
            (i.qp_state, i.port_num, i.pkey_index, i.qp_access_flags),
            (1, 2, 0, rc::REMOTE_ACCESS)
        );
        assert_eq!(im, 1 | 8 | 16 | 32);
        assert_eq!(r.qp_state, 2);
        assert_eq!(r.path_mtu, 3, "the smaller MTU, 1024");
        assert_eq!(
            r.dest_qp_num,
            0x100 + 2 + 1,
            "rank 1's backup QP for rank 0"
        );
        assert_eq!(
            (r.rq_psn, r.max_dest_rd_atomic, r.min_rnr_timer),
            (0, rc::RD_ATOMIC, 12)
        );
        assert_eq!(r.ah_attr.port_num, 2);
        if link == rc::Link::Ethernet {
            assert_eq!((r.ah_attr.is_global, r.ah_attr.dlid), (1, 0));
            assert_eq!(r.ah_attr.grh.dgid, [2; 16]);
            assert_eq!(
                (r.ah_attr.grh.sgid_index, r.ah_attr.grh.hop_limit),
                (3, 255)
            );
        } else {
            assert_eq!((r.ah_attr.is_global, r.ah_attr.dlid), (0, 0x11));
        }
        assert_eq!(
            rm,
            1 | 128 | 256 | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15)
        );
        assert_eq!(s.qp_state, 3);
        assert_eq!(
            (s.timeout, s.retry_cnt, s.rnr_retry, s.sq_psn),
            (14, 7, 7, 0)
        );
        assert_eq!(s.max_rd_atomic, rc::RD_ATOMIC);
        assert_eq!(sm, 1 | 512 | 1024 | 2048 | (1 << 16) | (1 << 13));
    }
}

#[test]
fn port_attributes_become_the_record_s_address() {
    // SAFETY: plain integers.
    let mut a: IbvPortAttr = unsafe { std::mem::zeroed() };
    a.state = verbs::PORT_ACTIVE;
    a.active_mtu = 5;
    a.lid = 0x21;
    a.link_layer = verbs::LINK_LAYER_INFINIBAND;
    let p = port_addr(1, &a, None).unwrap();
    assert_eq!(
        (p.link, p.lid, p.mtu, p.gid_index, p.port),
        (Link::InfiniBand, 0x21, 4096, 0, 1)
    );
    a.link_layer = verbs::LINK_LAYER_ETHERNET;
    a.active_mtu = 3;
    let p = port_addr(2, &a, Some((3, [7; 16]))).unwrap();
    assert_eq!(
        (p.link, p.mtu, p.gid_index, p.gid),
        (Link::Ethernet, 1024, 3, [7; 16])
    );
    assert!(port_addr(2, &a, None)
        .unwrap_err()
        .contains("RoCE without a GID"));
    a.state = 1;
    assert!(port_addr(2, &a, None)
        .unwrap_err()
        .contains("port 2 is not active"));
    a.state = verbs::PORT_ACTIVE;
    a.active_mtu = 9;
    assert!(port_addr(2, &a, Some((0, [1; 16])))
        .unwrap_err()
        .contains("MTU enum 9"));
}

/// The CQ is asked for enough entries for the send queue libmlx5 makes of
/// `slots` WRs (up to 4 basic blocks a WR), which `Raw::check` demands.
#[test]
fn the_cq_covers_the_send_queue_libmlx5_makes() {
    for slots in [1u32, 16, 128, 256, 4096] {
        let blocks = 4 * slots.next_power_of_two();
        // libmlx5: a CQ of n entries has the power of two above n.
        let cqes = (cq_entries(slots) as u32 + 1).next_power_of_two();
        assert!(
            cqes >= blocks,
            "{slots} WRs: {cqes} CQEs for {blocks} blocks"
        );
    }
}
