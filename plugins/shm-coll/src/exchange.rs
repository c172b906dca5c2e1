//! What one rank does in one call, over a [`Wire`] (sans-IO: the mailbox
//! region, the waits and the checks live behind the trait; `tests` run every
//! collective on threads with channels).
//!
//! A call is one round: every rank first posts its messages, then takes its
//! peers'. With the call check on ([`Call::checked`], the default), every
//! pair exchanges in every call, so every rank sees every rank's fingerprint:
//! a rank that only sends (a broadcast's root) still learns that its peers
//! made the same call, and ranks that disagree about the root — which decides
//! who sends data to whom — still meet and fail, instead of some returning
//! while others wait. Where no data flows the message is the fingerprint
//! alone (one cache line). With the check off or deferred, messages go only
//! where data does: a rank that receives nothing (a broadcast's or scatter's root, the
//! other ranks of reduce and gather) returns once its messages are posted,
//! without a round trip (as Open MPI's eager messages).
//!
//! Reductions are one-shot: each rank reduces every rank's input itself, in
//! rank order (`((in₀ ∘ in₁) ∘ in₂) …`), so every rank computes the same bits.

use ferrocx_algo::{reduce, DataType, RedOp};
use ferrocx_sdk::collective::Coll;
use ferrocx_sdk::PluginResult;

/// The messages of one call, as the plugin moves them.
pub trait Wire {
    /// Post this call's message to `peer`: `len` bytes at `data` (0: the
    /// fingerprint alone, or an empty block; `data` may then be null).
    ///
    /// # Safety
    /// `data` must be readable for `len` bytes.
    unsafe fn post(&mut self, peer: usize, data: *const u8, len: usize) -> PluginResult<()>;
    /// Wait for `peer`'s message of this call, check it against this call, and
    /// return its payload of `len` bytes, valid until the call returns.
    fn take(&mut self, peer: usize, len: usize) -> PluginResult<*const u8>;
    /// At least a block of scratch memory no peer writes, aligned to 16 bytes.
    fn scratch(&mut self) -> *mut u8;
}

/// One rank's view of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Which collective.
    pub coll: Coll,
    /// Element type.
    pub dtype: DataType,
    /// Operator (reductions).
    pub op: RedOp,
    /// This rank.
    pub rank: usize,
    /// Ranks.
    pub nranks: usize,
    /// Root (rooted collectives).
    pub root: usize,
    /// Bytes this call moves per message: the block, or one chunk of it.
    pub block: usize,
    /// Bytes of a whole block (`count` elements): where block `p` starts in a
    /// buffer of several (equal to `block` unless the call moves a chunk).
    pub stride: usize,
    /// The synchronous call check: every pair exchanges (fingerprints where
    /// no data flows); otherwise messages go only where data does.
    pub checked: bool,
}

/// A set of peers of a call, walked in rank order: `first..end` without the
/// ranks in `skip` (this rank, and a root). A call's sets are one of a few
/// shapes (every other rank, the root alone, none), computed once per call
/// instead of asking [`Call::posts_to`] of every rank in every loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peers {
    first: usize,
    end: usize,
    skip: [usize; 2],
}

impl Peers {
    const NONE: Peers = Peers {
        first: 0,
        end: 0,
        skip: [usize::MAX; 2],
    };

    fn one(p: usize) -> Self {
        Peers {
            first: p,
            end: p + 1,
            skip: [usize::MAX; 2],
        }
    }

    fn all_but(nranks: usize, a: usize, b: usize) -> Self {
        Peers {
            first: 0,
            end: nranks,
            skip: [a, b],
        }
    }

    /// Whether `p` is in the set.
    #[inline]
    pub fn contains(&self, p: usize) -> bool {
        (self.first..self.end).contains(&p) && !self.skip.contains(&p)
    }
}

impl Iterator for Peers {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.first < self.end {
            let p = self.first;
            self.first += 1;
            if !self.skip.contains(&p) {
                return Some(p);
            }
        }
        None
    }
}

/// A call's peer sets ([`Call::flows`]): they depend on the collective, the
/// ranks, the root and the check, not on the block, so a repeated call (and
/// every chunk of one) reuses them instead of deciding them again in every loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flows {
    /// [`Call::posting`].
    pub posting: Peers,
    /// [`Call::taking`].
    pub taking: Peers,
    /// [`Call::silent`].
    pub silent: Peers,
    /// [`Call::others`].
    pub others: Peers,
}

/// The chunks of a block of `total` bytes through slots of `slot` bytes:
/// (offset, length) — one, of length 0, for an empty block (its fingerprints
/// still travel).
pub fn chunks(total: usize, slot: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = total.div_ceil(slot.max(1)).max(1);
    (0..n).map(move |i| {
        let at = i * slot;
        (at, slot.min(total - at.min(total)))
    })
}

impl Call {
    /// Every peer set of the call.
    pub fn flows(&self) -> Flows {
        Flows {
            posting: self.posting(),
            taking: self.taking(),
            silent: self.silent(),
            others: self.others(),
        }
    }

