//! The point-to-point rings' arithmetic (sans-IO; `comm::p2p` moves the bytes).
//!
//! Rank `s`'s `m`-th send to rank `r` (counted per pair from 0, over this
//! plugin's sends only) goes into slot `m mod P2P_SLOTS` of `s`'s ring in
//! `r`'s region with the flag `m + 1`, once `r` credited message
//! `m − P2P_SLOTS`: a send completes without waiting for its receive unless
//! `P2P_SLOTS` earlier sends to that peer are still untaken. `r`'s `m`-th
//! receive from `s` takes that slot and credits `m + 1`. A group's ops keep
//! their posted order per peer and direction; ops of different peers or
//! directions go as soon as they can, so a group whose ops wait on each other
//! (a ring exchange) cannot deadlock.

use crate::layout::P2P_SLOTS;
use ferrocx_sdk::collective::{P2pDir, P2pOp};

/// The message number of each op of a group into `out` (one per op), given
/// the counts so far per peer (`sent[p]` sends to `p`, `taken[p]` receives
/// from `p`).
pub fn numbers(ops: &[P2pOp], sent: &[u64], taken: &[u64], out: &mut [u64]) {
    for (i, op) in ops.iter().enumerate() {
        let before = ops[..i]
            .iter()
            .filter(|o| o.peer == op.peer && o.dir == op.dir)
            .count() as u64;
        let base = match op.dir {
            P2pDir::Send => sent[op.peer],
            P2pDir::Recv => taken[op.peer],
        };
        out[i] = base + before;
    }
}

/// Whether send `number` may be written, the peer having credited `credits`
/// messages (its slot's previous message was taken).
pub fn room(number: u64, credits: u64) -> bool {
    number < credits + P2P_SLOTS as u64
}

/// Whether an op with this message number is the next of its peer and
/// direction (`count`: that pair's sends or receives so far).
pub fn is_next(number: u64, count: u64) -> bool {
    number == count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(dir: P2pDir, peer: usize) -> P2pOp {
        P2pOp {
            dir,
            peer,
            bytes: 8,
            buf: 1,
        }
    }

    #[test]
    fn ops_are_numbered_per_peer_and_direction_in_posted_order() {
        use P2pDir::*;
        let ops = [
            op(Send, 1),
            op(Recv, 1),
            op(Send, 2),
            op(Send, 1),
            op(Recv, 2),
            op(Recv, 1),
        ];
        let sent = [0, 5, 9];
        let taken = [0, 3, 0];
        let mut out = [0; 6];
        numbers(&ops, &sent, &taken, &mut out);
        assert_eq!(out, [5, 3, 9, 6, 0, 4]);
        numbers(&[], &sent, &taken, &mut []);
    }

    #[test]
    fn a_send_waits_only_for_a_full_ring() {
        let s = P2P_SLOTS as u64;
        assert!(room(0, 0));
        assert!(room(s - 1, 0));
        assert!(!room(s, 0), "slot 0 still holds message 0");
        assert!(room(s, 1));
        assert!(room(100, 100 - s + 1) && !room(100, 100 - s));
        assert!(is_next(3, 3) && !is_next(4, 3));
    }

    /// A model of two ranks exchanging random groups through a ring, in
    /// random interleavings: every message arrives once, in order, and
    /// nobody waits forever while the other has ops left.
    #[test]
    fn random_groups_on_two_ranks_always_finish() {
        let mut rng = ferrocx_sdk::testing::Rng::new(7);
        let mut rnd = |n: u64| rng.below(n);
        for _ in 0..200 {
            // Two ranks; message k of rank a to rank b carries (a, k).
            let msgs = 1 + rnd(3 * P2P_SLOTS as u64) as usize;
            // Rank 0 sends `msgs` then receives `msgs`; rank 1 receives first
            // or sends first, chosen at random: both orders must finish in
            // one group each.
            let groups: [Vec<P2pOp>; 2] = [0, 1].map(|r| {
                let mut g: Vec<P2pOp> = (0..msgs).map(|_| op(P2pDir::Send, 1 - r)).collect();
                let recvs: Vec<P2pOp> = (0..msgs).map(|_| op(P2pDir::Recv, 1 - r)).collect();
                if r == 1 && rnd(2) == 0 {
                    g.splice(0..0, recvs);
                } else {
                    g.extend(recvs);
                }
                g
            });
            let mut sent = [[0u64; 2]; 2];
            let mut taken = [[0u64; 2]; 2];
            let nums: Vec<Vec<u64>> = (0..2)
                .map(|r| {
                    let mut out = vec![0; groups[r].len()];
                    numbers(&groups[r], &sent[r], &taken[r], &mut out);
                    out
                })
                .collect();
            let mut done = [vec![false; 2 * msgs], vec![false; 2 * msgs]];
            // ring[r]: messages in flight from rank r.
            let mut ring: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
            let mut steps = 0;
            while done.iter().any(|d| d.iter().any(|&x| !x)) {
                steps += 1;
                assert!(steps < 10_000, "no progress");
                let r = rnd(2) as usize;
                let peer = 1 - r;
                for (i, o) in groups[r].iter().enumerate() {
                    if done[r][i] {
                        continue;
                    }
                    let n = nums[r][i];
                    match o.dir {
                        P2pDir::Send => {
                            if is_next(n, sent[r][peer]) && room(n, taken[peer][r]) {
                                ring[r].push(n);
                                sent[r][peer] += 1;
                                done[r][i] = true;
                            }
                        }
                        P2pDir::Recv => {
                            if is_next(n, taken[r][peer]) && ring[peer].first() == Some(&n) {
                                ring[peer].remove(0);
                                taken[r][peer] += 1;
                                done[r][i] = true;
                            }
                        }
                    }
                    assert!(ring[r].len() <= P2P_SLOTS);
                }
            }
            assert_eq!(sent, [[0, msgs as u64], [msgs as u64, 0]]);
            assert_eq!(taken, sent, "every message taken once");
        }
    }
}
