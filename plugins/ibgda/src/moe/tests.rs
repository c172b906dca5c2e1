//! The dispatch and combine plans of every rank, applied to host buffers:
//! every token lands once at every distinct rank of its experts, in the slot
//! the layout names, and every expert output comes back to its origin's slot;
//! no byte is written twice or left unwritten.

use super::*;
use crate::rng::Rng;

/// Byte `i` of token `t` of rank `r`.
fn token_byte(r: usize, t: usize, i: u64) -> u8 {
    (r as u64 * 131 + t as u64 * 17 + i * 7 + 1) as u8
}

/// What an expert rank `q` makes of an input byte.
fn expert(q: usize, b: u8) -> u8 {
    b ^ (0x5a + q as u8)
}

/// Apply `puts` from `src` into the destination buffers, counting the writes
/// of every byte.
fn apply(puts: &[Put], src: &[u8], dst: &mut [Vec<u8>], writes: &mut [Vec<u8>]) {
    for p in puts {
        let (s, d, b) = (p.src as usize, p.dst as usize, p.bytes as usize);
        dst[p.peer][d..d + b].copy_from_slice(&src[s..s + b]);
        for w in &mut writes[p.peer][d..d + b] {
            *w += 1;
        }
    }
}

/// One run: `n` ranks of `per_rank` experts, random tokens and choices.
fn run(seed: u64, n: usize, per_rank: usize, token_bytes: u64) {
    let mut rng = Rng::new(seed);
    let experts = (n * per_rank) as u64;
    let choices: Vec<Vec<Vec<u32>>> = (0..n)
        .map(|_| {
            let tokens = rng.below(40) as usize;
            (0..tokens)
                .map(|_| {
                    let k = 1 + rng.below(4) as usize;
                    (0..k).map(|_| rng.below(experts) as u32).collect()
                })
                .collect()
        })
        .collect();
    let routing: Vec<Routing> = choices
        .iter()
        .map(|c| Routing::new(n, per_rank, c).unwrap())
        .collect();
    let counts = Counts::new(routing.iter().map(Routing::counts).collect()).unwrap();
    let what = format!("seed {seed} n={n} per_rank={per_rank} token_bytes={token_bytes}");

    // Dispatch.
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            (0..choices[r].len())
                .flat_map(|t| (0..token_bytes).map(move |i| token_byte(r, t, i)))
                .collect()
        })
        .collect();
    let mut received: Vec<Vec<u8>> = (0..n)
        .map(|q| vec![0; (counts.layout(q).total * token_bytes) as usize])
        .collect();
    let mut writes: Vec<Vec<u8>> = received.iter().map(|b| vec![0; b.len()]).collect();
    let mut puts = 0;
    for r in 0..n {
        let plan = dispatch(r, &routing[r], &counts, token_bytes).unwrap();
        assert!(plan
            .iter()
            .all(|p| p.bytes > 0 && p.bytes % token_bytes == 0));
        puts += plan.len();
        apply(&plan, &inputs[r], &mut received, &mut writes);
    }
    let sent: u64 = routing.iter().flat_map(Routing::counts).sum();
    assert!(puts as u64 <= sent, "{what}: merged puts");
    for (q, w) in writes.iter().enumerate() {
        assert!(
            w.iter().all(|&c| c == 1),
            "{what}: rank {q}'s receive buffer"
        );
    }
    for (q, got) in received.iter().enumerate() {
        let layout = counts.layout(q);
        for (r, ro) in routing.iter().enumerate() {
            // Rank r's tokens for q, in its send order, from layout.starts[r].
            for (j, &t) in ro.sent_to(q).iter().enumerate() {
                let at = ((layout.starts[r] + j as u64) * token_bytes) as usize;
                let want: Vec<u8> = (0..token_bytes).map(|i| token_byte(r, t, i)).collect();
                assert_eq!(
                    &got[at..at + token_bytes as usize],
                    &want[..],
                    "{what}: rank {r}'s token {t} at rank {q}"
                );
            }
        }
        // Every token chose an expert of q exactly when it was sent to q.
        for (r, chosen) in choices.iter().enumerate() {
            let expected: Vec<usize> = chosen
                .iter()
                .enumerate()
                .filter(|(_, c)| c.iter().any(|&e| e as usize / per_rank == q))
                .map(|(t, _)| t)
                .collect();
            assert_eq!(routing[r].sent_to(q), &expected[..], "{what}");
        }
    }

    // Each rank's experts, then combine.
    let outputs: Vec<Vec<u8>> = received
        .iter()
        .enumerate()
        .map(|(q, b)| b.iter().map(|&x| expert(q, x)).collect())
        .collect();
    let mut combined: Vec<Vec<u8>> = routing
        .iter()
        .map(|ro| vec![0; (ro.counts().iter().sum::<u64>() * token_bytes) as usize])
        .collect();
    let mut writes: Vec<Vec<u8>> = combined.iter().map(|b| vec![0; b.len()]).collect();
    for (q, out) in outputs.iter().enumerate() {
        let plan = combine(q, &counts, token_bytes).unwrap();
        apply(&plan, out, &mut combined, &mut writes);
    }
    for (r, w) in writes.iter().enumerate() {
        assert!(
            w.iter().all(|&c| c == 1),
            "{what}: rank {r}'s combine buffer"
        );
    }
    for (r, ro) in routing.iter().enumerate() {
        for (t, chosen) in choices[r].iter().enumerate() {
            let mut ranks: Vec<usize> = chosen.iter().map(|&e| e as usize / per_rank).collect();
            ranks.sort_unstable();
            ranks.dedup();
            let slots = ro.combine_slots(t);
            assert_eq!(slots.len(), ranks.len(), "{what}");
            for (&slot, &q) in slots.iter().zip(&ranks) {
                let at = (slot * token_bytes) as usize;
                let want: Vec<u8> = (0..token_bytes)
                    .map(|i| expert(q, token_byte(r, t, i)))
                    .collect();
                assert_eq!(
                    &combined[r][at..at + token_bytes as usize],
                    &want[..],
                    "{what}: token {t} of rank {r} back from rank {q}"
                );
            }
        }
    }
}

