use super::*;

/// SplitMix64 (the sans-IO crate's test PRNG is private to it).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn random_msg(r: &mut Rng) -> Msg {
    let from = r.next() as u32;
    let seq = r.next();
    match r.next() % 5 {
        0 | 1 => {
            let len = (r.next() % 300) as usize;
            let signal = r.next().is_multiple_of(2).then(|| {
                let op = if r.next().is_multiple_of(2) {
                    SignalOp::Set
                } else {
                    SignalOp::Add
                };
                (r.next(), r.next(), op)
            });
            Msg::Request(WireRequest {
                from,
                seq,
                completed_below: r.next(),
                op: Op::Put {
                    window: r.next() as u32,
                    dst: r.next(),
                    signal,
                },
                payload: (0..len).map(|_| r.next() as u8).collect(),
            })
        }
        2 => Msg::Request(WireRequest {
            from,
            seq,
            completed_below: r.next(),
            op: Op::FetchAdd {
                dst: r.next(),
                add: r.next(),
            },
            payload: Vec::new(),
        }),
        3 => Msg::Ack(Ack {
            from,
            seq,
            status: AckStatus::from_u8((r.next() % 5) as u8).unwrap(),
            fetched: r.next().is_multiple_of(2).then(|| r.next()),
        }),
        _ => Msg::Hello(Hello {
            rank: from,
            path: (r.next() % 2) as u8,
            token: seq,
        }),
    }
}

#[test]
fn messages_round_trip_whatever_the_pieces_the_stream_comes_in() {
    let mut r = Rng(20);
    for round in 0..50 {
        let msgs: Vec<Msg> = (0..40).map(|_| random_msg(&mut r)).collect();
        let mut stream = Vec::new();
        for m in &msgs {
            encode(m, &mut stream);
        }
        // Pieces of 1 byte up to 200, chosen at random.
        let mut d = Decoder::new(1 << 20);
        let mut got = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let n = (1 + r.next() % 200) as usize;
            let end = (at + n).min(stream.len());
            d.feed(&stream[at..end]);
            at = end;
            while let Some(m) = d.next().unwrap() {
                got.push(m);
            }
        }
        assert!(!d.partial(), "round {round}");
        assert_eq!(got, msgs, "round {round}");
    }
}

#[test]
fn the_header_has_the_documented_layout() {
    let mut b = Vec::new();
    encode(
        &Msg::Request(WireRequest {
            from: 3,
            seq: 0x1122,
            completed_below: 0x33,
            op: Op::Put {
                window: 7,
                dst: 0x4455,
                signal: Some((0x88, 0x99, SignalOp::Add)),
            },
            payload: vec![0xab; 5],
        }),
        &mut b,
    );
    assert_eq!(b.len(), HEADER_BYTES + 5);
    assert_eq!(&b[0..4], &MAGIC.to_le_bytes());
    assert_eq!(
        (b[4], b[5], b[6], b[7]),
        (KIND_PUT_SIGNAL, SIGNAL_ADD, 0, 0)
    );
    assert_eq!(&b[8..12], &3u32.to_le_bytes());
    assert_eq!(&b[12..16], &7u32.to_le_bytes());
    assert_eq!(&b[16..24], &0x1122u64.to_le_bytes());
    assert_eq!(&b[24..32], &0x33u64.to_le_bytes());
    assert_eq!(&b[32..40], &0x4455u64.to_le_bytes());
    assert_eq!(&b[40..44], &5u32.to_le_bytes());
    assert_eq!(&b[44..48], &[0; 4]);
    assert_eq!(&b[48..56], &0x88u64.to_le_bytes());
    assert_eq!(&b[56..64], &0x99u64.to_le_bytes());
    assert_eq!(&b[64..], &[0xab; 5]);
    let mut a = Vec::new();
    encode(
        &Msg::Ack(Ack {
            from: 1,
            seq: 9,
            status: AckStatus::Ok,
            fetched: Some(42),
        }),
        &mut a,
    );
    assert_eq!((a[4], a[5], a[6]), (KIND_ACK, 0, 1));
    assert_eq!(&a[32..40], &42u64.to_le_bytes());
    assert!(a[40..].iter().all(|&x| x == 0));
}

fn header_of(m: &Msg) -> [u8; HEADER_BYTES] {
    let mut b = Vec::new();
    encode(m, &mut b);
    b[..HEADER_BYTES].try_into().unwrap()
}

fn decode_one(b: &[u8], max: u32) -> Result<Option<Msg>, WireError> {
    let mut d = Decoder::new(max);
    d.feed(b);
    d.next()
}