    /// Whether `peer` is another rank of the call (with the check on, the
    /// two exchange messages whatever the collective and root: the module's docs).
    #[inline]
    pub fn talks_to(&self, peer: usize) -> bool {
        peer != self.rank && peer < self.nranks
    }

    /// Whether this rank posts `peer` a message in this call.
    #[inline]
    pub fn posts_to(&self, peer: usize) -> bool {
        self.talks_to(peer) && (self.checked || self.outgoing(peer).is_some())
    }

    /// Whether this rank takes a message from `peer` in this call.
    #[inline]
    pub fn takes_from(&self, peer: usize) -> bool {
        self.talks_to(peer) && (self.checked || self.outgoing_of(peer, self.rank).is_some())
    }

    /// Every other rank ([`talks_to`](Self::talks_to)).
    #[inline]
    pub fn others(&self) -> Peers {
        Peers::all_but(self.nranks, self.rank, usize::MAX)
    }

    /// The ranks this rank posts to ([`posts_to`](Self::posts_to)).
    #[inline]
    pub fn posting(&self) -> Peers {
        self.flow(true)
    }

    /// The ranks this rank takes from ([`takes_from`](Self::takes_from)).
    #[inline]
    pub fn taking(&self) -> Peers {
        self.flow(false)
    }

    /// The ranks this rank posts to (`posts`) or takes from. Checked, every
    /// pair exchanges; otherwise a rooted call's data flows from the root
    /// (broadcast, scatter) or to it (reduce, gather): the root posts to (or
    /// takes from) every other rank, each other rank takes from (or posts to)
    /// the root alone.
    #[inline]
    fn flow(&self, posts: bool) -> Peers {
        let from_root = match self.coll {
            _ if self.checked => return self.others(),
            Coll::AllReduce | Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => {
                return self.others()
            }
            Coll::Broadcast | Coll::Scatter => true,
            Coll::Reduce | Coll::Gather => false,
        };
        if self.rank == self.root {
            if posts == from_root {
                self.others()
            } else {
                Peers::NONE
            }
        } else if posts != from_root && self.root < self.nranks {
            Peers::one(self.root)
        } else {
            Peers::NONE
        }
    }

    /// The other ranks this rank takes nothing from: a message from one of
    /// them means the calls differ (`ShmComm::unheard`).
    #[inline]
    pub fn silent(&self) -> Peers {
        let (r, root) = (self.rank, self.root);
        match self.coll {
            _ if self.checked => Peers::NONE,
            Coll::AllReduce | Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => Peers::NONE,
            Coll::Reduce | Coll::Gather if r == root => Peers::NONE,
            Coll::Broadcast | Coll::Scatter if r != root => Peers::all_but(self.nranks, r, root),
            _ => self.others(),
        }
    }

    /// Offset in this rank's send buffer of its block for `peer`, or `None`
    /// when it sends `peer` no data.
    #[inline]
    pub fn outgoing(&self, peer: usize) -> Option<usize> {
        self.outgoing_of(self.rank, peer)
    }

    /// [`outgoing`](Self::outgoing) as rank `r` sees it.
    #[inline]
    fn outgoing_of(&self, r: usize, peer: usize) -> Option<usize> {
        let b = self.stride;
        match self.coll {
            Coll::AllReduce | Coll::AllGather => Some(0),
            Coll::ReduceScatter | Coll::AllToAll => Some(peer * b),
            Coll::Broadcast => (r == self.root).then_some(0),
            Coll::Scatter => (r == self.root).then_some(peer * b),
            Coll::Reduce | Coll::Gather => (r != self.root && peer == self.root).then_some(0),
        }
    }

    /// Bytes `peer` sends this rank.
    #[inline]
    pub fn incoming(&self, peer: usize) -> usize {
        self.outgoing_of(peer, self.rank).map_or(0, |_| self.block)
    }

    /// Whether this rank reduces what it receives (else it places it).
    #[inline]
    pub fn reduces(&self) -> bool {
        match self.coll {
            Coll::AllReduce | Coll::ReduceScatter => true,
            Coll::Reduce => self.rank == self.root,
            _ => false,
        }
    }

    /// Offset in the send buffer of this rank's own input to a reduction.
    fn own_input(&self) -> usize {
        match self.coll {
            Coll::ReduceScatter => self.rank * self.stride,
            _ => 0,
        }
    }

    /// Where `peer`'s block goes in the receive buffer (copies), if anywhere.
    #[inline]
    pub fn placed(&self, peer: usize) -> Option<usize> {
        let (r, b) = (self.rank, self.stride);
        match self.coll {
            Coll::AllGather | Coll::AllToAll => Some(peer * b),
            Coll::Gather => (r == self.root).then_some(peer * b),
            Coll::Broadcast | Coll::Scatter => (r != self.root && peer == self.root).then_some(0),
            _ => None,
        }
    }