#[test]
fn dispatch_and_combine_place_every_token_once() {
    let mut seed = 1;
    for n in 1..=6 {
        for per_rank in [1, 2, 3] {
            for token_bytes in [1, 16, 48] {
                for _ in 0..4 {
                    run(seed, n, per_rank, token_bytes);
                    seed += 1;
                }
            }
        }
    }
}

#[test]
fn consecutive_tokens_to_one_peer_are_one_put() {
    // Rank 0's tokens 0..4 all go to rank 1 (experts 2, 3): one put of 4 tokens.
    let r = Routing::new(2, 2, &[vec![2], vec![3, 2], vec![2], vec![3]]).unwrap();
    let counts = Counts::new(vec![r.counts(), vec![0, 0]]).unwrap();
    let plan = dispatch(0, &r, &counts, 8).unwrap();
    assert_eq!(
        plan,
        vec![Put {
            peer: 1,
            src: 0,
            dst: 0,
            bytes: 32
        }]
    );
    // Two experts of one rank share the copy; the token's one combine slot.
    assert_eq!(r.combine_slots(1), vec![1]);
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    assert_eq!(Routing::new(0, 2, &[]), Err(MoeError::Empty));
    let e = Routing::new(2, 2, &[vec![1], vec![4]]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "token 1 chose expert 4, but there are 4 experts"
    );
    assert!(matches!(
        Counts::new(vec![vec![1, 2], vec![3]]),
        Err(MoeError::CountsLength { nranks: 2, got: 1 })
    ));
    let counts = Counts::new(vec![vec![0, 1], vec![1, 0]]).unwrap();
    let r = Routing::new(2, 1, &[vec![1]]).unwrap();
    assert_eq!(
        dispatch(2, &r, &counts, 8),
        Err(MoeError::BadRank { me: 2, nranks: 2 })
    );
    let three = Routing::new(2, 1, &[vec![1], vec![1], vec![1]]).unwrap();
    let c3 = Counts::new(vec![three.counts(), vec![0, 0]]).unwrap();
    assert_eq!(
        dispatch(0, &three, &c3, u64::MAX / 2 + 1),
        Err(MoeError::Overflow),
        "byte offsets past u64"
    );
    assert_eq!(
        combine(3, &counts, 8).unwrap_err().to_string(),
        "rank 3 of 2"
    );
}
