//! Remembered bids for host-memory calls (sans-IO).
//!
//! A host send or receive is offered to every collective plugin alone, and
//! the answer may depend only on the op (kind, peer, bytes) and the
//! communicator (the ABI's rule, so both ends of a message agree): it cannot
//! change while the communicator lives. A host collective's answer may depend
//! on its buffers too, unless every plugin asked declares
//! `FX_COLL_CAP_SHAPE_BIDS` (its answer depends on the call's shape alone):
//! then it is remembered per shape as well. Asking costs an FFI call and a
//! descriptor check per plugin and call, on every call of a path that takes
//! a few hundred nanoseconds in all; a small table keyed by the shape
//! remembers the winner instead (a collision asks again and replaces the
//! entry).
//!
//! The last host collective a plugin ran is remembered whole (`Repeat`): a
//! call that repeats it exactly — a training loop's or a benchmark's — was
//! validated, described and decided then, and goes straight to the launch.

use crate::algo::{Algo, CollKind, DataType, RedOp};
use ferrocx_algo::fingerprint::{Fingerprint, FINGERPRINT_BYTES};
use ferrocx_sdk::abi::FxCollDesc;

/// Entries: a program's usual handful of shapes.
const SLOTS: usize = 32;
const _: () = assert!(SLOTS.is_power_of_two());

/// A key of a table of bids: what spreads it over the slots.
pub(crate) trait Shape: Copy + Eq {
    /// The key's bits, mixed (the table hashes them).
    fn bits(&self) -> u64;
}

/// What a send or receive is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BidKey {
    /// A send (not a receive).
    pub send: bool,
    /// The other rank.
    pub peer: usize,
    /// Bytes.
    pub bytes: usize,
}

impl Shape for BidKey {
    fn bits(&self) -> u64 {
        (self.bytes as u64) ^ ((((self.peer as u64) << 1) | u64::from(self.send)) << 40)
    }
}

/// What a host collective is asked about: its descriptor without the
/// buffers and the call's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CollKey {
    coll: i32,
    dtype: i32,
    op: i32,
    root: i32,
    count: u64,
    flags: u32,
}

impl CollKey {
    /// The shape of `d` (a call in no window: the caller checks).
    pub fn of(d: &FxCollDesc) -> Self {
        CollKey {
            coll: d.coll,
            dtype: d.dtype,
            op: d.op,
            root: d.root,
            count: d.count,
            flags: d.flags,
        }
    }
}

impl Shape for CollKey {
    fn bits(&self) -> u64 {
        let small = (self.coll as u64 & 0xff)
            | (self.dtype as u64 & 0xff) << 8
            | (self.op as u64 & 0xff) << 16
            | u64::from(self.flags & 0xff) << 24
            | (self.root as u64 & 0xffff) << 32;
        self.count ^ small.rotate_left(40)
    }
}

/// A host collective as its caller made it: everything validating it,
/// describing it for the plugins (in no window) and their bids depend on,
/// besides the communicator. All-to-all-v's counts are not in it (such a
/// call is never remembered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RepeatKey {
    pub kind: CollKind,
    pub dtype: DataType,
    pub op: RedOp,
    pub count: usize,
    pub root: usize,
    pub algo: Option<Algo>,
    /// Address and bytes.
    pub send: (usize, usize),
    /// Address and bytes.
    pub recv: (usize, usize),
    pub in_place: bool,
}

/// A host collective a plugin ran, remembered for its repeats.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Repeat {
    /// The call.
    pub key: RepeatKey,
    /// Its descriptor's shape and buffers (the descriptor holds pointers,
    /// which the lock's contents may not).
    shape: CollKey,
    send: u64,
    recv: u64,
    /// The plugin that won it.
    pub plugin: usize,
    /// Its fingerprint numbered 0, and that encoded: a repeat's status record
    /// renumbers the bytes instead of encoding every field again.
    fp: Fingerprint,
    encoded: [u8; FINGERPRINT_BYTES],
}

impl Repeat {
    /// `key`, described as `d` (host memory, in no window), won by `plugin`.
    pub fn new(key: RepeatKey, d: &FxCollDesc, plugin: usize) -> Self {
        let fp = Fingerprint::of(0, key.kind, key.dtype, key.op, key.count, key.root, false);
        Repeat {
            key,
            shape: CollKey::of(d),
            send: d.send as u64,
            recv: d.recv as u64,
            plugin,
            fp,
            encoded: fp.encode(),
        }
    }

