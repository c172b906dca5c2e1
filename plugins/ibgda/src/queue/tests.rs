use super::completion::*;
use super::record::*;
use super::*;
use crate::health::{Path, PeerId};
use crate::rng::Rng;
use std::cell::RefCell;
use std::collections::VecDeque;

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn random_record(r: &mut Rng) -> WorkRecord {
    let window = r.next_u64() as u32;
    match r.below(4) {
        0 => WorkRecord::Put {
            window,
            dst: r.next_u64(),
            src: r.next_u64(),
            bytes: r.next_u64() as u32,
        },
        1 => WorkRecord::PutSignal {
            window,
            dst: r.next_u64(),
            src: r.next_u64(),
            bytes: r.next_u64() as u32,
            signal: r.next_u64() & !7,
            value: r.next_u64(),
            op: if r.chance(1, 2) {
                SignalOp::Set
            } else {
                SignalOp::Add
            },
        },
        2 => WorkRecord::FetchAdd {
            window,
            dst: r.next_u64() & !7,
            add: r.next_u64(),
        },
        _ => WorkRecord::Quiet,
    }
}

#[test]
fn every_field_sits_little_endian_at_its_named_offset() {
    assert_eq!(RECORD_BYTES % 16, 0);
    assert_eq!(CQE_BYTES % 16, 0);
    let mut r = Rng::new(11);
    for _ in 0..2000 {
        let rec = random_record(&mut r);
        let b = rec.encode();
        assert_eq!(le64(&b, REC_STAMP), 0, "the ring writes the stamp");
        // Reserved bytes stay zero (a later version may give them meaning).
        assert!(b[10..12]
            .iter()
            .chain(&b[36..40])
            .chain(&b[56..64])
            .all(|&x| x == 0));
        match rec {
            WorkRecord::Put {
                window,
                dst,
                src,
                bytes,
            } => {
                assert_eq!(b[REC_KIND], KIND_PUT);
                assert_eq!((le32(&b, REC_WINDOW), le64(&b, REC_DST)), (window, dst));
                assert_eq!((le64(&b, REC_SRC), le32(&b, REC_BYTES)), (src, bytes));
            }
            WorkRecord::PutSignal {
                window,
                dst,
                src,
                bytes,
                signal,
                value,
                op,
            } => {
                assert_eq!(b[REC_KIND], KIND_PUT_SIGNAL);
                let o = if op == SignalOp::Set {
                    SIGNAL_SET
                } else {
                    SIGNAL_ADD
                };
                assert_eq!(b[REC_SIGNAL_OP], o);
                assert_eq!((le32(&b, REC_WINDOW), le64(&b, REC_DST)), (window, dst));
                assert_eq!((le64(&b, REC_SRC), le32(&b, REC_BYTES)), (src, bytes));
                assert_eq!((le64(&b, REC_SIGNAL), le64(&b, REC_VALUE)), (signal, value));
            }
            WorkRecord::FetchAdd { window, dst, add } => {
                assert_eq!(b[REC_KIND], KIND_FETCH_ADD);
                assert_eq!((le32(&b, REC_WINDOW), le64(&b, REC_DST)), (window, dst));
                assert_eq!(le64(&b, REC_VALUE), add);
            }
            WorkRecord::Quiet => {
                assert_eq!(b[REC_KIND], KIND_QUIET);
                assert!(b.iter().enumerate().all(|(i, &x)| i == REC_KIND || x == 0));
            }
        }
        assert_eq!(WorkRecord::decode(&b), Ok(rec));
    }
    // Hand-written bytes of one put with signal.
    let rec = WorkRecord::PutSignal {
        window: 0x0102_0304,
        dst: 0x10,
        src: 0x20,
        bytes: 0x30,
        signal: 0x48,
        value: 0x0a0b,
        op: SignalOp::Add,
    };
    let mut want = [0u8; RECORD_BYTES];
    want[8] = 2;
    want[9] = 1;
    want[12..16].copy_from_slice(&[4, 3, 2, 1]);
    want[16] = 0x10;
    want[24] = 0x20;
    want[32] = 0x30;
    want[40] = 0x48;
    want[48..50].copy_from_slice(&[0x0b, 0x0a]);
    assert_eq!(rec.encode(), want);
    // And a completion.
    let e = CqEntry {
        req_id: 0x0102,
        status: CqStatus::PeerUnreachable,
        peer: PeerId(7),
        paths: PathSet::BOTH,
        value: 0x0304,
    };
    let b = e.encode();
    assert_eq!(
        (
            le64(&b, CQE_STAMP),
            le64(&b, CQE_REQ_ID),
            le64(&b, CQE_VALUE)
        ),
        (0, 0x0102, 0x0304)
    );
    assert_eq!((le32(&b, CQE_PEER), b[CQE_STATUS], b[CQE_PATHS]), (7, 1, 3));
    assert!(b[30..].iter().all(|&x| x == 0));
    assert_eq!(CqEntry::decode(&b), Ok(e));
    assert!(
        PathSet::BOTH.contains(Path::Backup) && !PathSet::of(Path::Primary).contains(Path::Backup)
    );
}

