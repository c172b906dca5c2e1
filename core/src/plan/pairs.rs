//! The call check of sends and receives (`FERROCX_CHECK_CALLS`): each send is
//! preceded, on its connection, by its fingerprint (byte count, its number among
//! this rank's sends to that peer); each receive first takes 32 bytes and compares
//! them with what it expects, before the call reports success.
//!
//! Fingerprint and data are posted one after the other per operation, so pairing
//! does not depend on how either side grouped its calls: the n-th send from A to B
//! meets the n-th receive of B from A, whatever else was in their groups. What the
//! check adds to the transports' own size check: a send that meets a collective (or
//! a collective that meets a send) is an [`Error::Mismatch`] naming both calls,
//! instead of data silently taken for the other call.

use crate::algo::fingerprint::{Fingerprint, Pairing, FINGERPRINT_BYTES};
use crate::algo::{Buf, Region, Xfer};
use crate::error::Error;

pub(crate) struct Pairs {
    rank: usize,
    /// The fingerprints sent, then room for those received. Boxed: transports hold
    /// its address while the messages are in flight.
    buf: Box<[u8]>,
    /// Each receive's own fingerprint and where its peer's lands in `buf`.
    recvs: Vec<(Fingerprint, usize)>,
}

impl Pairs {
    /// For `ops` (direction is send?, peer, bytes, number), in posting order: the check
    /// and the transfers to post, each operation's fingerprint before its data
    /// (`data(i)` gives operation `i`'s own transfer).
    pub fn new(
        rank: usize,
        ops: &[(bool, usize, usize, u64)],
        data: impl Fn(usize) -> Xfer,
    ) -> (Self, Vec<Xfer>, Vec<Xfer>) {
        let mut buf = vec![0u8; ops.len() * FINGERPRINT_BYTES].into_boxed_slice();
        let base = buf.as_mut_ptr() as usize;
        // Each op adds its fingerprint and its data: sized once, no growth per call.
        let n = ops.len();
        let (mut sends, mut recvs, mut expect) = (
            Vec::with_capacity(2 * n),
            Vec::with_capacity(2 * n),
            Vec::with_capacity(n),
        );
        for (i, &(send, peer, bytes, seq)) in ops.iter().enumerate() {
            let at = i * FINGERPRINT_BYTES;
            let fp = |buf_kind| Xfer {
                peer,
                region: Region::new(buf_kind, base + at, FINGERPRINT_BYTES),
            };
            if send {
                buf[at..at + FINGERPRINT_BYTES]
                    .copy_from_slice(&Fingerprint::send(seq, peer, bytes).encode());
                sends.push(fp(Buf::Send));
                sends.push(data(i));
            } else {
                expect.push((Fingerprint::recv(seq, peer, bytes), at));
                recvs.push(fp(Buf::Recv));
                recvs.push(data(i));
            }
        }
        let pairs = Pairs {
            rank,
            buf,
            recvs: expect,
        };
        (pairs, sends, recvs)
    }

    /// Whether `ptr` lies in this check's fingerprints (host memory, also in a
    /// device runner: never staged, the transports take it as it is).
    pub fn holds(&self, ptr: usize) -> bool {
        let base = self.buf.as_ptr() as usize;
        (base..base + self.buf.len()).contains(&ptr)
    }

    /// Once every transfer is done: `Ok` if each receive met its send, else the
    /// mismatch (a collective or another send arrived) or the size error.
    pub fn verdict(&self) -> Result<(), Error> {
        let mut size = None;
        for (mine, at) in &self.recvs {
            let peer = mine.root.unwrap_or(u32::MAX) as usize;
            let theirs: &[u8; FINGERPRINT_BYTES] = self.buf[*at..*at + FINGERPRINT_BYTES]
                .try_into()
                .expect("one fingerprint");
            let arrived = Fingerprint::decode(theirs);
            match arrived.as_ref().map(|f| mine.pairing(self.rank, f)) {
                Ok(Pairing::Agrees) => {}
                Ok(Pairing::Size(n)) => {
                    size.get_or_insert_with(|| {
                        Error::invalid(format!(
                            "mismatched sizes: rank {peer} sent {n} bytes but rank {} posted a receive of {} bytes",
                            self.rank, mine.count
                        ))
                    });
                }
                Ok(Pairing::Differs) => {
                    let theirs = arrived.expect("decoded").to_string();
                    return Err(Error::mismatch(self.rank, mine.to_string(), peer, theirs));
                }
                Err(g) => {
                    let theirs = format!(
                        "an operation that sent no call fingerprint first ({}: a call with FERROCX_CHECK_CALLS=0 there)",
                        g.0
                    );
                    return Err(Error::mismatch(self.rank, mine.to_string(), peer, theirs));
                }
            }
        }
        size.map_or(Ok(()), Err)
    }
}
