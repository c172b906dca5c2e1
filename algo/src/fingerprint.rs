//! Call fingerprints: what a rank believes the current collective (or point-to-point
//! operation) is, small enough to send beside every call and compare on arrival
//! (sans-IO: encoding, decoding and the comparison; the core decides where they travel).
//!
//! Ranks that call different collectives at the same point (another type, root,
//! count or operator, or a call one rank skipped) otherwise exchange bytes that
//! happen to fit and return wrong data. A fingerprint holds the communicator's
//! sequence number of the call and every argument all ranks must agree on; the
//! arguments a collective ignores (the operator of an all-gather, the root of an
//! all-reduce) are left out so they cannot cause false alarms.
//!
//! A send carries its byte count and its number among this rank's sends to that peer;
//! the receive it pairs with (FIFO per pair of ranks, no tags) expects the same number
//! and count: a send that meets a collective, or a collective that meets a send, is a
//! mismatch; a different count is a size error.
//!
//! Wire format (32 bytes, little-endian): magic `FXFP` · version (1) · kind (collective
//! index; 0x80 send, 0x81 receive) · type · operator (0xff: none) · sequence u64 ·
//! count u64 · root u32 (`u32::MAX`: none; for sends and receives the peer) · flags u32
//! (bit 0: per-rank counts, as alltoallv).

use crate::{CollKind, DataType, RedOp};
use std::fmt;

/// Bytes of an encoded fingerprint.
pub const FINGERPRINT_BYTES: usize = 32;

/// How the text of a mismatch starts: the core's `Error::Mismatch` and a
/// collective plugin that checks calls itself (`FX_COLL_CAP_CHECKS_CALLS`) say
/// it alike, so the core (and the peers, in an abort notice) recognise it.
pub const MISMATCH: &str = "mismatched calls: ";

/// The text of a mismatch between rank `a`'s call and rank `b`'s, the lower
/// rank first: `mismatched calls: rank 0 called all_reduce(float, sum, 8) as op
/// #3, rank 1 called broadcast(float, 8, root 0) as op #3`.
pub fn mismatch_text(a: usize, call_a: &str, b: usize, call_b: &str) -> String {
    let ((r, c), (p, pc)) = if a <= b {
        ((a, call_a), (b, call_b))
    } else {
        ((b, call_b), (a, call_a))
    };
    format!("{MISMATCH}rank {r} called {c}, rank {p} called {pc}")
}

const MAGIC: [u8; 4] = *b"FXFP";
const VERSION: u8 = 1;
const NONE8: u8 = 0xff;
const NONE32: u32 = u32::MAX;
const SEND: u8 = 0x80;
const RECV: u8 = 0x81;

/// What kind of call a fingerprint describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A collective.
    Coll(CollKind),
    /// A send (`root`: the destination, `seq`: its number among sends to it).
    Send,
    /// A receive (`root`: the source, `seq`: its number among receives from it).
    Recv,
}

/// How a received send's fingerprint compares with the receive it met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pairing {
    /// The send is the one this receive expects.
    Agrees,
    /// The right send, with this many bytes (the receive holds another count).
    Size(u64),
    /// Something else arrived (a collective, another send): the calls differ.
    Differs,
}

/// One rank's view of a collective call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// The communicator's sequence number of the call (0 for the first); for sends
    /// and receives, the number among this rank's to (from) that peer.
    pub seq: u64,
    /// Which call.
    pub kind: CallKind,
    /// Element type.
    pub dtype: DataType,
    /// Operator, for the collectives that reduce.
    pub op: Option<RedOp>,
    /// Element count as the call passed it.
    pub count: u64,
    /// Root, for the rooted collectives.
    pub root: Option<u32>,
    /// Per-rank counts (alltoallv): the counts themselves are not compared.
    pub vector: bool,
}

/// Received bytes that are not a fingerprint of this format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Garbled(pub String);

impl Fingerprint {
    /// The fingerprint of a call; the operator and root are kept only where the
    /// collective uses them.
    pub fn of(
        seq: u64,
        kind: CollKind,
        dtype: DataType,
        op: RedOp,
        count: usize,
        root: usize,
        vector: bool,
    ) -> Self {
        Fingerprint {
            seq,
            kind: CallKind::Coll(kind),
            dtype,
            op: kind.reduces().then_some(op),
            count: count as u64,
            root: kind.rooted().then_some(root as u32),
            vector,
        }
    }

    /// The `seq`-th send (from 0) of this rank to `to`, of `bytes`.
    pub fn send(seq: u64, to: usize, bytes: usize) -> Self {
        Self::p2p(CallKind::Send, seq, to, bytes)
    }

    /// The `seq`-th receive (from 0) of this rank from `from`, of `bytes`.
    pub fn recv(seq: u64, from: usize, bytes: usize) -> Self {
        Self::p2p(CallKind::Recv, seq, from, bytes)
    }

    fn p2p(kind: CallKind, seq: u64, peer: usize, bytes: usize) -> Self {
        Fingerprint {
            seq,
            kind,
            dtype: DataType::U8,
            op: None,
            count: bytes as u64,
            root: Some(peer as u32),
            vector: false,
        }
    }

