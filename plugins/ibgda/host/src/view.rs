//! The view a kernel takes (`device_view`): where this rank's queues to every
//! peer and its signal words are, in the layout `ferrocx_ibgda.h` reads
//! (`struct fxg_view`, then one `struct fxg_peer` per rank). Built as bytes
//! here and copied to device memory once.

/// "FXGV", little-endian: a kernel handed something else can tell.
pub const VIEW_MAGIC: u32 = 0x5647_5846;
/// Layout version of the view.
pub const VIEW_VERSION: u32 = 1;
/// Bytes of the view's header; the per-rank entries follow.
pub const VIEW_HEADER_BYTES: usize = 64;
/// Bytes of one rank's entry.
pub const VIEW_PEER_BYTES: usize = 32;

/// One peer's queue pair as device addresses (zeros for this rank itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerQueues {
    /// The request ring.
    pub sq: u64,
    /// Two words of device memory: the producers' claim counter and their
    /// cache of the consumer index.
    pub claimed: u64,
    /// The completion ring.
    pub cq: u64,
}

/// The view's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// This rank.
    pub rank: u32,
    /// Device address of this rank's signal words.
    pub signals: u64,
    /// Their size in bytes.
    pub signal_bytes: u64,
    /// Per rank, in rank order.
    pub peers: Vec<PeerQueues>,
}

impl View {
    /// Bytes of the view for `nranks` ranks.
    pub fn bytes_for(nranks: usize) -> usize {
        VIEW_HEADER_BYTES + nranks * VIEW_PEER_BYTES
    }

    /// The little-endian bytes a kernel reads.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; Self::bytes_for(self.peers.len())];
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(0, &VIEW_MAGIC.to_le_bytes());
        put(4, &VIEW_VERSION.to_le_bytes());
        put(8, &self.rank.to_le_bytes());
        put(12, &(self.peers.len() as u32).to_le_bytes());
        put(16, &self.signals.to_le_bytes());
        put(24, &self.signal_bytes.to_le_bytes());
        for (r, p) in self.peers.iter().enumerate() {
            let at = VIEW_HEADER_BYTES + r * VIEW_PEER_BYTES;
            put(at, &p.sq.to_le_bytes());
            put(at + 8, &p.claimed.to_le_bytes());
            put(at + 16, &p.cq.to_le_bytes());
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_sits_where_the_header_reads_it() {
        let v = View {
            rank: 2,
            signals: 0x1122_3344_5566_7788,
            signal_bytes: 4096,
            peers: vec![
                PeerQueues {
                    sq: 0xa0,
                    claimed: 0xa8,
                    cq: 0xb0,
                },
                PeerQueues {
                    sq: 0xc0,
                    claimed: 0xc8,
                    cq: 0xd0,
                },
                PeerQueues::default(),
            ],
        };
        let b = v.encode();
        assert_eq!(b.len(), 64 + 3 * 32);
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        assert_eq!(&b[0..4], b"FXGV");
        assert_eq!((u32_at(4), u32_at(8), u32_at(12)), (1, 2, 3));
        assert_eq!((u64_at(16), u64_at(24)), (0x1122_3344_5566_7788, 4096));
        assert!(
            b[32..64].iter().all(|&x| x == 0),
            "reserved bytes stay zero"
        );
        assert_eq!(
            (u64_at(64), u64_at(72), u64_at(80), u64_at(88)),
            (0xa0, 0xa8, 0xb0, 0)
        );
        assert_eq!((u64_at(96), u64_at(104), u64_at(112)), (0xc0, 0xc8, 0xd0));
        assert!(
            b[128..].iter().all(|&x| x == 0),
            "this rank's own entry is empty"
        );
    }
}
