//! Agreeing on who is left after ranks failed (sans-IO), for a communicator's
//! `shrink` (as `ncclCommShrink` and MPI ULFM's `MPI_Comm_shrink`).
//!
//! Each survivor starts from the ranks it knows are gone and, round after round,
//! sends its set to every rank it believes alive and merges the sets it receives
//! (a rank that fails to answer joins the set). A round in which every answer
//! equals its own set, and nobody new was lost, ends the agreement: the survivors
//! are the ranks outside the set. Sets only grow, so at most `nranks` rounds change
//! anything. A rank lost in the middle of a round can leave two survivors with
//! different sets (no algorithm avoids that without a failure detector's help);
//! the communicator built from them then fails to form and `shrink` is called again.
//!
//! Message: round u32 · one bit per rank (set: gone), little-endian bit order.

/// The exchange of one survivor.
#[derive(Debug, Clone)]
pub struct Agreement {
    me: usize,
    gone: Vec<bool>,
    round: u32,
    /// Whether this round brought anything new (a different set or a lost rank).
    changed: bool,
}

/// What a finished round means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Everyone answered with this rank's set: these ranks remain, in order.
    Agreed(Vec<usize>),
    /// Sets differed or a rank was lost: run another round.
    Again,
    /// This rank is in the set (others saw it as failed), or the rounds ran out.
    Failed(String),
}

impl Agreement {
    /// Start with `gone[r]` for every rank `r` this rank knows has failed.
    pub fn new(me: usize, gone: Vec<bool>) -> Self {
        Agreement {
            me,
            gone,
            round: 0,
            changed: false,
        }
    }

    /// The current round (names its messages).
    pub fn round(&self) -> u32 {
        self.round
    }

    /// The ranks to exchange with this round (alive, not this one).
    pub fn peers(&self) -> Vec<usize> {
        (0..self.gone.len())
            .filter(|&r| r != self.me && !self.gone[r])
            .collect()
    }

    /// This round's message.
    pub fn message(&self) -> Vec<u8> {
        let n = self.gone.len();
        let mut b = self.round.to_le_bytes().to_vec();
        b.resize(4 + n.div_ceil(8), 0);
        for (r, _) in self.gone.iter().enumerate().filter(|(_, g)| **g) {
            b[4 + r / 8] |= 1 << (r % 8);
        }
        b
    }

    /// After [`Outcome::Agreed`]: this rank's set as next round's message. A peer that
    /// learnt of a failure one round later than this rank waits for that round; the
    /// echo lets it finish with the same survivors instead of timing out on this rank.
    pub fn echo(&self) -> Vec<u8> {
        let mut b = self.message();
        b[..4].copy_from_slice(&(self.round + 1).to_le_bytes());
        b
    }

    /// `peer` failed to send or answer this round.
    pub fn lost(&mut self, peer: usize) {
        if !self.gone[peer] {
            self.gone[peer] = true;
            self.changed = true;
        }
    }

    /// `peer`'s message for this round; a malformed one or one of another round
    /// counts as the peer lost.
    pub fn receive(&mut self, peer: usize, msg: &[u8]) {
        let n = self.gone.len();
        let ok = msg.len() == 4 + n.div_ceil(8)
            && msg[..4] == self.round.to_le_bytes()
            && msg[4 + n / 8..].iter().enumerate().all(|(i, &b)| {
                // Bits past the last rank must be clear.
                let first = (n / 8 + i) * 8;
                (0..8).all(|k| first + k < n || b & (1 << k) == 0)
            });
        if !ok {
            self.lost(peer);
            return;
        }
        for r in 0..n {
            if msg[4 + r / 8] & (1 << (r % 8)) != 0 && !self.gone[r] {
                self.gone[r] = true;
                self.changed = true;
            }
        }
    }

