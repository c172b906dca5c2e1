//! Remembered bids for host-memory sends and receives (sans-IO).
//!
//! A host send or receive is offered to every collective plugin alone, and
//! the answer may depend only on the op (kind, peer, bytes) and the
//! communicator (the ABI's rule, so both ends of a message agree): it cannot
//! change while the communicator lives. Asking costs an FFI call and a
//! descriptor check per plugin and op, on every call of a path that takes a
//! few hundred nanoseconds in all; a small table keyed by the op remembers
//! the winner instead (a collision asks again and replaces the entry).

/// Entries: a program's usual handful of (peer, size) shapes.
const SLOTS: usize = 32;
const _: () = assert!(SLOTS.is_power_of_two());

/// What an op is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BidKey {
    /// A send (not a receive).
    pub send: bool,
    /// The other rank.
    pub peer: usize,
    /// Bytes.
    pub bytes: usize,
}

/// What the lock serializing the plugins' hooks keeps for host sends and
/// receives: the bids, and the numbers of the ops plugins ran.
#[derive(Debug)]
pub(crate) struct HostP2p {
    /// Remembered bids.
    pub bids: HostBids,
    /// Per peer: sends to it and receives from it that plugins ran, counted
    /// as a plugin counts its own (status reports name an op by this number;
    /// the core's path numbers its own ops apart).
    seq: Vec<[u64; 2]>,
}

impl HostP2p {
    /// For a communicator of `nranks` ranks.
    pub fn new(nranks: usize) -> Self {
        HostP2p {
            bids: HostBids::default(),
            seq: vec![[0; 2]; nranks],
        }
    }

    /// The number of the next op a plugin runs with `peer` (a send or a receive).
    pub fn next_seq(&mut self, peer: usize, send: bool) -> u64 {
        let c = &mut self.seq[peer][usize::from(!send)];
        *c += 1;
        *c - 1
    }
}

/// The table of remembered bids.
#[derive(Debug)]
pub(crate) struct HostBids {
    /// Key and winner (a plugin's index, `None` for the core).
    slots: [Option<(BidKey, Option<usize>)>; SLOTS],
}

impl Default for HostBids {
    fn default() -> Self {
        HostBids {
            slots: [None; SLOTS],
        }
    }
}

impl HostBids {
    /// Fibonacci hashing: the top bits of the key times 2^64 / φ.
    fn slot(k: &BidKey) -> usize {
        let x = (k.bytes as u64) ^ ((((k.peer as u64) << 1) | u64::from(k.send)) << 40);
        (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// The winner of `key`, from the table or from `ask` (then remembered).
    pub fn winner(&mut self, key: BidKey, ask: impl FnOnce() -> Option<usize>) -> Option<usize> {
        let s = &mut self.slots[Self::slot(&key)];
        match s {
            Some((k, w)) if *k == key => *w,
            _ => {
                let w = ask();
                *s = Some((key, w));
                w
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_once_per_op_shape_and_again_after_a_collision() {
        let mut t = HostBids::default();
        let mut asked = 0;
        let key = |send, peer, bytes| BidKey { send, peer, bytes };
        for _ in 0..3 {
            for (send, peer, bytes, w) in [
                (true, 1, 8, Some(0)),
                (false, 1, 8, Some(0)),
                (true, 2, 1 << 20, None),
            ] {
                let got = t.winner(key(send, peer, bytes), || {
                    asked += 1;
                    w
                });
                assert_eq!(got, w);
            }
        }
        assert_eq!(asked, 3, "each shape asked once");
        let mut p = HostP2p::new(3);
        let seq: Vec<u64> = [(1, true), (1, true), (1, false), (2, true), (1, true)]
            .iter()
            .map(|&(peer, send)| p.next_seq(peer, send))
            .collect();
        assert_eq!(seq, vec![0, 1, 0, 0, 2], "per peer and direction");
        // Many shapes: every answer is still right (collisions ask again).
        for round in 0..2 {
            for b in 0..200usize {
                let w = (b % 3 != 0).then_some(b % 2);
                assert_eq!(
                    t.winner(key(b % 2 == 0, b % 5, b), || w),
                    w,
                    "round {round}"
                );
            }
        }
    }
}