    /// The send and receive buffers of an in-place call on `buf` (NCCL's
    /// layouts: all_gather's input and reduce_scatter's output are this rank's
    /// block of it, and so at the root of gather and scatter).
    pub fn in_place(&self, buf: *mut u8) -> (*const u8, *mut u8) {
        let at = self.rank * self.stride;
        let at_root = self.rank == self.root;
        // `wrapping_add`: only addresses are computed here.
        match self.coll {
            Coll::AllGather => (buf.wrapping_add(at).cast_const(), buf),
            Coll::Gather if at_root => (buf.wrapping_add(at).cast_const(), buf),
            Coll::ReduceScatter => (buf.cast_const(), buf.wrapping_add(at)),
            Coll::Scatter if at_root => (buf.cast_const(), buf.wrapping_add(at)),
            _ => (buf.cast_const(), buf),
        }
    }

    /// This rank's own block: (send offset, receive offset), for the copies.
    #[inline]
    pub fn own_block(&self) -> Option<(usize, usize)> {
        let (r, b) = (self.rank, self.stride);
        match self.coll {
            Coll::AllGather => Some((0, r * b)),
            Coll::AllToAll => Some((r * b, r * b)),
            Coll::Gather => (r == self.root).then_some((0, r * b)),
            Coll::Scatter => (r == self.root).then_some((r * b, 0)),
            Coll::Broadcast => (r == self.root).then_some((0, 0)),
            _ => None,
        }
    }
}

/// Run `call`, whose peer sets are `flows`, over `wire`.
///
/// # Safety
/// `send` and `recv` must be valid for the collective's buffer sizes at this
/// rank (NCCL's layouts; in place where they overlap as NCCL's in-place layout
/// says), aligned to the element size; a buffer the rank does not use may be null.
pub unsafe fn run(
    call: &Call,
    flows: &Flows,
    send: *const u8,
    recv: *mut u8,
    wire: &mut impl Wire,
) -> PluginResult<()> {
    let b = call.block;
    for p in flows.posting {
        match call.outgoing(p) {
            // SAFETY: the block lies in the send buffer (caller's contract).
            Some(off) => unsafe { wire.post(p, send.add(off), b)? },
            // SAFETY: nothing is read.
            None => unsafe { wire.post(p, std::ptr::null(), 0)? },
        }
    }
    if call.reduces() {
        // SAFETY: forwarded; the blocks are the call's.
        return unsafe { reduce_all(call, send.add(call.own_input()), recv, wire) };
    }
    if let Some((from, to)) = call.own_block() {
        // SAFETY: both blocks lie in the caller's buffers; in place they coincide.
        unsafe {
            let (src, dst) = (send.add(from), recv.add(to));
            if src != dst.cast_const() {
                crate::copy::bytes(src, dst, b);
            }
        }
    }
    for p in flows.taking {
        let data = wire.take(p, call.incoming(p))?;
        if let Some(to) = call.placed(p) {
            // SAFETY: the payload holds `b` bytes (checked by take) and the block
            // lies in the receive buffer.
            unsafe { crate::copy::bytes(data, recv.add(to), b) };
        }
    }
    Ok(())
}

/// `out = in₀ ∘ in₁ ∘ … ∘ in₍ₙ₋₁₎` in rank order, this rank's input being `own`.
///
/// # Safety
/// As [`run`]; `own` and `out` hold a block each (they may be the same block).
unsafe fn reduce_all(
    call: &Call,
    own: *const u8,
    out: *mut u8,
    wire: &mut impl Wire,
) -> PluginResult<()> {
    let (n, r, b) = (call.nranks, call.rank, call.block);
    let count = b / call.dtype.size();
    let mut own = own;
    // In place, `out` is overwritten from the first step on; a rank past 1
    // still needs its own input afterwards (ranks 0 and 1 read it in the step
    // that writes it, which the kernels allow).
    if r >= 2 && overlaps(own, out, b) {
        let s = wire.scratch();
        // SAFETY: the scratch holds a block; `own` is readable.
        unsafe { std::ptr::copy_nonoverlapping(own, s, b) };
        own = s;
    }
    if n == 1 {
        if own != out.cast_const() {
            // SAFETY: both hold a block.
            unsafe { std::ptr::copy(own, out, b) };
        }
    } else {
        let mut acc: *const u8 = if r == 0 { own } else { wire.take(0, b)? };
        for p in 1..n {
            let next = if p == r { own } else { wire.take(p, b)? };
            // SAFETY: every input holds `count` aligned elements; `out` may equal
            // `acc` (after the first step) or `own` exactly, never partially.
            unsafe { reduce::reduce(call.dtype, call.op, out, acc, next, count) };
            acc = out;
        }
    }
    // SAFETY: `out` holds the reduced block.
    unsafe { reduce::finish(call.dtype, call.op, out, count, n) };
    Ok(())
}

fn overlaps(a: *const u8, b: *mut u8, len: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    len > 0 && a < b + len && b < a + len
}

#[cfg(test)]
mod tests;