    /// For a receive (`self`, on rank `me`): how the fingerprint that arrived
    /// before its data compares.
    pub fn pairing(&self, me: usize, arrived: &Fingerprint) -> Pairing {
        let is_its_send = arrived.kind == CallKind::Send
            && arrived.root == Some(me as u32)
            && arrived.seq == self.seq;
        match () {
            _ if !is_its_send => Pairing::Differs,
            _ if arrived.count == self.count => Pairing::Agrees,
            _ => Pairing::Size(arrived.count),
        }
    }

    /// The 32 bytes sent.
    pub fn encode(&self) -> [u8; FINGERPRINT_BYTES] {
        let mut b = [0u8; FINGERPRINT_BYTES];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = match self.kind {
            // Its place in `CollKind::ALL` (declared in that order: tested).
            CallKind::Coll(kind) => kind as u8,
            CallKind::Send => SEND,
            CallKind::Recv => RECV,
        };
        b[6] = self.dtype as u8;
        b[7] = self.op.map_or(NONE8, |o| o as u8);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..28].copy_from_slice(&self.root.unwrap_or(NONE32).to_le_bytes());
        b[28..32].copy_from_slice(&u32::from(self.vector).to_le_bytes());
        b
    }

    /// [`encode`](Self::encode) of the same call numbered `seq`, from its
    /// bytes under another number: a repeated call's bytes without encoding
    /// every field again.
    #[inline]
    pub fn renumber(encoded: &[u8; FINGERPRINT_BYTES], seq: u64) -> [u8; FINGERPRINT_BYTES] {
        let mut b = *encoded;
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        b
    }

    /// Read 32 received bytes.
    pub fn decode(b: &[u8; FINGERPRINT_BYTES]) -> Result<Self, Garbled> {
        if b[0..4] != MAGIC {
            return Err(Garbled(format!(
                "not a call fingerprint (starts {:02x?})",
                &b[0..4]
            )));
        }
        if b[4] != VERSION {
            return Err(Garbled(format!(
                "a call fingerprint of version {} (this rank speaks {VERSION})",
                b[4]
            )));
        }
        let kind = match b[5] {
            SEND => CallKind::Send,
            RECV => CallKind::Recv,
            k => CallKind::Coll(
                *CollKind::ALL
                    .get(k as usize)
                    .ok_or_else(|| Garbled(format!("a call fingerprint of unknown kind {k}")))?,
            ),
        };
        let dtype = DataType::from_code(u32::from(b[6])).map_err(|e| Garbled(e.0))?;
        let op = match b[7] {
            NONE8 => None,
            c => Some(RedOp::from_code(u32::from(c)).map_err(|e| Garbled(e.0))?),
        };
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(w)
        };
        let root = word(24..28) as u32;
        Ok(Fingerprint {
            seq: word(8..16),
            kind,
            dtype,
            op,
            count: word(16..24),
            root: (root != NONE32).then_some(root),
            vector: word(28..32) & 1 != 0,
        })
    }

    /// Whether two ranks' calls agree (everything, sequence number included).
    pub fn agrees(&self, other: &Fingerprint) -> bool {
        self == other
    }
}