#[test]
fn malformed_entries_decode_to_the_reason() {
    let mut b = WorkRecord::Quiet.encode();
    for k in [0, 5, 0xff] {
        b[REC_KIND] = k;
        assert_eq!(WorkRecord::decode(&b), Err(DecodeError::UnknownKind(k)));
    }
    let ps = WorkRecord::PutSignal {
        window: 0,
        dst: 0,
        src: 0,
        bytes: 8,
        signal: 8,
        value: 1,
        op: SignalOp::Set,
    };
    let mut b = ps.encode();
    b[REC_SIGNAL_OP] = 2;
    assert_eq!(WorkRecord::decode(&b), Err(DecodeError::UnknownSignalOp(2)));
    let mut b = ps.encode();
    b[REC_SIGNAL] = 12;
    assert_eq!(
        WorkRecord::decode(&b),
        Err(DecodeError::Misaligned {
            field: "signal",
            offset: 12
        })
    );
    let b = WorkRecord::FetchAdd {
        window: 0,
        dst: 4,
        add: 1,
    }
    .encode();
    assert_eq!(
        WorkRecord::decode(&b),
        Err(DecodeError::Misaligned {
            field: "fetch-add target",
            offset: 4
        })
    );
    let e = CqEntry {
        req_id: 0,
        status: CqStatus::Ok,
        peer: PeerId(0),
        paths: PathSet::NONE,
        value: 0,
    };
    let mut b = e.encode();
    b[CQE_STATUS] = 4;
    assert_eq!(CqEntry::decode(&b), Err(DecodeError::UnknownStatus(4)));
    let mut b = e.encode();
    b[CQE_PATHS] = 4;
    assert_eq!(CqEntry::decode(&b), Err(DecodeError::UnknownPaths(4)));
}

fn ring_mem(q: &RequestQueue) -> Vec<u8> {
    let mut m = vec![0xee; q.ring().bytes()];
    q.ring().init(&mut m).expect("right size");
    m
}

#[test]
fn a_full_queue_refuses_the_producer_until_the_consumer_takes_one() {
    let q = RequestQueue::new(4).expect("valid");
    let mut m = ring_mem(&q);
    let put = |i| WorkRecord::Put {
        window: 0,
        dst: i,
        src: 0,
        bytes: 1,
    };
    for i in 0..4 {
        assert_eq!(q.push(&mut m, &put(i)), Ok(i));
    }
    let full = QueueError::Full {
        slots: 4,
        producer: 4,
        consumer: 0,
    };
    assert_eq!(q.push(&mut m, &put(4)), Err(full));
    assert_eq!(
        q.push(&mut m, &put(4)),
        Err(full),
        "refusing changes nothing"
    );
    assert_eq!(q.pop(&mut m), Ok(Some((0, Ok(put(0))))));
    assert_eq!(q.push(&mut m, &put(4)), Ok(4));
    assert_eq!(q.ring().indices(&m), Ok((5, 1)));
    // The fifth record went to slot 0, over the one already taken.
    assert_eq!(q.ring().offset_of(4), HEADER_BYTES);
    assert!(q.push(&mut m, &put(5)).is_err());
    for i in 1..5 {
        assert_eq!(q.pop(&mut m), Ok(Some((i, Ok(put(i))))));
    }
    assert_eq!(q.pop(&mut m), Ok(None), "empty");
}

