//! The call check of one collective (`FERROCX_CHECK_CALLS`): its fingerprint
//! ([`ferrocx_algo::fingerprint`]) goes to the next rank in the ring, the previous
//! rank's comes back and is compared before the runner uses any received data or
//! reports success.
//!
//! Why a ring: the fixed neighbours do not depend on the call's arguments (a root
//! or count the ranks disagree on cannot misroute the check), and if any two
//! ranks' calls differ, some neighbours' do, so some rank sees it. That rank fails
//! the call (breaking the communicator) and its abort notice carries the mismatch
//! to every other rank, which fails the same call with the same error: no rank
//! whose result depends on the mismatched rank returns `Ok`.
//!
//! The two 32-byte messages are posted before the stage's own transfers on the
//! same connections, so on each connection the fingerprint is the first thing of
//! the call to arrive, and it travels beside the data instead of adding a round
//! trip.

use super::post::{Post, Poster};
use super::StageDone;
use crate::algo::fingerprint::{Fingerprint, FINGERPRINT_BYTES};
use crate::error::Error;
use crate::plugin::Dir;
use std::sync::Arc;

pub(crate) struct Check {
    mine: Fingerprint,
    rank: usize,
    nranks: usize,
    next: usize,
    prev: usize,
    /// Mine (sent), then the previous rank's (received). Boxed: transports hold
    /// its address while the messages are in flight.
    buf: Box<[u8; 2 * FINGERPRINT_BYTES]>,
    done: Option<Arc<StageDone>>,
}

impl Check {
    /// The check of `mine` on `rank` of `nranks`; none for a single rank.
    pub fn new(mine: Fingerprint, rank: usize, nranks: usize) -> Option<Self> {
        if nranks < 2 {
            return None;
        }
        let mut buf = Box::new([0u8; 2 * FINGERPRINT_BYTES]);
        buf[..FINGERPRINT_BYTES].copy_from_slice(&mine.encode());
        Some(Check {
            mine,
            rank,
            nranks,
            next: (rank + 1) % nranks,
            prev: (rank + nranks - 1) % nranks,
            buf,
            done: None,
        })
    }

    /// The same check, not started (a check run ahead of the call: see
    /// [`Plan::first_check_only`](super::Plan::first_check_only)).
    pub fn again(&self) -> Self {
        Check::new(self.mine, self.rank, self.nranks).expect("made for several ranks")
    }

    /// The connections the check uses on its channel.
    pub fn needs(&self) -> [(usize, Dir); 2] {
        [(self.next, Dir::Send), (self.prev, Dir::Recv)]
    }

    /// Post the two messages (once), before anything else of the call.
    pub fn start(&mut self, channel: usize, poster: &mut dyn Poster) {
        if self.done.is_some() {
            return;
        }
        let at = self.buf.as_mut_ptr() as usize;
        let posts = [
            Post {
                channel,
                peer: self.next,
                dir: Dir::Send,
                ptr: at,
                len: FINGERPRINT_BYTES,
            },
            Post {
                channel,
                peer: self.prev,
                dir: Dir::Recv,
                ptr: at + FINGERPRINT_BYTES,
                len: FINGERPRINT_BYTES,
            },
        ];
        self.done = Some(poster.post(&posts));
    }

    /// `Ok(true)` once the previous rank's call is known to agree, `Ok(false)` while
    /// its fingerprint is on the way, the mismatch (or the transfer's error) otherwise.
    pub fn poll(&mut self) -> Result<bool, Error> {
        let Some(done) = &self.done else {
            return Ok(false);
        };
        if !done.is_done() {
            return Ok(false);
        }
        if let Some(e) = done.take_error() {
            return Err(e);
        }
        self.verdict().map(|()| true)
    }

    /// The mismatch, when the previous rank's fingerprint has arrived and differs:
    /// the cause to report when the call's data transfers fail too.
    pub fn arrived_mismatch(&self) -> Option<Error> {
        self.done
            .as_ref()
            .filter(|d| d.is_done())
            .and_then(|_| self.verdict().err())
    }

    fn verdict(&self) -> Result<(), Error> {
        let theirs: &[u8; FINGERPRINT_BYTES] = self.buf[FINGERPRINT_BYTES..]
            .try_into()
            .expect("the second half");
        let peer_call = match Fingerprint::decode(theirs) {
            Ok(f) if f.agrees(&self.mine) => return Ok(()),
            Ok(f) => f.to_string(),
            Err(g) => format!(
                "an operation that sent no call fingerprint first ({}: a send of device memory, a call a collective plugin ran, or a call with FERROCX_CHECK_CALLS=0 there)",
                g.0
            ),
        };
        Err(Error::mismatch(
            self.rank,
            self.mine.to_string(),
            self.prev,
            peer_call,
        ))
    }
}