    /// The fingerprint of a repeat numbered `seq`, and its bytes.
    #[inline]
    pub fn fingerprint(&self, seq: u64) -> (Fingerprint, [u8; FINGERPRINT_BYTES]) {
        (
            Fingerprint { seq, ..self.fp },
            Fingerprint::renumber(&self.encoded, seq),
        )
    }

    /// The descriptor of a repeat numbered `seq`.
    pub fn desc(&self, seq: u64) -> FxCollDesc {
        let k = &self.shape;
        FxCollDesc {
            coll: k.coll,
            dtype: k.dtype,
            op: k.op,
            root: k.root,
            count: k.count,
            mem_kind: ferrocx_sdk::abi::FX_MEM_HOST,
            flags: k.flags,
            send: self.send as *const std::ffi::c_void,
            recv: self.recv as *mut std::ffi::c_void,
            send_win: std::ptr::null_mut(),
            recv_win: std::ptr::null_mut(),
            send_offset: 0,
            recv_offset: 0,
            seq,
        }
    }
}

/// What the lock serializing the plugins' hooks keeps for host calls: the
/// bids, and the numbers of the sends and receives plugins ran.
#[derive(Debug)]
pub(crate) struct HostP2p {
    /// Remembered bids of sends and receives.
    pub bids: Bids<BidKey>,
    /// Remembered bids of collectives (used only when every plugin asked
    /// declares `FX_COLL_CAP_SHAPE_BIDS`).
    pub coll_bids: Bids<CollKey>,
    /// The last host collective a plugin ran, while no window is registered.
    pub repeat: Option<Repeat>,
    /// Per peer: sends to it and receives from it that plugins ran, counted
    /// as a plugin counts its own (status reports name an op by this number;
    /// the core's path numbers its own ops apart).
    seq: Vec<[u64; 2]>,
}

impl HostP2p {
    /// For a communicator of `nranks` ranks.
    pub fn new(nranks: usize) -> Self {
        HostP2p {
            bids: Bids::default(),
            coll_bids: Bids::default(),
            repeat: None,
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

/// A table of remembered bids.
#[derive(Debug)]
pub(crate) struct Bids<K> {
    /// Key and winner (a plugin's index, `None` for the core).
    slots: [Option<(K, Option<usize>)>; SLOTS],
}

impl<K: Shape> Default for Bids<K> {
    fn default() -> Self {
        Bids {
            slots: [None; SLOTS],
        }
    }
}

impl<K: Shape> Bids<K> {
    /// Fibonacci hashing: the top bits of the key times 2^64 / φ.
    fn slot(k: &K) -> usize {
        (k.bits().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// The winner of `key`, from the table or from `ask` (then remembered).
    #[inline]
    pub fn winner(&mut self, key: K, ask: impl FnOnce() -> Option<usize>) -> Option<usize> {
        let i = Self::slot(&key);
        match &self.slots[i] {
            Some((k, w)) if *k == key => *w,
            _ => self.ask_and_keep(i, key, ask),
        }
    }

    /// [`winner`](Self::winner)'s miss: ask, remember (out of line, so the
    /// hit costs a few instructions inline).
    #[inline(never)]
    fn ask_and_keep(
        &mut self,
        i: usize,
        key: K,
        ask: impl FnOnce() -> Option<usize>,
    ) -> Option<usize> {
        let w = ask();
        self.slots[i] = Some((key, w));
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_once_per_op_shape_and_again_after_a_collision() {
        let mut t = Bids::default();
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

    #[test]
    fn collective_shapes_differ_in_every_field_but_buffers_and_number() {
        let base = FxCollDesc {
            coll: 4,
            dtype: 7,
            count: 2,
            ..FxCollDesc::default()
        };
        let other = FxCollDesc {
            send: 64 as *const _,
            recv: 128 as *mut _,
            seq: 9,
            ..base
        };
        assert_eq!(CollKey::of(&base), CollKey::of(&other));
        let mut t = Bids::default();
        let mut asked = 0;
        let variants = [
            FxCollDesc { coll: 0, ..base },
            FxCollDesc { dtype: 1, ..base },
            FxCollDesc { op: 2, ..base },
            FxCollDesc { root: 1, ..base },
            FxCollDesc { count: 3, ..base },
            FxCollDesc { flags: 1, ..base },
            base,
        ];
        // A shape asked again right away is remembered.
        for (i, d) in variants.iter().enumerate() {
            for _ in 0..2 {
                let got = t.winner(CollKey::of(d), || {
                    asked += 1;
                    Some(i)
                });
                assert_eq!(got, Some(i), "variant {i}");
            }
        }
        assert_eq!(asked, variants.len(), "each shape asked once in a row");
        assert_eq!(t.winner(CollKey::of(&other), || None), Some(6));
    }
}