#[test]
fn indices_and_slots_wrap_over_many_laps() {
    for (slots, seed) in [(1u32, 1u64), (2, 2), (4, 3), (8, 4), (16, 5)] {
        let q = RequestQueue::new(slots).expect("valid");
        let mut m = ring_mem(&q);
        let mut r = Rng::new(seed);
        let mut model: VecDeque<(u64, WorkRecord)> = VecDeque::new();
        let (mut next, mut fulls) = (0u64, 0);
        for _ in 0..4000 {
            if r.chance(1, 2) {
                let rec = random_record(&mut r);
                match q.push(&mut m, &rec) {
                    Ok(id) => {
                        assert_eq!(id, next);
                        assert_eq!(le64(&m, q.ring().offset_of(id)), id + 1, "stamp");
                        model.push_back((id, rec));
                        next += 1;
                    }
                    Err(QueueError::Full { .. }) => {
                        assert_eq!(model.len(), slots as usize);
                        fulls += 1;
                    }
                    Err(e) => panic!("{e}"),
                }
            } else {
                let got = q.pop(&mut m).expect("consistent");
                assert_eq!(got, model.pop_front().map(|(i, rec)| (i, Ok(rec))));
            }
            let (p, c) = q.ring().indices(&m).expect("consistent");
            assert_eq!(p - c, model.len() as u64);
        }
        assert!(
            next / u64::from(slots) >= 100,
            "{slots} slots: {next} records"
        );
        assert!(fulls > 0);
    }
}

