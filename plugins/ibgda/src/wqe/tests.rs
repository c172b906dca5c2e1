use super::*;
use crate::rng::Rng;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

fn signaled() -> WqeFlags {
    WqeFlags {
        signaled: true,
        ..WqeFlags::default()
    }
}

/// A WRITE encoded by hand from the PRM layout, byte by byte, independently of
/// the constants: the check that fields sit where the NIC reads them, big-endian.
#[test]
fn a_write_matches_the_layout_byte_for_byte() {
    let wr = WorkRequest::Write {
        local: Local {
            addr: 0x0102_0304_0506_0708,
            lkey: 0x1122_3344,
            len: 0x0000_1000,
        },
        remote: Remote {
            addr: 0xA1A2_A3A4_A5A6_A7A8,
            rkey: 0x5566_7788,
        },
    };
    let mut out = [0xEEu8; BB_BYTES];
    let ds = encode(&wr, 0x00AB_CDEF, 0x1234, signaled(), &mut out).unwrap();
    assert_eq!(ds, 3);
    #[rustfmt::skip]
    let expect: [u8; 64] = [
        // ctrl: opmod 0, wqe index 0x1234, opcode 0x08 | qpn 0xabcdef, ds 3
        0x00, 0x12, 0x34, 0x08,  0xAB, 0xCD, 0xEF, 0x03,
        // signature, dci stream (2), fm_ce_se = CQ update | imm
        0x00, 0x00, 0x00, 0x08,  0x00, 0x00, 0x00, 0x00,
        // raddr: address | rkey | reserved
        0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8,
        0x55, 0x66, 0x77, 0x88,  0x00, 0x00, 0x00, 0x00,
        // data: byte count | lkey | address
        0x00, 0x00, 0x10, 0x00,  0x11, 0x22, 0x33, 0x44,
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
        // unused tail of the basic block: zeroed
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(out, expect);
}

#[test]
fn random_work_requests_put_every_field_at_its_offset() {
    let mut rng = Rng::new(3);
    for i in 0..2000 {
        let local = Local {
            addr: rng.next_u64(),
            lkey: rng.next_u64() as u32,
            len: (rng.next_u64() as u32) & MAX_BYTE_COUNT,
        };
        let remote = Remote {
            addr: rng.next_u64() & !7,
            rkey: rng.next_u64() as u32,
        };
        let imm = rng.next_u64() as u32;
        let add = rng.next_u64();
        let result = Local { len: 8, ..local };
        let wr = match i % 3 {
            0 => WorkRequest::Write { local, remote },
            1 => WorkRequest::WriteImm { local, remote, imm },
            _ => WorkRequest::FetchAdd {
                remote,
                add,
                result,
            },
        };
        let qpn = (rng.next_u64() as u32) & MAX_QPN;
        let idx = rng.next_u64() as u16;
        let flags = WqeFlags {
            signaled: rng.chance(1, 2),
            solicited: rng.chance(1, 2),
            fence: rng.chance(1, 2),
        };
        let mut out = [0xFFu8; BB_BYTES];
        let ds = encode(&wr, qpn, idx, flags, &mut out).unwrap();
        let w0 = be32(&out, CTRL_OPMOD_IDX_OPCODE);
        assert_eq!(w0 >> 24, 0, "opmod");
        assert_eq!((w0 >> 8) & 0xFFFF, u32::from(idx));
        assert_eq!(w0 & 0xFF, u32::from(wr.opcode() as u8));
        let w1 = be32(&out, CTRL_QPN_DS);
        assert_eq!(w1 >> 8, qpn);
        assert_eq!(w1 & 0x3F, u32::from(ds));
        assert_eq!(out[CTRL_SIGNATURE], 0);
        assert_eq!(&out[CTRL_DCI_STREAM..CTRL_DCI_STREAM + 2], &[0, 0]);
        let fm = out[CTRL_FM_CE_SE];
        assert_eq!(fm & FLAG_CQ_UPDATE != 0, flags.signaled);
        assert_eq!(fm & FLAG_SOLICITED != 0, flags.solicited);
        assert_eq!(fm & FLAG_FENCE != 0, flags.fence);
        assert_eq!(fm & !(FLAG_CQ_UPDATE | FLAG_SOLICITED | FLAG_FENCE), 0);
        let expect_imm = if let WorkRequest::WriteImm { imm, .. } = wr {
            imm
        } else {
            0
        };
        assert_eq!(be32(&out, CTRL_IMM), expect_imm);
        assert_eq!(be64(&out, SEG_BYTES + RADDR_ADDR), remote.addr);
        assert_eq!(be32(&out, SEG_BYTES + RADDR_RKEY), remote.rkey);
        assert_eq!(be32(&out, SEG_BYTES + 12), 0, "raddr reserved");
        let (data, expect_local) = match wr {
            WorkRequest::FetchAdd { .. } => {
                assert_eq!(be64(&out, 2 * SEG_BYTES + ATOMIC_SWAP_ADD), add);
                assert_eq!(be64(&out, 2 * SEG_BYTES + ATOMIC_COMPARE), 0);
                (3 * SEG_BYTES, result)
            }
            _ => (2 * SEG_BYTES, local),
        };
        assert_eq!(be32(&out, data + DATA_BYTE_COUNT), expect_local.len);
        assert_eq!(be32(&out, data + DATA_LKEY), expect_local.lkey);
        assert_eq!(be64(&out, data + DATA_ADDR), expect_local.addr);
        // Sizes: ds segments of 16 bytes fill at most one 64-byte block, and
        // what lies past them is zero.
        let used = usize::from(ds) * SEG_BYTES;
        assert_eq!(used, data + SEG_BYTES);
        assert!(used <= BB_BYTES && used.is_multiple_of(SEG_BYTES));
        assert!(out[used..].iter().all(|&b| b == 0));
    }
}

#[test]
fn opcodes_and_flags_have_the_prm_values() {
    // Written as the PRM tables give them, not derived from the constants.
    assert_eq!(Opcode::RdmaWrite as u8, 0b0000_1000);
    assert_eq!(Opcode::RdmaWriteImm as u8, 0b0000_1001);
    assert_eq!(Opcode::AtomicFetchAdd as u8, 0b0001_0010);
    assert_eq!(FLAG_CQ_UPDATE, 0b0000_1000, "CE = 2 in bits 3..2");
    assert_eq!(FLAG_SOLICITED, 0b0000_0010);
    assert_eq!(FLAG_FENCE, 0b1000_0000, "fence mode 4 in bits 7..5");
    assert_eq!(FLAG_SMALL_FENCE, 0b0010_0000);
    assert_eq!((SEG_BYTES, BB_BYTES), (16, 64));
    assert_eq!(WqeFlags::default().fm_ce_se(), 0, "unsignaled by default");
}

#[test]
fn invalid_requests_are_refused_with_the_reason() {
    let local = Local {
        addr: 0,
        lkey: 1,
        len: 8,
    };
    let remote = Remote { addr: 64, rkey: 2 };
    let mut out = [0u8; BB_BYTES];
    let w = WorkRequest::Write { local, remote };
    assert_eq!(
        encode(&w, MAX_QPN + 1, 0, signaled(), &mut out),
        Err(WqeError::QpnTooLarge(MAX_QPN + 1))
    );
    let long = WorkRequest::WriteImm {
        local: Local {
            len: 1 << 31,
            ..local
        },
        remote,
        imm: 0,
    };
    assert_eq!(
        encode(&long, 1, 0, signaled(), &mut out),
        Err(WqeError::TooLong(1 << 31))
    );
    let unaligned = WorkRequest::FetchAdd {
        remote: Remote { addr: 68, rkey: 2 },
        add: 1,
        result: local,
    };
    let e = encode(&unaligned, 1, 0, signaled(), &mut out).unwrap_err();
    assert_eq!(e, WqeError::UnalignedAtomic(68));
    assert!(e.to_string().contains("0x44"), "{e}");
    let short = WorkRequest::FetchAdd {
        remote,
        add: 1,
        result: Local { len: 4, ..local },
    };
    assert_eq!(
        encode(&short, 1, 0, signaled(), &mut out),
        Err(WqeError::AtomicResultNot8Bytes(4))
    );
}

#[test]
fn the_wqe_index_wraps_at_16_bits_while_slots_wrap_at_the_queue_size() {
    let slots = 8u32;
    let mut sq = SendQueue::new(0x42, slots).unwrap();
    let wr = |i: u64| WorkRequest::Write {
        local: Local {
            addr: i,
            lkey: 7,
            len: 64,
        },
        remote: Remote {
            addr: i * 64,
            rkey: 9,
        },
    };
    // Past the 16-bit wrap, one WQE at a time, completing each.
    let total = (1u64 << 16) + 5;
    for i in 0..total {
        let p = sq.post(&wr(i), signaled()).unwrap();
        assert_eq!(u64::from(p.wqe_index), i % (1 << 16));
        assert_eq!(u64::from(p.slot), i % u64::from(slots));
        assert_eq!(p.offset, usize::from(p.slot) * BB_BYTES);
        let block = &sq.bytes()[p.offset..p.offset + BB_BYTES];
        assert_eq!((be32(block, 0) >> 8) & 0xFFFF, u32::from(p.wqe_index));
        assert_eq!(be64(block, 2 * SEG_BYTES + DATA_ADDR), i);
        let db = sq.doorbell(&p);
        assert_eq!(&db[..], &block[..8]);
        let next = ((i + 1) % (1 << 16)) as u32;
        assert_eq!(sq.doorbell_record(), next.to_be_bytes());
        sq.retire(p.wqe_index).unwrap();
    }
    assert_eq!(sq.outstanding(), 0);
    assert_eq!(u64::from(sq.producer_index()), total % (1 << 16));
}

#[test]
fn a_full_queue_refuses_until_completions_retire_blocks() {
    let mut sq = SendQueue::new(1, 4).unwrap();
    let wr = WorkRequest::FetchAdd {
        remote: Remote { addr: 8, rkey: 1 },
        add: 1,
        result: Local {
            addr: 0,
            lkey: 1,
            len: 8,
        },
    };
    let posted: Vec<Posted> = (0..4)
        .map(|_| sq.post(&wr, WqeFlags::default()).unwrap())
        .collect();
    assert!(posted.iter().all(|p| p.ds == 4));
    let e = sq.post(&wr, signaled()).unwrap_err();
    assert_eq!(e, WqeError::QueueFull { slots: 4 });
    // A CQE for WQE 2 completes 0, 1 and 2 (cumulative).
    sq.retire(2).unwrap();
    assert_eq!(sq.outstanding(), 1);
    assert_eq!(
        sq.retire(2),
        Err(WqeError::RetireOutsideWindow {
            index: 2,
            oldest: 3,
            outstanding: 1
        })
    );
    // WQE 4 is the next to be posted, not an outstanding one.
    assert_eq!(
        sq.retire(4),
        Err(WqeError::RetireOutsideWindow {
            index: 4,
            oldest: 3,
            outstanding: 1
        })
    );
    for _ in 0..3 {
        sq.post(&wr, signaled()).unwrap();
    }
    assert!(sq.post(&wr, signaled()).is_err());
    assert_eq!(SendQueue::new(1, 6).unwrap_err(), WqeError::BadQueueSize(6));
    assert_eq!(
        SendQueue::new(1, 1 << 16).unwrap_err(),
        WqeError::BadQueueSize(1 << 16)
    );
    assert!(SendQueue::new(1, 1 << 15).is_ok());
}
