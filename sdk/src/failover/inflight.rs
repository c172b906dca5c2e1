//! [`InFlight`]: the unacknowledged chunks of one connection and the rail each is on.

use std::collections::{BTreeMap, HashMap};

/// One chunk of one message: the unit that is sent, acknowledged and resent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId {
    /// Message sequence number on its connection.
    pub msg: u64,
    /// Chunk index inside the message.
    pub index: u32,
}

struct Acks {
    nchunks: u32,
    acked: u32,
    bits: Vec<u64>,
}

/// The unacknowledged chunks of one connection, and the rail each was last sent on.
#[derive(Default)]
pub struct InFlight {
    msgs: BTreeMap<u64, Acks>,
    /// Unacknowledged chunks that are on the wire, by the rail that carries them.
    on_rail: HashMap<ChunkId, usize>,
}

impl InFlight {
    /// Nothing in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// Track message `msg` of `nchunks` chunks (at least 1: an empty message is one chunk).
    pub fn add_message(&mut self, msg: u64, nchunks: u32) {
        let nchunks = nchunks.max(1);
        self.msgs.insert(
            msg,
            Acks {
                nchunks,
                acked: 0,
                bits: vec![0; nchunks.div_ceil(64) as usize],
            },
        );
    }

    /// `id` went out on `rail` (first time or resent).
    pub fn sent(&mut self, id: ChunkId, rail: usize) {
        if self.msgs.contains_key(&id.msg) {
            self.on_rail.insert(id, rail);
        }
    }

    /// The receiver acknowledged `id`. Returns the message number when this was the
    /// message's last unacknowledged chunk (the message is then forgotten). Unknown or
    /// repeated acknowledgements return `None`.
    pub fn acked(&mut self, id: ChunkId) -> Option<u64> {
        let a = self.msgs.get_mut(&id.msg)?;
        if id.index >= a.nchunks {
            return None;
        }
        let (w, b) = ((id.index / 64) as usize, id.index % 64);
        if a.bits[w] & (1 << b) != 0 {
            return None;
        }
        a.bits[w] |= 1 << b;
        a.acked += 1;
        self.on_rail.remove(&id);
        if a.acked == a.nchunks {
            self.msgs.remove(&id.msg);
            Some(id.msg)
        } else {
            None
        }
    }

    /// Whether `id` was acknowledged (or its message is complete or unknown).
    pub fn is_acked(&self, id: ChunkId) -> bool {
        self.msgs.get(&id.msg).is_none_or(|a| {
            id.index >= a.nchunks || a.bits[(id.index / 64) as usize] & (1 << (id.index % 64)) != 0
        })
    }

    /// `rail` failed: its unacknowledged chunks, in message and chunk order, which the
    /// caller must resend elsewhere (and report with [`sent`](Self::sent) again).
    pub fn fail_rail(&mut self, rail: usize) -> Vec<ChunkId> {
        let mut lost: Vec<ChunkId> = self
            .on_rail
            .iter()
            .filter(|(_, &r)| r == rail)
            .map(|(&id, _)| id)
            .collect();
        for id in &lost {
            self.on_rail.remove(id);
        }
        lost.sort_unstable();
        lost
    }

    /// Unacknowledged chunks on the wire on `rail`.
    pub fn on_rail(&self, rail: usize) -> usize {
        self.on_rail.values().filter(|&&r| r == rail).count()
    }

    /// Messages not fully acknowledged.
    pub fn messages(&self) -> usize {
        self.msgs.len()
    }

    /// Messages below `seq` are complete at the receiver: forget them. Returns, for
    /// each, its number and its unacknowledged chunks.
    pub fn complete_below(&mut self, seq: u64) -> Vec<(u64, Vec<u32>)> {
        let keep = self.msgs.split_off(&seq);
        let gone = std::mem::replace(&mut self.msgs, keep);
        self.on_rail.retain(|id, _| id.msg >= seq);
        gone.into_iter()
            .map(|(m, a)| {
                let missing = (0..a.nchunks)
                    .filter(|&i| a.bits[(i / 64) as usize] & (1 << (i % 64)) == 0)
                    .collect();
                (m, missing)
            })
            .collect()
    }

    /// Forget everything (the connection failed for good).
    pub fn clear(&mut self) {
        self.msgs.clear();
        self.on_rail.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(msg: u64, index: u32) -> ChunkId {
        ChunkId { msg, index }
    }

    #[test]
    fn in_flight_resends_exactly_the_unacknowledged_chunks() {
        let mut f = InFlight::new();
        f.add_message(1, 3);
        f.add_message(2, 1);
        f.add_message(3, 0); // empty message: one chunk
        for (i, rail) in [(0, 0), (1, 1), (2, 0)] {
            f.sent(id(1, i), rail);
        }
        f.sent(id(2, 0), 0);
        f.sent(id(3, 0), 1);
        assert_eq!(f.on_rail(0), 3);
        assert_eq!(f.acked(id(1, 0)), None);
        assert_eq!(f.acked(id(1, 0)), None, "duplicate ack counts once");
        assert_eq!(f.acked(id(1, 7)), None, "out of range");
        assert_eq!(f.acked(id(9, 0)), None, "unknown message");
        assert_eq!(f.acked(id(3, 0)), Some(3));
        let lost = f.fail_rail(0);
        assert_eq!(lost, vec![id(1, 2), id(2, 0)]);
        assert_eq!(f.on_rail(0), 0);
        assert!(f.fail_rail(0).is_empty(), "nothing twice");
        for &c in &lost {
            f.sent(c, 1);
        }
        assert!(!f.is_acked(id(1, 2)) && f.is_acked(id(1, 0)));
        assert_eq!(f.acked(id(2, 0)), Some(2));
        assert_eq!(f.acked(id(1, 1)), None);
        assert_eq!(f.messages(), 1);
        assert_eq!(f.acked(id(1, 2)), Some(1));
        assert_eq!(f.messages(), 0);
        // A late ack from the failed rail's copy is ignored.
        assert_eq!(f.acked(id(1, 2)), None);
    }

    #[test]
    fn large_messages_use_many_bitmap_words() {
        let mut f = InFlight::new();
        f.add_message(5, 200);
        for i in 0..200 {
            f.sent(id(5, i), (i % 3) as usize);
        }
        for i in (0..200).rev().filter(|i| i % 3 != 1) {
            assert_eq!(f.acked(id(5, i)), None);
        }
        let lost = f.fail_rail(1);
        assert_eq!(lost.len(), (0..200).filter(|i| i % 3 == 1).count());
        assert!(lost.windows(2).all(|w| w[0] < w[1]));
        let last = lost.len() - 1;
        for (k, &c) in lost.iter().enumerate() {
            f.sent(c, 2);
            assert_eq!(f.acked(c), (k == last).then_some(5));
        }
    }
}