/// `all_reduce(float, sum, 1000) as op #5`.
impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let peer = self.root.unwrap_or(NONE32);
        let kind = match self.kind {
            CallKind::Send => {
                return write!(
                    f,
                    "send of {} bytes to rank {peer} (its send #{} to that rank)",
                    self.count, self.seq
                )
            }
            CallKind::Recv => {
                return write!(
                    f,
                    "receive of {} bytes from rank {peer} (its receive #{} from that rank)",
                    self.count, self.seq
                )
            }
            CallKind::Coll(CollKind::Barrier) => return write!(f, "barrier() as op #{}", self.seq),
            CallKind::Coll(k) => k,
        };
        write!(f, "{}({}", kind.name(), self.dtype)?;
        if let Some(op) = self.op {
            write!(f, ", {op}")?;
        }
        if self.vector {
            write!(f, ", per-rank counts")?;
        } else {
            write!(f, ", {}", self.count)?;
        }
        if let Some(r) = self.root {
            write!(f, ", root {r}")?;
        }
        write!(f, ") as op #{}", self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `encode` writes a collective's discriminant as its place in `ALL`.
    #[test]
    fn every_kind_is_encoded_as_its_place_in_all() {
        for (i, &k) in CollKind::ALL.iter().enumerate() {
            assert_eq!(k as usize, i, "{k:?}");
            let b = Fingerprint::of(1, k, DataType::U8, RedOp::Sum, 1, 0, false).encode();
            assert_eq!(b[5] as usize, i);
            assert_eq!(
                Fingerprint::decode(&b).map(|f| f.kind),
                Ok(CallKind::Coll(k))
            );
        }
    }

    fn fp(kind: CollKind, dtype: DataType, op: RedOp, count: usize, root: usize) -> Fingerprint {
        Fingerprint::of(5, kind, dtype, op, count, root, false)
    }

    #[test]
    fn round_trip_every_kind_type_and_operator() {
        for kind in CollKind::ALL {
            for dtype in DataType::ALL {
                for op in RedOp::ALL {
                    let f = Fingerprint::of(
                        u64::MAX - 3,
                        kind,
                        dtype,
                        op,
                        1 << 40,
                        7,
                        kind == CollKind::AllToAllV,
                    );
                    assert_eq!(Fingerprint::decode(&f.encode()), Ok(f));
                }
            }
        }
    }

    /// A renumbered encoding is the encoding of the call under the new number.
    #[test]
    fn renumbering_is_encoding_under_the_new_number() {
        for kind in CollKind::ALL {
            let f = Fingerprint::of(3, kind, DataType::F32, RedOp::Max, 1000, 2, false);
            for seq in [0, 4, 1 << 40, u64::MAX] {
                let g = Fingerprint { seq, ..f };
                assert_eq!(Fingerprint::renumber(&f.encode(), seq), g.encode());
            }
        }
        let s = Fingerprint::send(7, 1, 64);
        assert_eq!(
            Fingerprint::renumber(&s.encode(), 8),
            Fingerprint::send(8, 1, 64).encode()
        );
    }

    #[test]
    fn unused_arguments_do_not_count() {
        let a = fp(CollKind::AllGather, DataType::F32, RedOp::Sum, 10, 0);
        let b = fp(CollKind::AllGather, DataType::F32, RedOp::Max, 10, 3);
        assert!(a.agrees(&b));
        let a = fp(CollKind::Broadcast, DataType::F32, RedOp::Sum, 10, 1);
        let b = fp(CollKind::Broadcast, DataType::F32, RedOp::Max, 10, 1);
        assert!(a.agrees(&b));
    }

    #[test]
    fn each_argument_that_matters_is_seen() {
        let base = fp(CollKind::Reduce, DataType::F32, RedOp::Sum, 1000, 0);
        let mut variants = vec![
            fp(CollKind::Reduce, DataType::I32, RedOp::Sum, 1000, 0),
            fp(CollKind::Reduce, DataType::F32, RedOp::Max, 1000, 0),
            fp(CollKind::Reduce, DataType::F32, RedOp::Sum, 999, 0),
            fp(CollKind::Reduce, DataType::F32, RedOp::Sum, 1000, 1),
            fp(CollKind::AllReduce, DataType::F32, RedOp::Sum, 1000, 0),
        ];
        let mut later = base;
        later.seq += 1;
        variants.push(later);
        for v in variants {
            assert!(!base.agrees(&v), "{v} vs {base}");
            assert!(!Fingerprint::decode(&v.encode()).unwrap().agrees(&base));
        }
    }

    #[test]
    fn describes_the_call() {
        let f = fp(CollKind::AllReduce, DataType::F32, RedOp::Sum, 1000, 0);
        assert_eq!(f.to_string(), "all_reduce(float, sum, 1000) as op #5");
        let f = fp(CollKind::Broadcast, DataType::I32, RedOp::Sum, 4, 2);
        assert_eq!(f.to_string(), "broadcast(int32, 4, root 2) as op #5");
    }

    #[test]
    fn a_receive_knows_its_send() {
        let recv = Fingerprint::recv(3, 0, 64);
        let sent = Fingerprint::decode(&Fingerprint::send(3, 1, 64).encode()).unwrap();
        assert_eq!(recv.pairing(1, &sent), Pairing::Agrees);
        assert_eq!(
            recv.pairing(1, &Fingerprint::send(3, 1, 100)),
            Pairing::Size(100)
        );
        for other in [
            Fingerprint::send(2, 1, 64), // another send to this rank
            Fingerprint::send(3, 2, 64), // a send meant for rank 2
            Fingerprint::recv(3, 1, 64), // both sides receive
            fp(CollKind::AllReduce, DataType::U8, RedOp::Sum, 64, 0),
        ] {
            assert_eq!(recv.pairing(1, &other), Pairing::Differs, "{other}");
        }
        assert_eq!(
            sent.to_string(),
            "send of 64 bytes to rank 1 (its send #3 to that rank)"
        );
        assert_eq!(
            recv.to_string(),
            "receive of 64 bytes from rank 0 (its receive #3 from that rank)"
        );
        assert_eq!(Fingerprint::decode(&recv.encode()), Ok(recv));
    }

    #[test]
    fn garbage_is_not_a_fingerprint() {
        assert!(Fingerprint::decode(&[0u8; 32]).is_err());
        let mut b = fp(CollKind::AllReduce, DataType::F32, RedOp::Sum, 1, 0).encode();
        b[4] = 9;
        assert!(Fingerprint::decode(&b).unwrap_err().0.contains("version 9"));
        let mut b = fp(CollKind::AllReduce, DataType::F32, RedOp::Sum, 1, 0).encode();
        b[5] = 0x7f;
        assert!(Fingerprint::decode(&b).is_err());
        b[5] = 0;
        b[6] = 77;
        assert!(Fingerprint::decode(&b).is_err());
    }
}