#[test]
fn bad_headers_are_errors_naming_what_is_wrong() {
    let put = Msg::Request(WireRequest {
        from: 1,
        seq: 2,
        completed_below: 0,
        op: Op::Put {
            window: 0,
            dst: 8,
            signal: None,
        },
        payload: vec![1, 2, 3],
    });
    let fa = Msg::Request(WireRequest {
        from: 1,
        seq: 2,
        completed_below: 0,
        op: Op::FetchAdd { dst: 8, add: 1 },
        payload: Vec::new(),
    });
    let ack = Msg::Ack(Ack {
        from: 0,
        seq: 2,
        status: AckStatus::Ok,
        fetched: None,
    });
    let hello = Msg::Hello(Hello {
        rank: 1,
        path: 1,
        token: 5,
    });
    let cases: Vec<(&Msg, usize, u8, &str)> = vec![
        (&put, 0, 0x00, "bad magic"),
        (&put, 4, 9, "unknown message kind 9"),
        (&put, 4, 0, "unknown message kind 0"),
        (&put, 5, SIGNAL_ADD, "signal op"),
        (&put, 6, 1, "flag byte"),
        (&put, 7, 1, "reserved byte 7"),
        (&put, 44, 1, "reserved word 44"),
        (&put, 50, 1, "signal word"),
        (&fa, 12, 1, "window"),
        (&fa, 40, 1, "payload bytes"),
        (&ack, 5, 9, "status"),
        (&ack, 6, 2, "fetched flag"),
        (&ack, 33, 1, "fetched value"),
        (&ack, 24, 1, "completed_below"),
        (&hello, 12, VERSION as u8 + 1, "wire version"),
        (&hello, 6, 2, "path"),
    ];
    for (m, at, v, needle) in cases {
        let mut h = header_of(m);
        h[at] = v;
        let e = decode_one(&h, 1 << 20).unwrap_err().to_string();
        assert!(e.contains(needle), "byte {at} = {v}: {e}");
    }
    // A signal op that is neither set nor add.
    let mut h = header_of(&put);
    h[4] = KIND_PUT_SIGNAL;
    h[5] = 3;
    assert!(decode_one(&h, 1 << 20)
        .unwrap_err()
        .to_string()
        .contains("signal op"));
    // A payload over the limit is refused before anything is allocated.
    let e = decode_one(&header_of(&put), 2).unwrap_err();
    assert_eq!(e, WireError::TooLong { bytes: 3, max: 2 });
}

#[test]
fn truncated_input_is_incomplete_and_an_error_is_sticky() {
    let mut b = Vec::new();
    let m = Msg::Request(WireRequest {
        from: 1,
        seq: 2,
        completed_below: 1,
        op: Op::Put {
            window: 0,
            dst: 0,
            signal: None,
        },
        payload: vec![7; 100],
    });
    encode(&m, &mut b);
    for cut in [0, 1, 63, 64, 65, 163] {
        let mut d = Decoder::new(1 << 20);
        d.feed(&b[..cut]);
        assert_eq!(d.next(), Ok(None), "cut at {cut}");
        assert_eq!(d.partial(), cut > 0, "cut at {cut}");
        d.feed(&b[cut..]);
        assert_eq!(d.next(), Ok(Some(m.clone())), "cut at {cut}");
    }
    // A good message, then garbage, then a good one: the first comes out,
    // then the error, for ever.
    let mut d = Decoder::new(1 << 20);
    d.feed(&b);
    d.feed(&[0xff; HEADER_BYTES]);
    d.feed(&b);
    assert_eq!(d.next(), Ok(Some(m)));
    assert!(matches!(d.next(), Err(WireError::Magic(_))));
    assert!(matches!(d.next(), Err(WireError::Magic(_))));
}

#[test]
fn random_garbage_never_panics() {
    let mut r = Rng(7);
    let mut valid = Vec::new();
    encode(&random_msg(&mut r), &mut valid);
    for _ in 0..2000 {
        let len = (r.next() % 300) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        // Half the time a valid magic, so parsing goes past the first check.
        if b.len() >= 8 && r.next().is_multiple_of(2) {
            b[..4].copy_from_slice(&MAGIC.to_le_bytes());
            b[4] = (r.next() % 6) as u8;
        }
        // Sometimes a valid header with a few bytes flipped.
        if r.next().is_multiple_of(4) {
            b = valid.clone();
            for _ in 0..3 {
                let i = (r.next() as usize) % b.len();
                b[i] ^= r.next() as u8;
            }
        }
        let mut d = Decoder::new(4096);
        d.feed(&b);
        while let Ok(Some(_)) = d.next() {}
    }
}