    /// End the round: agreed, another round, or failed.
    pub fn finish_round(&mut self) -> Outcome {
        if self.gone[self.me] {
            return Outcome::Failed(format!(
                "the other ranks count rank {} among the failed",
                self.me
            ));
        }
        if !self.changed {
            return Outcome::Agreed((0..self.gone.len()).filter(|&r| !self.gone[r]).collect());
        }
        self.changed = false;
        self.round += 1;
        if self.round as usize > self.gone.len() + 1 {
            return Outcome::Failed(format!("no agreement after {} rounds", self.round));
        }
        Outcome::Again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run the exchange in lockstep for the ranks marked `alive` (failures known
    /// per rank in `known`); a rank that decided stops answering.
    fn simulate(known: Vec<Vec<bool>>, alive: Vec<bool>) -> Vec<Option<Outcome>> {
        let n = known.len();
        let mut a: Vec<Agreement> = known
            .into_iter()
            .enumerate()
            .map(|(r, g)| Agreement::new(r, g))
            .collect();
        let mut out: Vec<Option<Outcome>> = vec![None; n];
        for _ in 0..n + 2 {
            let msgs: Vec<Vec<u8>> = a.iter().map(Agreement::message).collect();
            let rounds: Vec<u32> = a.iter().map(Agreement::round).collect();
            for r in (0..n).filter(|&r| alive[r] && out[r].is_none()) {
                for p in a[r].peers() {
                    if alive[p] && out[p].is_none() && rounds[p] == a[r].round() {
                        let m = msgs[p].clone();
                        a[r].receive(p, &m);
                    } else {
                        a[r].lost(p);
                    }
                }
            }
            let running: Vec<usize> = (0..n).filter(|&r| alive[r] && out[r].is_none()).collect();
            for r in running {
                match a[r].finish_round() {
                    Outcome::Again => {}
                    o => out[r] = Some(o),
                }
            }
        }
        out
    }

    #[test]
    fn survivors_that_saw_different_failures_agree_on_all_of_them() {
        // 5 ranks; 1 and 3 died; rank 0 saw only 1 die, rank 4 only 3, rank 2 neither.
        let mut known = vec![vec![false; 5]; 5];
        known[0][1] = true;
        known[4][3] = true;
        let alive = vec![true, false, true, false, true];
        let out = simulate(known, alive);
        for r in [0, 2, 4] {
            assert_eq!(out[r], Some(Outcome::Agreed(vec![0, 2, 4])), "rank {r}");
        }
    }

    #[test]
    fn nothing_failed_keeps_everyone_in_one_round() {
        let mut a = Agreement::new(1, vec![false; 3]);
        let m = a.message();
        a.receive(0, &m);
        a.receive(2, &m);
        assert_eq!(a.finish_round(), Outcome::Agreed(vec![0, 1, 2]));
    }

    #[test]
    fn a_rank_the_others_count_as_failed_is_told() {
        let mut a = Agreement::new(1, vec![false; 3]);
        let mut them = Agreement::new(0, vec![false; 3]);
        them.lost(1);
        a.receive(0, &them.message());
        assert!(matches!(a.finish_round(), Outcome::Failed(m) if m.contains("rank 1")));
    }

    #[test]
    fn a_rank_one_round_behind_finishes_on_the_echo() {
        // 3 ranks, rank 2 died. Rank 0 knew it at once and agreed in round 0 (rank 1's
        // round-0 message already named rank 2). Rank 1 saw rank 2 die only after it
        // sent its round-0 message (from rank 0's round-0 message), so it runs round 1.
        let mut r0 = Agreement::new(0, vec![false, false, true]);
        let mut r1 = Agreement::new(1, vec![false, false, false]);
        let m1 = {
            let mut seen = r1.clone();
            seen.lost(2);
            seen.message()
        };
        let m0 = r0.message();
        r0.receive(1, &m1);
        assert_eq!(r0.finish_round(), Outcome::Agreed(vec![0, 1]));
        r1.receive(0, &m0);
        r1.lost(2);
        assert_eq!(r1.finish_round(), Outcome::Again);
        r1.receive(0, &r0.echo());
        assert_eq!(r1.finish_round(), Outcome::Agreed(vec![0, 1]));
    }

    #[test]
    fn garbage_or_another_round_counts_as_lost() {
        let mut a = Agreement::new(0, vec![false; 10]);
        a.receive(1, &[0, 0, 0]);
        let mut other = Agreement::new(2, vec![false; 10]);
        other.lost(5);
        assert_eq!(other.finish_round(), Outcome::Again);
        a.receive(2, &other.message()); // round 1 against round 0
        let mut bad_bits = Agreement::new(3, vec![false; 10]).message();
        bad_bits[5] |= 0x80; // rank 15 of 10
        a.receive(3, &bad_bits);
        assert_eq!(a.peers(), (4..10).collect::<Vec<_>>());
        assert_eq!(a.message()[4..], [0b0000_1110, 0]);
    }
}
