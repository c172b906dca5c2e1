use super::*;
use crate::rng::Rng;

/// Every syndrome byte survives the round trip, and the named ones keep
/// their names (an unknown one is `Other`).
#[test]
fn syndromes_round_trip_and_blame_the_request_or_the_path() {
    for v in 0..=255u8 {
        let s = Syndrome::from_u8(v);
        assert_eq!(s.to_u8(), v);
        assert_eq!(
            matches!(s, Syndrome::Other(_)),
            !matches!(v, 0x01 | 0x02 | 0x04 | 0x05 | 0x06 | 0x10..=0x16 | 0x22)
        );
    }
    assert_eq!(Syndrome::TransportRetryExceeded.blame(), Blame::Path);
    assert_eq!(Syndrome::RnrRetryExceeded.blame(), Blame::Path);
    assert_eq!(Syndrome::WorkRequestFlushed.blame(), Blame::Path);
    assert_eq!(
        Syndrome::Other(0x77).blame(),
        Blame::Path,
        "unknown: the path's"
    );
    assert_eq!(Syndrome::RemoteAccess.blame(), Blame::Request);
    assert_eq!(Syndrome::LocalProtection.blame(), Blame::Request);
    assert_eq!(Syndrome::LocalLength.blame(), Blame::Request);
    assert_eq!(
        Syndrome::TransportRetryExceeded.to_string(),
        "transport retry counter exceeded"
    );
    assert_eq!(Syndrome::Other(0x77).to_string(), "syndrome 0x77");
}

/// The fields sit where mlx5dv.h puts them: WQE counter big-endian at 60,
/// op_own last, an error's syndrome at 55 and the vendor's at 54, the byte
/// count big-endian at 44.
#[test]
fn entries_have_the_documented_layout() {
    let e = written(
        &Cqe::Failed {
            wqe_counter: 0x1234,
            syndrome: Syndrome::TransportRetryExceeded,
            vendor: 0x81,
            responder: false,
        },
        1,
    );
    assert_eq!(&e[60..62], &[0x12, 0x34]);
    assert_eq!(e[55], 0x15);
    assert_eq!(e[54], 0x81);
    assert_eq!(e[63], 0xd1, "REQ_ERR in the high nibble, owner 1");
    let d = written(
        &Cqe::Done {
            wqe_counter: 7,
            opcode: OPCODE_REQ,
            byte_cnt: 0x0a0b_0c0d,
        },
        0,
    );
    assert_eq!(&d[44..48], &[0x0a, 0x0b, 0x0c, 0x0d]);
    assert_eq!(&d[60..62], &[0, 7]);
    assert_eq!(d[63], 0x00);
    assert_eq!(written(&Cqe::Empty, 0)[63], 0xf0, "how a CQ starts");
    // A fresh CQ reads empty in lap 0 only because of the opcode.
    let fresh = CompletionRing::new(4).unwrap().initial_buffer();
    assert!(fresh.chunks(CQE_BYTES).all(|e| e[63] == 0xf0));
    assert_eq!(poll(fresh[..64].try_into().unwrap(), 0, 2), Cqe::Empty);
    // Opcodes a send CQ never carries: the path's failure, not a completion.
    for opcode in [0x1u8, 0x2, 0x5, 0xc] {
        let e = written(
            &Cqe::Unexpected {
                wqe_counter: 9,
                opcode,
            },
            0,
        );
        assert_eq!(
            poll(&e, 0, 2),
            Cqe::Unexpected {
                wqe_counter: 9,
                opcode
            }
        );
    }
}

/// A fresh CQ shows nothing; entries written in lap 0 are taken once each
/// in order; after a lap the owner bit flips, so last lap's entries read as
/// empty until the NIC writes them again, across many laps and the 2^24
/// wrap of the consumer index; the doorbell record follows.
#[test]
fn the_owner_bit_tells_each_laps_entries_apart() {
    let mut rng = Rng::new(0xc0e_5eed);
    for entries in [2u32, 8, 64] {
        let mut ring = CompletionRing::new(entries).unwrap();
        let mut buf = ring.initial_buffer();
        assert_eq!(ring.next(&buf), Cqe::Empty);
        let mut produced: u32 = 0; // entries the NIC wrote
        for _ in 0..(entries * 9) {
            // The NIC writes a few entries (never more than it has room for).
            let room = entries - (produced - ring.consumer_index());
            let k = (rng.below(u64::from(room) + 1)) as u32;
            let mut want = Vec::new();
            for _ in 0..k {
                let c = if rng.below(9) == 0 {
                    Cqe::Unexpected {
                        wqe_counter: rng.below(1 << 16) as u16,
                        opcode: [0x1u8, 0x2, 0x5, 0xc][rng.below(4) as usize],
                    }
                } else if rng.below(5) == 0 {
                    Cqe::Failed {
                        wqe_counter: rng.below(1 << 16) as u16,
                        syndrome: Syndrome::from_u8(rng.below(256) as u8),
                        vendor: rng.below(256) as u8,
                        responder: rng.below(2) == 1,
                    }
                } else {
                    Cqe::Done {
                        wqe_counter: rng.below(1 << 16) as u16,
                        opcode: OPCODE_REQ,
                        byte_cnt: rng.below(1 << 32) as u32,
                    }
                };
                let slot = (produced & (entries - 1)) as usize * CQE_BYTES;
                let lap = ((produced / entries) & 1) as u8;
                buf[slot..slot + CQE_BYTES].copy_from_slice(&written(&c, lap));
                produced += 1;
                want.push(c);
            }
            for c in want {
                assert_eq!(
                    ring.next(&buf),
                    c,
                    "{entries} entries, ci {}",
                    ring.consumer_index()
                );
            }
            assert_eq!(ring.next(&buf), Cqe::Empty, "nothing more this round");
            assert_eq!(
                ring.doorbell_record(),
                (ring.consumer_index() & 0xff_ffff).to_be_bytes()
            );
        }
        assert!(produced > 2 * entries, "several laps");
    }
    // Near the 24-bit wrap of the consumer index the parity still matches.
    let mut ring = CompletionRing::new(4).unwrap();
    ring.ci = 0x00ff_fffe;
    let mut buf = ring.initial_buffer();
    let lap = |ci: u32| ((ci >> 2) & 1) as u8;
    for ci in [0x00ff_fffeu32, 0x00ff_ffff, 0] {
        let slot = (ci & 3) as usize * CQE_BYTES;
        let c = Cqe::Done {
            wqe_counter: ci as u16,
            opcode: OPCODE_REQ,
            byte_cnt: 0,
        };
        buf[slot..slot + CQE_BYTES].copy_from_slice(&written(&c, lap(ci)));
        assert_eq!(ring.next(&buf), c);
    }
    assert_eq!(ring.consumer_index(), 1);
    assert_eq!(ring.doorbell_record(), [0, 0, 0, 1]);
}

#[test]
fn cq_sizes_are_checked() {
    assert_eq!(CompletionRing::new(3), Err(BadCqSize(3)));
    assert_eq!(CompletionRing::new(1), Err(BadCqSize(1)));
    assert_eq!(CompletionRing::new(1 << 23), Err(BadCqSize(1 << 23)));
    assert_eq!(CompletionRing::new(1 << 22).unwrap().entries(), 1 << 22);
}
