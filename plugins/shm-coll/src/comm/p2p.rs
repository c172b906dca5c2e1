//! Host-memory sends and receives through the point-to-point rings
//! ([`crate::ring`] says who writes what when): the bid and a group, run to
//! completion by the calling thread.
//!
//! Every message carries its size and the sender's count of collective
//! exchanges with the receiver; the ring implies the rest of the send's
//! fingerprint (who sent it to whom, its number among this plugin's sends to
//! that peer). A receive of another size fails
//! alone, as on the core's path (the message is taken, the communicator stays
//! usable). A receive that finds the peer's next collective message instead,
//! or a collective that finds a send made before it, is a mismatch of calls:
//! it breaks the comm, and peers waiting read why.

use super::{Awaiting, ShmComm};
use crate::arena::Ring;
use crate::ring;
use ferrocx_algo::Fingerprint;
use ferrocx_sdk::collective::{P2pDesc, P2pDir, P2pOp};
use ferrocx_sdk::{MemKind, PluginError, PluginResult};
use std::time::{Duration, Instant};

impl ShmComm {
    /// The bid for one op: host memory, another rank, at most a slot.
    pub fn p2p_can_run(&self, d: &P2pDesc) -> i32 {
        let ok = d.mem == MemKind::Host
            && self.p2p_bytes > 0
            && d.ops.len() == 1
            && d.ops.iter().all(|o| self.takes(o));
        if ok {
            self.priority
        } else {
            0
        }
    }

    fn takes(&self, o: &P2pOp) -> bool {
        o.peer != self.rank && o.bytes <= self.p2p_bytes
    }

    /// Run a group of host-memory sends and receives to completion.
    ///
    /// # Safety
    /// Every op's buffer is valid for its bytes (readable for a send,
    /// writable and unaliased for a receive) during the call.
    pub unsafe fn p2p_launch(&mut self, d: &P2pDesc) -> PluginResult<()> {
        self.status()?;
        if let Some((i, o)) = d
            .ops
            .iter()
            .enumerate()
            .find(|(_, o)| d.mem != MemKind::Host || !self.takes(o))
        {
            return Err(PluginError::invalid(format!(
                "shm-coll cannot run point-to-point op {i} ({:?} of {} bytes with rank {} on {:?} memory; it takes host memory, another rank, at most {} bytes)",
                o.dir, o.bytes, o.peer, d.mem, self.p2p_bytes
            )));
        }
        // SAFETY: the caller's contract, forwarded.
        match unsafe { self.run_group(&d.ops) } {
            Ok(None) => Ok(()),
            Ok(Some(size)) => Err(size),
            Err(e) => Err(self.break_with(e)),
        }
    }

    /// Move every op; `Ok(Some(e))` when a receive met a send of another
    /// size (reported after the rest of the group ran), `Err` for what
    /// breaks the comm.
    ///
    /// # Safety
    /// As [`p2p_launch`](Self::p2p_launch).
    unsafe fn run_group(&mut self, ops: &[P2pOp]) -> PluginResult<Option<PluginError>> {
        // On the stack for a group's usual handful of ops, on the heap beyond.
        const INLINE: usize = 8;
        let (mut numbers_inline, mut done_inline) = ([0u64; INLINE], [false; INLINE]);
        let (mut numbers_heap, mut done_heap);
        let (numbers, done): (&mut [u64], &mut [bool]) = if ops.len() <= INLINE {
            (
                &mut numbers_inline[..ops.len()],
                &mut done_inline[..ops.len()],
            )
        } else {
            numbers_heap = vec![0; ops.len()];
            done_heap = vec![false; ops.len()];
            (&mut numbers_heap, &mut done_heap)
        };
        ring::numbers(ops, &self.sent, &self.taken, numbers);
        let numbers = &*numbers;
        let (mut began, mut last_pid_check) = (None, None);
        let oversubscribed = self.oversubscribed;
        // The comm, which ops moved, and the first receive of another size.
        let mut st = (&mut *self, done, None);
        super::wait_for(
            &mut st,
            oversubscribed,
            |(c, done, size_error)| {
                for (i, o) in ops.iter().enumerate() {
                    if done[i] {
                        continue;
                    }
                    let n = numbers[i];
                    // SAFETY: the caller's contract for the op's buffer.
                    done[i] = unsafe {
                        match o.dir {
                            P2pDir::Send => c.try_send(o, n),
                            P2pDir::Recv => c.try_recv(o, n, size_error),
                        }
                    };
                }
                done.iter().all(|&d| d).then(|| size_error.take())
            },
            |(c, done, _)| {
                // The first op still waiting names the peer waited for.
                let i = done.iter().position(|&d| !d).expect("an op is left");
                c.check_p2p(&ops[i], numbers[i], &mut began, &mut last_pid_check)
            },
        )
    }