#[test]
fn a_record_is_taken_only_once_its_stamp_has_landed() {
    let q = RequestQueue::new(2).expect("valid");
    let mut m = ring_mem(&q);
    let rec = |i| WorkRecord::FetchAdd {
        window: 1,
        dst: 8 * i,
        add: i,
    };
    // Laps 0 and 1 go through normally.
    for i in 0..2 {
        q.push(&mut m, &rec(i)).expect("room");
        let (id, got) = q.pop(&mut m).expect("consistent").expect("visible");
        assert_eq!((id, got), (i, Ok(rec(i))));
    }
    let at = q.ring().offset_of(2);
    q.push(&mut m, &rec(2)).expect("room");
    // The producer index landed but the stamp has not: the slot still holds lap
    // 0's stamp (1), then, in fresh memory, zero. Neither may be consumed.
    for stale in [1u64, 0] {
        m[at..at + 8].copy_from_slice(&stale.to_le_bytes());
        assert_eq!(q.pop(&mut m), Ok(None));
        assert_eq!(q.ring().indices(&m), Ok((3, 2)), "consumer not advanced");
    }
    m[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
    assert_eq!(q.pop(&mut m), Ok(Some((2, Ok(rec(2))))));
    // A stamp from a later lap than expected: the producer overwrote it.
    q.push(&mut m, &rec(3)).expect("room");
    let at = q.ring().offset_of(3);
    m[at..at + 8].copy_from_slice(&6u64.to_le_bytes());
    assert_eq!(
        q.pop(&mut m),
        Err(QueueError::StampAhead { index: 3, stamp: 6 })
    );
}

#[test]
fn inconsistent_memory_is_reported_not_trusted() {
    assert_eq!(Ring::new(3, 64), Err(QueueError::BadSlots(3)));
    assert_eq!(Ring::new(0, 64), Err(QueueError::BadSlots(0)));
    assert_eq!(
        Ring::new(MAX_SLOTS * 2, 64),
        Err(QueueError::BadSlots(MAX_SLOTS * 2))
    );
    assert_eq!(Ring::new(4, 40), Err(QueueError::BadEntrySize(40)));
    assert_eq!(Ring::new(4, 0), Err(QueueError::BadEntrySize(0)));
    let ring = Ring::new(4, 32).expect("valid");
    assert_eq!(ring.bytes(), HEADER_BYTES + 4 * 32);
    let mut short = vec![0; ring.bytes() - 1];
    assert_eq!(
        ring.init(&mut short),
        Err(QueueError::WrongLength {
            expected: 256,
            got: 255
        })
    );
    let mut m = vec![0; ring.bytes()];
    // Never set up: the header does not describe this ring.
    assert!(matches!(
        ring.indices(&m),
        Err(QueueError::LayoutMismatch {
            header_slots: 0,
            ..
        })
    ));
    ring.init(&mut m).expect("right size");
    assert_eq!(
        ring.push(&mut m, &[0; 16]),
        Err(QueueError::WrongEntryLength {
            expected: 32,
            got: 16
        })
    );
    // A consumer index ahead of the producer, or a producer more than a ring ahead.
    m[CONSUMER_INDEX] = 1;
    let mut out = [0; 32];
    assert_eq!(
        ring.pop(&mut m, &mut out),
        Err(QueueError::IndicesCorrupt {
            producer: 0,
            consumer: 1,
            slots: 4
        })
    );
    m[CONSUMER_INDEX] = 0;
    m[PRODUCER_INDEX] = 5;
    assert_eq!(
        ring.push(&mut m, &[0; 32]),
        Err(QueueError::IndicesCorrupt {
            producer: 5,
            consumer: 0,
            slots: 4
        })
    );
}

#[test]
fn the_request_consumer_goes_by_stamps_alone() {
    let q = RequestQueue::new(4).expect("valid");
    let mut m = ring_mem(&q);
    let rec = |i: u64| WorkRecord::Put {
        window: 3,
        dst: 64 * i,
        src: i,
        bytes: 64,
    };
    // A GPU producer keeps no producer index (it claims on a counter of its
    // own, which the word stands for during each push): the word stays zero,
    // and every stamped record is taken in order.
    for i in 0..3 {
        m.store(PRODUCER_INDEX, i);
        assert_eq!(q.push(&mut m, &rec(i)), Ok(i));
        m.store(PRODUCER_INDEX, 0);
    }
    for i in 0..3 {
        assert_eq!(q.pop(&mut m), Ok(Some((i, Ok(rec(i))))));
    }
    assert_eq!(q.pop(&mut m), Ok(None), "no stamp 4 yet");
    assert_eq!(m.load(CONSUMER_INDEX), 3);
    // Whatever the word holds (behind the consumer, a lap ahead, nonsense),
    // the stamp decides; the index-checked consumer of a completion ring would
    // refuse these indices.
    let mut out = [0u8; RECORD_BYTES];
    for (i, junk) in [(3u64, 0u64), (4, 9), (5, u64::MAX)] {
        m.store(PRODUCER_INDEX, i);
        assert_eq!(q.push(&mut m, &rec(i)), Ok(i));
        m.store(PRODUCER_INDEX, junk);
        assert!(matches!(
            q.ring().pop(&mut m, &mut out),
            Err(QueueError::IndicesCorrupt { .. })
        ));
        assert_eq!(q.pop(&mut m), Ok(Some((i, Ok(rec(i))))));
    }
    // A word saying more is there than the stamps do takes nothing.
    m.store(PRODUCER_INDEX, 9);
    assert_eq!(q.pop(&mut m), Ok(None));
    assert_eq!(m.load(CONSUMER_INDEX), 6, "consumer not advanced");
    // A later lap's stamp is still an overrun.
    let at = q.ring().offset_of(6);
    m.store(at, 6 + 1 + 4);
    assert_eq!(
        q.pop(&mut m),
        Err(QueueError::StampAhead {
            index: 6,
            stamp: 11
        })
    );
    // The shape checks stay.
    m.store(RING_SLOTS, 8 | (64 << 32));
    assert_eq!(
        q.pop(&mut m),
        Err(QueueError::LayoutMismatch {
            header_slots: 8,
            header_entry_bytes: 64,
            slots: 4,
            entry_bytes: 64
        })
    );
    let mut short = vec![0u8; q.ring().bytes() - 8];
    assert_eq!(
        q.pop(&mut short[..]),
        Err(QueueError::WrongLength {
            expected: q.ring().bytes(),
            got: q.ring().bytes() - 8
        })
    );
}

/// Plain bytes that log every access, to check the word discipline.
struct Logged {
    mem: Vec<u8>,
    log: RefCell<Vec<Access>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Access {
    Load(usize),
    Store(usize),
}

impl Logged {
    fn take(&self) -> Vec<Access> {
        std::mem::take(&mut self.log.borrow_mut())
    }
}

impl QueueMemory for Logged {
    fn len_bytes(&self) -> usize {
        self.mem.len()
    }

    fn load(&self, at: usize) -> u64 {
        assert_eq!(at % 8, 0, "unaligned load");
        self.log.borrow_mut().push(Access::Load(at));
        self.mem.load(at)
    }

    fn store(&mut self, at: usize, v: u64) {
        assert_eq!(at % 8, 0, "unaligned store");
        self.log.borrow_mut().push(Access::Store(at));
        self.mem.store(at, v);
    }
}

#[test]
fn rings_are_touched_as_whole_words_bodies_before_stamps() {
    use Access::{Load, Store};
    let q = RequestQueue::new(4).expect("valid");
    let cq = CompletionQueue::new(2).expect("valid");
    let body = |at: usize, bytes: usize| (at + 8..at + bytes).step_by(8);
    for (ring, entry) in [(q.ring(), RECORD_BYTES), (cq.ring(), CQE_BYTES)] {
        let mut m = Logged {
            mem: vec![0xee; ring.bytes()],
            log: RefCell::new(Vec::new()),
        };
        // Through a trait object too, as the proxy holds its memory.
        ring.init(&mut m as &mut dyn QueueMemory)
            .expect("right size");
        let mut want: Vec<_> = (0..ring.bytes()).step_by(8).map(Store).collect();
        want.push(Store(RING_SLOTS));
        assert_eq!(m.take(), want, "init: every word zeroed, the shape last");
        assert!(m.mem[..RING_SLOTS].iter().all(|&b| b == 0));

        for i in 0..3u64 {
            let at = ring.offset_of(i);
            let mut e = vec![0u8; entry];
            e.iter_mut()
                .enumerate()
                .for_each(|(k, b)| *b = (k as u8) ^ (i as u8));
            assert_eq!(ring.push(&mut m, &e), Ok(i));
            let log = m.take();
            let split = log
                .iter()
                .position(|a| matches!(a, Store(_)))
                .expect("stores");
            let mut loads = log[..split].to_vec();
            loads.sort();
            assert_eq!(
                loads,
                [Load(PRODUCER_INDEX), Load(RING_SLOTS), Load(CONSUMER_INDEX)]
            );
            let mut stores: Vec<_> = body(at, entry).map(Store).collect();
            stores.extend([Store(at), Store(PRODUCER_INDEX)]);
            assert_eq!(
                log[split..],
                stores,
                "the body, then the stamp, then the index"
            );

            let mut out = vec![0u8; entry];
            let got = if entry == RECORD_BYTES {
                ring.pop_stamped(&mut m, &mut out)
            } else {
                ring.pop(&mut m, &mut out)
            };
            assert_eq!(got, Ok(Some(i)));
            assert_eq!(out[8..], e[8..]);
            let mut want = vec![Load(RING_SLOTS)];
            if entry == CQE_BYTES {
                want.push(Load(PRODUCER_INDEX));
            }
            want.extend([Load(CONSUMER_INDEX), Load(at)]);
            want.extend(body(at, entry).map(Load));
            want.push(Store(CONSUMER_INDEX));
            assert_eq!(m.take(), want, "the stamp, then the body, then the index");
        }
    }
    // Through the queues' own wrappers: the request consumer never loads the
    // producer index, even when it finds nothing.
    let mut m = Logged {
        mem: ring_mem(&q),
        log: RefCell::new(Vec::new()),
    };
    let put = WorkRecord::Put {
        window: 1,
        dst: 2,
        src: 3,
        bytes: 4,
    };
    q.push(&mut m as &mut dyn QueueMemory, &put).expect("room");
    m.take();
    assert_eq!(q.pop(&mut m), Ok(Some((0, Ok(put)))));
    assert_eq!(q.pop(&mut m as &mut dyn QueueMemory), Ok(None));
    assert!(
        !m.take().contains(&Load(PRODUCER_INDEX)),
        "the request consumer read the producer index"
    );
}