    /// Write send `n` if it is the next to its peer and the ring has room.
    ///
    /// # Safety
    /// `o.buf` readable for `o.bytes`.
    unsafe fn try_send(&mut self, o: &P2pOp, n: u64) -> bool {
        let p = o.peer;
        if !ring::is_next(n, self.sent[p]) {
            return false;
        }
        if !ring::room(n, self.credits_seen[p]) {
            self.credits_seen[p] = self.arena.credits(Ring::P2p, p);
            if !ring::room(n, self.credits_seen[p]) {
                return false;
            }
        }
        // SAFETY: the caller's contract for the buffer (bytes ≤ the slot, checked
        // by `takes`); the peer took message n − P2P_SLOTS (`room`).
        unsafe {
            self.arena
                .p2p_post(p, n, self.exchanges[p] as u32, o.buf as *const u8, o.bytes)
        };
        self.sent[p] += 1;
        true
    }

    /// Take receive `n` if it is the next from its peer and its message is
    /// here: copy it (same size) or record the size error, then credit it.
    ///
    /// # Safety
    /// `o.buf` writable and unaliased for `o.bytes`.
    unsafe fn try_recv(&mut self, o: &P2pOp, n: u64, size_error: &mut Option<PluginError>) -> bool {
        let p = o.peer;
        if !ring::is_next(n, self.taken[p]) || !self.arena.p2p_arrived(p, n) {
            return false;
        }
        // The ring says who sent it and its number: only the size can differ.
        let (len, data, _) = self.arena.p2p_message(p, n);
        if len == o.bytes {
            // SAFETY: the message is whole (its flag seen with acquire) and
            // stays until credited below; the receive holds `len` bytes.
            unsafe { crate::copy::bytes(data, o.buf as *mut u8, len) };
        } else {
            size_error.get_or_insert_with(|| {
                PluginError::invalid(format!(
                    "mismatched sizes: rank {p} sent {len} bytes but rank {} posted a receive of {} bytes",
                    self.rank, o.bytes
                ))
            });
        }
        self.taken[p] += 1;
        self.arena.credit(Ring::P2p, p, self.taken[p]);
        true
    }

    /// Between polls of a group waiting on `o` (message `n`): the common
    /// checks, and for a receive, the peer's next collective message found
    /// where its send was expected.
    fn check_p2p(
        &self,
        o: &P2pOp,
        n: u64,
        began: &mut Option<Instant>,
        last_pid_check: &mut Option<Instant>,
    ) -> PluginResult<Duration> {
        let p = o.peer;
        let mine = match o.dir {
            P2pDir::Send => Fingerprint::send(n, p, o.bytes),
            P2pDir::Recv => Fingerprint::recv(n, p, o.bytes),
        };
        if o.dir == P2pDir::Recv && self.check.compares() {
            let k = self.coll_taken[p];
            // The collective message first: a send made before it would be
            // visible once it is (release order), so none was.
            if self.arena.arrived(p, k) && !self.arena.p2p_arrived(p, n) {
                let (theirs, _, _) = self.arena.message(p, k);
                return Err(self.mismatch(p, &mine, &theirs));
            }
        }
        self.check_wait(p, &mine, Awaiting::Part, began, last_pid_check)
    }

    /// Before a collective (`what`) posts anything, with the call check on:
    /// no peer's send waits untaken here, and every send of this rank was
    /// taken — in the order of calls between two ranks, a send made before
    /// a collective is received before it. Otherwise the calls differ; as no
    /// message of this collective left yet, every rank waiting for one fails
    /// with this rank's reason instead of completing.
    #[inline]
    pub(crate) fn before_collective(&mut self, what: &Fingerprint) -> PluginResult<()> {
        if !self.check.compares() || self.p2p_bytes == 0 {
            return Ok(());
        }
        for p in 0..self.nranks {
            if p == self.rank {
                continue;
            }
            if let Some(theirs) = self.sent_before_exchange(p) {
                return Err(self.mismatch(p, what, &theirs));
            }
        }
        // Usually every send is known taken already: no wait to set up.
        if self
            .credits_seen
            .iter()
            .zip(&self.sent)
            .all(|(c, s)| c >= s)
        {
            return Ok(());
        }
        self.sends_taken(what)
    }

    /// [`before_collective`](Self::before_collective)'s wait for this rank's
    /// sends to be taken (rare: out of line, so that the usual path saves no
    /// registers for it).
    #[cold]
    #[inline(never)]
    fn sends_taken(&mut self, what: &Fingerprint) -> PluginResult<()> {
        let (mut began, mut last_pid_check) = (None, None);
        let oversubscribed = self.oversubscribed;
        // The comm, and the peer whose credits were short at the last poll.
        let mut st = (&mut *self, 0);
        super::wait_for(
            &mut st,
            oversubscribed,
            |(c, waiting)| {
                for p in 0..c.nranks {
                    if c.credits_seen[p] < c.sent[p] {
                        c.credits_seen[p] = c.arena.credits(Ring::P2p, p);
                        if c.credits_seen[p] < c.sent[p] {
                            *waiting = p;
                            return None;
                        }
                    }
                }
                Some(())
            },
            |(c, waiting)| {
                c.check_wait(
                    *waiting,
                    what,
                    Awaiting::Room,
                    &mut began,
                    &mut last_pid_check,
                )
            },
        )
    }
}
