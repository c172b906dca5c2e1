//! The Simple kernel's protocol run on the CPU: every block of every rank a
//! thread, the regions shared atomics, the same loops as the CUDA source
//! (credits, heads, frees, marks, counters kept across calls), on 1–5 ranks
//! with rings of a few slots so that calls lap them. It checks the protocol —
//! every call's results are NCCL's, no call waits forever, a ring slot is
//! never overwritten before its reader freed it — not the CUDA translation
//! (the device tests do that). Also here: the two-shot all_reduce as two
//! calls, and the direct modes (the data straight between the ranks'
//! memories, two empty chunks per pair and call as barriers, the window
//! offsets checked) interleaved with the ring modes on the same rings. The point-to-point kernel's model (`p2p/model.rs`) runs on these
//! rings too.

use super::super::ll::{MODE_FOLD, MODE_GATHER, MODE_ROOT_GATHER};
use super::SLOTS;
use crate::collective::Coll;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ring slots in the model (the kernel has [`SLOTS`]): few, so calls lap.
pub(in crate::kernels) const K: u64 = 4;
const _: () = assert!(K < SLOTS as u64);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Fold,
    Gather,
    Broadcast,
    /// [`super::MODE_CHAIN`]: a broadcast passed along from the root.
    Chain,
    /// [`super::MODE_TWO_SHOT`]: a reduce_scatter's fold, then its parts to every rank.
    TwoShot,
    /// [`super::MODE_DIRECT_FOLD`]: every peer's input read straight.
    DirectFold,
    /// [`super::MODE_DIRECT_GATHER`]: this rank's input written into every output.
    DirectGather,
    /// [`super::MODE_DIRECT_BROADCAST`]: the root's input written into every output.
    DirectBroadcast,
    /// [`super::MODE_ROOT_GATHER`]: every other rank's input to the root.
    RootGather,
}

impl Mode {
    fn direct(self) -> bool {
        matches!(
            self,
            Mode::DirectFold | Mode::DirectGather | Mode::DirectBroadcast
        )
    }
}

/// One rank's region and buffers.
pub(in crate::kernels) struct Rank {
    pub(in crate::kernels) heads: Vec<AtomicU64>, // [w][k]
    pub(in crate::kernels) frees: Vec<AtomicU64>, // [r][k]
    marks: Vec<AtomicU64>,                        // [k]
    pub(in crate::kernels) sent: Vec<AtomicU64>,
    pub(in crate::kernels) recvd: Vec<AtomicU64>,
    /// The direct modes' count of blocks done with their share.
    mid: AtomicU64,
    /// The direct modes' error (the kernel's `ctl[3]`): the peer whose
    /// window offsets differ, plus one (0: none).
    err: AtomicU64,
    pub(in crate::kernels) data: Vec<AtomicU8>, // [w][k][slot]
    /// The user's memory: input and output at their offsets.
    pub(in crate::kernels) mem: Vec<AtomicU8>,
}

pub(in crate::kernels) struct World {
    pub(in crate::kernels) n: usize,
    pub(in crate::kernels) slot: usize,
    pub(in crate::kernels) ranks: Vec<Rank>,
}

/// One call's arguments (offsets into each rank's `mem`).
#[derive(Clone, Copy, Debug)]
struct Call {
    mode: Mode,
    root: usize,
    seg: usize,
    chunk: usize,
    input: usize,
    output: usize,
    send_stride: usize,
    out_stride: usize,
    overlap: bool,
    /// [`super::SimpleArgs::spread`] (this rank's alone).
    spread: bool,
    /// The direct modes: this rank's send and receive buffers
    /// ([`super::SimpleArgs::own`]). The model's window is all of `mem`, at 0
    /// in every rank's own addresses: a peer's buffer is expected at this
    /// rank's own offset ([`super::SimpleArgs::expect`]).
    win: [usize; 2],
    /// The direct modes: where an all_reduce in place folds.
    scratch: Option<usize>,
}

impl Call {
    /// A pair's ring position of data chunk `ch` in this call (the kernel's
    /// `FX_SP_RS`): a two-shot interleaves its fold's chunks (2ch) with the
    /// folded parts sent back (2ch + 1).
    fn at(&self, ch: usize) -> u64 {
        if self.mode == Mode::TwoShot {
            2 * ch as u64
        } else {
            ch as u64
        }
    }

    /// Work items per chunk of a sending block (and of a gather's receiving
    /// block): the peers where spread, as the kernel's `per`.
    fn per(&self, n: usize) -> usize {
        if self.spread && n > 2 && !self.overlap && self.mode != Mode::Chain {
            n - 1
        } else {
            1
        }
    }
}

pub(in crate::kernels) fn wait(word: &AtomicU64, want: u64, what: &str) {
    let start = Instant::now();
    while word.load(Acquire) < want {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "waited 20 s for {what} ≥ {want}: the protocol hangs"
        );
        std::thread::yield_now();
    }
}

impl World {
    /// Chunks rank `s` sends rank `q` in call `c` (the kernel's `FX_SP_TO`).
    fn to(&self, c: &Call, s: usize, q: usize) -> usize {
        let m = c.seg.div_ceil(c.chunk).max(1);
        match c.mode {
            _ if c.mode.direct() => 2,
            Mode::TwoShot => 2 * m,
            Mode::Chain if self.next(c, s) == Some(q) => m,
            Mode::Chain => 1,
            Mode::Broadcast if s != c.root => 1,
            Mode::RootGather if s == c.root || q != c.root => 1,
            _ => m,
        }
    }

    /// A chain's next rank after `me` (none after the last).
    fn next(&self, c: &Call, me: usize) -> Option<usize> {
        let n = self.n;
        (c.mode == Mode::Chain && (me + n - c.root) % n < n - 1).then_some((me + 1) % n)
    }

    /// Wait until this rank's chunk `g` for `q` may go into `q`'s ring (its
    /// slot's previous chunk was freed); where it goes in `q`'s data.
    fn credit(&self, me: usize, q: usize, g: u64) -> usize {
        let k = g % K;
        if g >= K {
            wait(
                &self.ranks[me].frees[q * K as usize + k as usize],
                g + 1 - K,
                "a free",
            );
        }
        // The slot's last chunk is the one K before (or none): the
        // credit kept this sender from lapping its reader.
        let head = &self.ranks[q].heads[me * K as usize + k as usize];
        assert_eq!(head.load(Acquire), (g + 1).saturating_sub(K));
        (me * K as usize + k as usize) * self.slot
    }

    /// Publish this rank's chunk `g` in `q`'s ring.
    fn publish(&self, me: usize, q: usize, g: u64) {
        self.ranks[q].heads[me * K as usize + (g % K) as usize].store(g + 1, Release);
    }

    /// Put this rank's chunk `g` for `q` into `q`'s ring: the credit, `len`
    /// bytes of this rank's memory at `src` (none for an empty chunk), the head.
    fn put(&self, me: usize, q: usize, g: u64, src: Option<usize>, len: usize) {
        let base = self.credit(me, q, g);
        if let Some(src) = src {
            let (mine, peer) = (&self.ranks[me], &self.ranks[q]);
            for i in 0..len {
                peer.data[base + i].store(mine.mem[src + i].load(Relaxed), Relaxed);
            }
        }
        self.publish(me, q, g);
    }

    fn sender(&self, me: usize, c: &Call, first: usize, half: usize, sent: &[u64]) {
        let n = self.n;
        let bcast = matches!(c.mode, Mode::Broadcast | Mode::Chain);
        let gather = c.mode == Mode::RootGather;
        let data = if gather {
            me != c.root
        } else {
            !bcast || me == c.root
        };
        let mine = &self.ranks[me];
        let per = c.per(n);
        let m = c.seg.div_ceil(c.chunk).max(1);
        // A chain's non-root forwards its data from its receivers; a
        // gather's root sends empty chunks.
        let sm = if (bcast && me != c.root) || (gather && me == c.root) {
            1
        } else {
            m
        };
        let next = self.next(c, me);
        let mut item = first;
        while item < sm * per && n > 1 {
            let ch = item / per;
            let (jlo, jhi) = if per > 1 {
                (1 + item % per, 2 + item % per)
            } else {
                (1, n)
            };
            let lo = ch * c.chunk;
            let len = c.chunk.min(c.seg - lo.min(c.seg));
            for j in jlo..jhi {
                let q = (me + j) % n;
                if ch >= self.to(c, me, q)
                    || (c.mode == Mode::Chain && me != c.root && Some(q) == next)
                {
                    continue;
                }
                let src = (data
                    && (c.mode != Mode::Chain || Some(q) == next)
                    && (!gather || q == c.root))
                    .then_some(c.input + q * c.send_stride + lo);
                self.put(me, q, sent[q] + c.at(ch), src, len);
            }
            if c.overlap {
                let g = sent[(me + 1) % n] + ch as u64;
                mine.marks[(g % K) as usize].store(g + 1, Release);
            }
            item += half;
        }
    }

    fn receiver(
        &self,
        me: usize,
        c: &Call,
        first: usize,
        half: usize,
        sent: &[u64],
        recvd: &[u64],
    ) {
        let n = self.n;
        let mine = &self.ranks[me];
        let m = c.seg.div_ceil(c.chunk).max(1);
        let root_gather = c.mode == Mode::RootGather;
        let per = if c.mode == Mode::Gather || (root_gather && me == c.root) {
            c.per(n)
        } else {
            1
        };
        // A gather's other ranks take one empty chunk from every peer.
        let m = if root_gather && me != c.root { 1 } else { m };
        let mut item = first;
        while item < m * per {
            let ch = item / per;
            let (jlo, jhi) = if per > 1 {
                (1 + item % per, 2 + item % per)
            } else {
                (1, n)
            };
            let lo = ch * c.chunk;
            let len = c.chunk.min(c.seg - lo.min(c.seg));
            let mut at = vec![usize::MAX; n];
            for j in jlo..jhi {
                let r = (me + n - j) % n;
                if ch >= self.to(c, r, me) {
                    continue;
                }
                let g = recvd[r] + c.at(ch);
                let k = (g % K) as usize;
                wait(&mine.heads[r * K as usize + k], g + 1, "a head");
                at[r] = (r * K as usize + k) * self.slot;
            }
            if c.overlap && n > 1 && ch < self.to(c, me, (me + 1) % n) {
                let g = sent[(me + 1) % n] + ch as u64;
                wait(&mine.marks[(g % K) as usize], g + 1, "a mark");
            }
            // A chain's middle passes the chunk on: the next rank's slot first.
            let fwd = self
                .next(c, me)
                .filter(|_| me != c.root)
                .map(|q| (q, sent[q] + ch as u64))
                .map(|(q, g)| (q, g, self.credit(me, q, g)));
            let own = c.input + me * c.send_stride + lo;
            let get = |r: usize, i: usize| {
                if r == me {
                    mine.mem[own + i].load(Relaxed)
                } else {
                    mine.data[at[r] + i].load(Relaxed)
                }
            };
            match c.mode {
                Mode::Fold | Mode::TwoShot => {
                    let at = c.output
                        + if c.mode == Mode::TwoShot {
                            me * c.out_stride
                        } else {
                            0
                        };
                    for i in 0..len {
                        let v = (0..n).fold(0u8, |a, r| a.wrapping_add(get(r, i)));
                        mine.mem[at + lo + i].store(v, Relaxed);
                    }
                }
                Mode::RootGather if me != c.root => {}
                Mode::Gather | Mode::RootGather => {
                    // This rank's own chunk goes with the item of its first peer.
                    let own_item = (jlo == 1).then_some(me);
                    for r in own_item
                        .into_iter()
                        .chain((jlo..jhi).map(|j| (me + n - j) % n))
                    {
                        let dst = c.output + r * c.out_stride + lo;
                        if r == me && dst == own {
                            continue;
                        }
                        for i in 0..len {
                            mine.mem[dst + i].store(get(r, i), Relaxed);
                        }
                    }
                }
                Mode::DirectFold | Mode::DirectGather | Mode::DirectBroadcast => {
                    unreachable!("the direct modes run `direct`")
                }
                Mode::Broadcast | Mode::Chain => {
                    // A chain's chunk comes from the previous rank.
                    let from = if c.mode == Mode::Chain && me != c.root {
                        (me + n - 1) % n
                    } else {
                        c.root
                    };
                    if me != c.root || c.output != own - lo {
                        for i in 0..len {
                            mine.mem[c.output + lo + i].store(get(from, i), Relaxed);
                        }
                    }
                    // The same bytes, from the ring slot, into the next rank's.
                    if let Some((q, _, base)) = fwd {
                        for i in 0..len {
                            self.ranks[q].data[base + i].store(get(from, i), Relaxed);
                        }
                    }
                }
            }
            for j in jlo..jhi {
                let r = (me + n - j) % n;
                if ch >= self.to(c, r, me) {
                    continue;
                }
                let g = recvd[r] + c.at(ch);
                // Release here; the CUDA kernel's free is a plain store after a
                // block barrier (its loads of the slot have returned): the model
                // checks the protocol, not that translation.
                self.ranks[r].frees[me * K as usize + (g % K) as usize].store(g + 1, Release);
            }
            if let Some((q, g, _)) = fwd {
                self.publish(me, q, g);
            }
            if c.mode == Mode::TwoShot {
                // The folded chunk to every peer (ring position 2ch + 1), then
                // theirs into place.
                for j in 1..n {
                    let q = (me + j) % n;
                    self.put(
                        me,
                        q,
                        sent[q] + 2 * ch as u64 + 1,
                        Some(c.output + me * c.out_stride + lo),
                        len,
                    );
                }
                for j in 1..n {
                    let r = (me + n - j) % n;
                    let g = recvd[r] + 2 * ch as u64 + 1;
                    let k = (g % K) as usize;
                    wait(&mine.heads[r * K as usize + k], g + 1, "a head");
                    let base = (r * K as usize + k) * self.slot;
                    for i in 0..len {
                        let v = mine.data[base + i].load(Relaxed);
                        mine.mem[c.output + r * c.out_stride + lo + i].store(v, Relaxed);
                    }
                    self.ranks[r].frees[me * K as usize + k].store(g + 1, Release);
                }
            }
            item += half;
        }
    }

    /// One block (`b` of `grid`) of a direct mode, as the kernel's direct
    /// branch: chunk 0 (with this rank's window offsets) from block 0, every
    /// peer's chunk 0 and its offsets checked, this block's share straight
    /// between the memories, chunk 1 from the last block done, every peer's
    /// chunk 1, block 0's frees, an in-place fold copied back.
    fn direct(&self, me: usize, c: &Call, b: usize, grid: usize, sent: &[u64], recvd: &[u64]) {
        let n = self.n;
        let mine = &self.ranks[me];
        let m = c.seg.div_ceil(c.chunk).max(1);
        let slot_of = |r: usize, g: u64| (r * K as usize + (g % K) as usize) * self.slot;
        if b == 0 {
            for j in 1..n {
                let q = (me + j) % n;
                let base = self.credit(me, q, sent[q]);
                let words = [super::DIRECT_MAGIC, c.win[0] as u64, c.win[1] as u64];
                for (i, byte) in words.iter().flat_map(|w| w.to_le_bytes()).enumerate() {
                    self.ranks[q].data[base + i].store(byte, Relaxed);
                }
                self.publish(me, q, sent[q]);
            }
        }
        let side = if c.mode == Mode::DirectFold { 0 } else { 1 };
        let mut ok = true;
        for j in 1..n {
            let r = (me + n - j) % n;
            wait(
                &mine.heads[r * K as usize + (recvd[r] % K) as usize],
                recvd[r] + 1,
                "a start",
            );
            let word = |at: usize| {
                u64::from_le_bytes(std::array::from_fn(|i| mine.data[at + i].load(Relaxed)))
            };
            let at = slot_of(r, recvd[r]);
            if word(at) != super::DIRECT_MAGIC || word(at + 8 + 8 * side) != c.win[side] as u64 {
                mine.err.store(r as u64 + 1, Relaxed);
                ok = false;
            }
        }
        let dst0 = c.scratch.unwrap_or(c.output);
        let mut ch = b;
        while ok && ch < m {
            let lo = ch * c.chunk;
            let len = c.chunk.min(c.seg - lo.min(c.seg));
            match c.mode {
                Mode::DirectFold => {
                    for i in 0..len {
                        // The peers' inputs at this rank's offset (symmetric windows).
                        let v = (0..n).fold(0u8, |a, r| {
                            a.wrapping_add(self.ranks[r].mem[c.input + lo + i].load(Relaxed))
                        });
                        mine.mem[dst0 + lo + i].store(v, Relaxed);
                    }
                }
                Mode::DirectBroadcast if me != c.root => {}
                _ => {
                    let bc = c.mode == Mode::DirectBroadcast;
                    for j in 0..n {
                        let q = (me + j) % n;
                        let src = c.input + q * c.send_stride + lo;
                        let dst = c.output + if bc { 0 } else { me * c.out_stride } + lo;
                        if q == me && dst == src {
                            continue;
                        }
                        for i in 0..len {
                            let v = mine.mem[src + i].load(Relaxed);
                            self.ranks[q].mem[dst + i].store(v, Relaxed);
                        }
                    }
                }
            }
            ch += grid;
        }
        if mine.mid.fetch_add(1, AcqRel) == grid as u64 - 1 {
            mine.mid.store(0, Relaxed);
            for q in (0..n).filter(|&q| ok && q != me) {
                self.put(me, q, sent[q] + 1, None, 0);
            }
        }
        if !ok {
            return;
        }
        for j in 1..n {
            let r = (me + n - j) % n;
            let g = recvd[r] + 1;
            wait(
                &mine.heads[r * K as usize + (g % K) as usize],
                g + 1,
                "a done",
            );
        }
        if b == 0 {
            for r in (0..n).filter(|&r| r != me) {
                for t in 0..2 {
                    let g = recvd[r] + t;
                    self.ranks[r].frees[me * K as usize + (g % K) as usize].store(g + 1, Release);
                }
            }
        }
        let mut ch = b;
        while let (Some(s), true) = (c.scratch, ch < m) {
            let lo = ch * c.chunk;
            let len = c.chunk.min(c.seg - lo.min(c.seg));
            for i in 0..len {
                mine.mem[c.output + lo + i].store(mine.mem[s + lo + i].load(Relaxed), Relaxed);
            }
            ch += grid;
        }
    }

    /// Every rank's kernel of one call, `halves[r]` senders and as many
    /// receivers each, all running at once.
    fn call(self: &Arc<Self>, calls: &[Call], halves: &[usize]) {
        let mut threads = Vec::new();
        for me in 0..self.n {
            let c = calls[me];
            let sent: Vec<u64> = self.ranks[me]
                .sent
                .iter()
                .map(|a| a.load(Acquire))
                .collect();
            let recvd: Vec<u64> = self.ranks[me]
                .recvd
                .iter()
                .map(|a| a.load(Acquire))
                .collect();
            let half = halves[me];
            for b in 0..2 * half {
                let (w, sent, recvd) = (self.clone(), sent.clone(), recvd.clone());
                threads.push(std::thread::spawn(move || {
                    if c.mode.direct() {
                        w.direct(me, &c, b, 2 * half, &sent, &recvd);
                    } else if b < half {
                        w.sender(me, &c, b, half, &sent);
                    } else {
                        w.receiver(me, &c, b - half, half, &sent, &recvd);
                    }
                }));
            }
        }
        for t in threads {
            t.join().expect("a block panicked");
        }
        // The last block of each rank adds the call's chunks.
        for (me, (c, rank)) in calls.iter().zip(&self.ranks).enumerate() {
            for q in (0..self.n).filter(|&q| q != me) {
                rank.sent[q].fetch_add(self.to(c, me, q) as u64, AcqRel);
                rank.recvd[q].fetch_add(self.to(c, q, me) as u64, AcqRel);
            }
        }
    }
}

pub(in crate::kernels) fn world(n: usize, slot: usize, mem: usize) -> Arc<World> {
    let words = |len: usize| (0..len).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
    let bytes = |len: usize| (0..len).map(|_| AtomicU8::new(0)).collect::<Vec<_>>();
    Arc::new(World {
        n,
        slot,
        ranks: (0..n)
            .map(|_| Rank {
                heads: words(n * K as usize),
                frees: words(n * K as usize),
                marks: words(K as usize),
                sent: words(n),
                recvd: words(n),
                mid: AtomicU64::new(0),
                err: AtomicU64::new(0),
                data: bytes(n * K as usize * slot),
                mem: bytes(mem),
            })
            .collect(),
    })
}

/// The call on rank `me` as the plugins map it ([`moves`](super::super::moves::moves),
/// the real table, and its overlap rule), on `mem` laid out as send at 0 and
/// receive at `span`.
fn call_of(coll: Coll, me: usize, n: usize, block: usize, in_place: bool, span: usize) -> Call {
    let (send, recv) = (if in_place { span } else { 0 }, span);
    call_at(coll, me, n, block, in_place, send, recv)
}

/// The call on rank `me` with its buffers at offsets `send` and `recv` of `mem`.
fn call_at(
    coll: Coll,
    me: usize,
    n: usize,
    block: usize,
    in_place: bool,
    send: usize,
    recv: usize,
) -> Call {
    let root = n - 1;
    let m = super::super::moves::moves(coll, me, root, block, in_place, send as u64, recv as u64)
        .expect("an exchange collective");
    let sends = match coll {
        Coll::Broadcast | Coll::Scatter => me == root,
        Coll::Gather => me != root,
        _ => true,
    };
    Call {
        mode: match m.mode {
            MODE_FOLD => Mode::Fold,
            MODE_GATHER => Mode::Gather,
            MODE_ROOT_GATHER => Mode::RootGather,
            _ => Mode::Broadcast,
        },
        root,
        seg: block,
        chunk: 0,
        input: m.input as usize,
        output: m.output as usize,
        send_stride: m.send_stride as usize,
        out_stride: m.out_stride as usize,
        overlap: m.overlap(me, n, block, sends),
        spread: false,
        win: [send, recv],
        scratch: None,
    }
}

impl World {
    /// Each rank's first `len` input bytes set to `value(rank, byte)`, then
    /// one call with `halves[r]` sending blocks on rank `r`.
    fn fill_and_call(
        self: &Arc<Self>,
        calls: &[Call],
        len: usize,
        value: impl Fn(usize, usize) -> u8,
        halves: &[usize],
    ) {
        for (r, c) in calls.iter().enumerate() {
            for i in 0..len {
                self.ranks[r].mem[c.input + i].store(value(r, i), Relaxed);
            }
        }
        self.call(calls, halves);
    }
}

#[test]
fn every_collective_on_1_to_5_ranks_lapping_small_rings() {
    let colls = [
        Coll::AllReduce,
        Coll::ReduceScatter,
        Coll::AllGather,
        Coll::AllToAll,
        Coll::Broadcast,
        Coll::Gather,
        Coll::Scatter,
    ];
    let mut rng = crate::testing::Rng::new(0x2545_f491_4f6c_dd1d);
    let mut next = |m: u64| rng.below(m);
    for n in 1..=5 {
        let (slot, span) = (32, 4096);
        let w = world(n, slot, 2 * span);
        // Many calls on one world: the counters and rings carry over.
        // 3 × the collectives: each in place once (every third round).
        for round in 0..21 {
            let coll = colls[round % colls.len()];
            let in_place = round % 3 == 1;
            let block = 1 + next(90) as usize;
            // The same chunk on every rank (it depends on the segment only).
            let chunk = [16, 32][next(2) as usize].min(slot);
            // A broadcast runs as a chain on every rank or on none (it is the protocol).
            let chain = coll == Coll::Broadcast && next(2) == 1;
            let calls: Vec<Call> = (0..n)
                .map(|me| {
                    let mut c = call_of(coll, me, n, block, in_place, span);
                    c.chunk = chunk;
                    if chain {
                        c.mode = Mode::Chain;
                    }
                    // Spreading is each rank's own choice.
                    c.spread = next(2) == 1;
                    c
                })
                .collect();
            // Inputs: what each rank holds before the call.
            let value = |r: usize, i: usize| (r * 37 + i * 11 + round * 5 + 1) as u8;
            let in_len = match coll {
                Coll::ReduceScatter | Coll::AllToAll | Coll::Scatter => n * block,
                _ => block,
            };
            let halves: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
            // What each rank's output region held (a gather's non-roots must not write it).
            let before: Vec<Vec<u8>> = w
                .ranks
                .iter()
                .map(|r| {
                    (0..n * block)
                        .map(|i| r.mem[span + i].load(Relaxed))
                        .collect()
                })
                .collect();
            w.fill_and_call(&calls, in_len, value, &halves);
            let what = format!("{} n={n} round={round} block={block} chunk={chunk} in_place={in_place} chain={chain} halves={halves:?}", coll.name());
            for (me, rank) in w.ranks.iter().enumerate() {
                let out = |i: usize| rank.mem[span + i].load(Relaxed);
                match coll {
                    Coll::AllReduce => {
                        for i in 0..block {
                            let want = (0..n).fold(0u8, |a, r| a.wrapping_add(value(r, i)));
                            assert_eq!(out(i), want, "{what} rank {me} byte {i}");
                        }
                    }
                    Coll::ReduceScatter => {
                        let at = if in_place { me * block } else { 0 };
                        for i in 0..block {
                            let want =
                                (0..n).fold(0u8, |a, r| a.wrapping_add(value(r, me * block + i)));
                            assert_eq!(out(at + i), want, "{what} rank {me} byte {i}");
                        }
                    }
                    Coll::AllGather => {
                        for r in 0..n {
                            for i in 0..block {
                                assert_eq!(
                                    out(r * block + i),
                                    value(r, i),
                                    "{what} rank {me} from {r}"
                                );
                            }
                        }
                    }
                    Coll::AllToAll => {
                        for r in 0..n {
                            for i in 0..block {
                                assert_eq!(
                                    out(r * block + i),
                                    value(r, me * block + i),
                                    "{what} rank {me} from {r}"
                                );
                            }
                        }
                    }
                    // The root is the last rank; the others' buffers hold nothing to check.
                    Coll::Gather if me == n - 1 => {
                        for r in 0..n {
                            for i in 0..block {
                                assert_eq!(out(r * block + i), value(r, i), "{what} root from {r}");
                            }
                        }
                    }
                    Coll::Gather if !in_place => {
                        for (i, &b) in before[me].iter().enumerate() {
                            assert_eq!(out(i), b, "{what} non-root {me} wrote byte {i}");
                        }
                    }
                    Coll::Gather => {}
                    Coll::Scatter => {
                        let at = if in_place && me == n - 1 {
                            me * block
                        } else {
                            0
                        };
                        for i in 0..block {
                            let want = value(n - 1, me * block + i);
                            assert_eq!(out(at + i), want, "{what} rank {me} byte {i}");
                        }
                    }
                    _ => {
                        for i in 0..block {
                            assert_eq!(out(i), value(n - 1, i), "{what} rank {me} byte {i}");
                        }
                    }
                }
            }
        }
    }
}

/// A two-shot all_reduce as ce composes it above 2 ranks (`select::two_shot_parts`):
/// a reduce_scatter of `block / n` from the input into this rank's part of the
/// output (NCCL's in-place reduce_scatter when the all_reduce is in place), then
/// an all_gather of that part in place, one kernel after the other on each rank.
/// Every rank ends with the whole sum, in and out of place, rings lapped.
#[test]
fn two_shot_all_reduce_is_a_reduce_scatter_then_an_all_gather_in_place() {
    let mut rng = crate::testing::Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut next = |m: u64| rng.below(m);
    for n in 3..=5 {
        let (slot, span) = (32, 4096);
        let w = world(n, slot, 2 * span);
        for round in 0..8 {
            let in_place = round % 2 == 1;
            let part = 1 + next(30) as usize;
            let block = n * part;
            let chunk = [16, 32][next(2) as usize];
            let value = |r: usize, i: usize| (r * 29 + i * 7 + round * 3 + 1) as u8;
            let send = if in_place { span } else { 0 };
            for r in 0..n {
                for i in 0..block {
                    w.ranks[r].mem[send + i].store(value(r, i), Relaxed);
                }
            }
            let parts = |coll: Coll| -> Vec<Call> {
                (0..n)
                    .map(|me| {
                        let mine = span + me * part;
                        let mut c = match coll {
                            Coll::ReduceScatter if in_place => {
                                call_at(coll, me, n, part, true, span, span)
                            }
                            Coll::ReduceScatter => call_at(coll, me, n, part, false, 0, mine),
                            _ => call_at(coll, me, n, part, true, mine, span),
                        };
                        c.chunk = chunk;
                        c.spread = (me + round) % 2 == 0;
                        c
                    })
                    .collect()
            };
            let halves: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
            w.call(&parts(Coll::ReduceScatter), &halves);
            w.call(&parts(Coll::AllGather), &halves);
            for (me, rank) in w.ranks.iter().enumerate() {
                for i in 0..block {
                    let want = (0..n).fold(0u8, |a, r| a.wrapping_add(value(r, i)));
                    assert_eq!(
                        rank.mem[span + i].load(Relaxed),
                        want,
                        "n={n} round={round} in_place={in_place} part={part} rank {me} byte {i}"
                    );
                }
            }
        }
    }
}

/// A broadcast above 2 ranks as ce composes it for large blocks: a scatter
/// (the Simple kernel's broadcast mode with a send stride: the root sends
/// part `q` of its input to rank `q`, each rank writes it at its place in the
/// output, the root keeps its own) then an all_gather in place. Every rank
/// ends with the root's whole input, the root in and out of place.
#[test]
fn scatter_then_all_gather_is_a_broadcast() {
    let mut rng = crate::testing::Rng::new(0x5851_f42d_4c95_7f2d);
    let mut next = |m: u64| rng.below(m);
    for n in 3..=5 {
        let (slot, span) = (32, 4096);
        let w = world(n, slot, 2 * span);
        for round in 0..8 {
            let root = (round + n) % n;
            let in_place = round % 2 == 1;
            let part = 1 + next(30) as usize;
            let block = n * part;
            let chunk = [16, 32][next(2) as usize];
            let value = |i: usize| (i * 13 + round * 7 + 3) as u8;
            let send = if in_place { span } else { 0 };
            for i in 0..block {
                w.ranks[root].mem[send + i].store(value(i), Relaxed);
            }
            let scatter: Vec<Call> = (0..n)
                .map(|me| Call {
                    mode: Mode::Broadcast,
                    root,
                    seg: part,
                    chunk,
                    input: if me == root { send } else { 0 },
                    output: span + me * part,
                    send_stride: part,
                    out_stride: 0,
                    overlap: false,
                    spread: (me + round) % 2 == 1,
                    win: [0, 0],
                    scratch: None,
                })
                .collect();
            let gather: Vec<Call> = (0..n)
                .map(|me| {
                    let mut c = call_at(Coll::AllGather, me, n, part, true, span + me * part, span);
                    c.chunk = chunk;
                    c.spread = (me + round) % 2 == 0;
                    c
                })
                .collect();
            let halves: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
            w.call(&scatter, &halves);
            w.call(&gather, &halves);
            for (me, rank) in w.ranks.iter().enumerate() {
                for i in 0..block {
                    assert_eq!(
                        rank.mem[span + i].load(Relaxed),
                        value(i),
                        "n={n} round={round} root={root} in_place={in_place} part={part} rank {me} byte {i}"
                    );
                }
            }
        }
    }
}

/// A broadcast passed along the ranks ([`super::MODE_CHAIN`]) from every
/// root, in and out of place, on 1–5 ranks with rings of a few slots lapped
/// many times (segments of up to 40 chunks), interleaved with plain
/// broadcasts and all_gathers on the same rings: every rank ends with the
/// root's bytes, no wait outlives the protocol, and the counters agree
/// (the later calls would hang or read stale slots otherwise).
#[test]
fn chain_broadcast_from_every_root_lapping_small_rings() {
    let mut rng = crate::testing::Rng::new(0x1405_7b7e_f767_814f);
    let mut next = |m: u64| rng.below(m);
    for n in 1..=5 {
        let (slot, span) = (32, 4096);
        let w = world(n, slot, 2 * span);
        for round in 0..15 {
            let root = next(n as u64) as usize;
            let in_place = round % 3 == 1;
            let block = 1 + next(600) as usize;
            let chunk = [16, 32][next(2) as usize];
            let coll = if round % 5 == 4 {
                Coll::AllGather
            } else {
                Coll::Broadcast
            };
            let chain = coll == Coll::Broadcast && round % 5 != 2;
            let block = if coll == Coll::AllGather {
                block.min(span / n)
            } else {
                block
            };
            let calls: Vec<Call> = (0..n)
                .map(|me| {
                    let mut c = call_of(coll, me, n, block, in_place, span);
                    c.chunk = chunk;
                    c.root = root;
                    if coll == Coll::Broadcast && me != root {
                        // Only the root's input is read.
                        c.input = if in_place { span } else { 0 };
                    }
                    if chain {
                        c.mode = Mode::Chain;
                    }
                    c.spread = next(2) == 1;
                    c
                })
                .collect();
            let value = |r: usize, i: usize| (r * 29 + i * 7 + round * 3 + 5) as u8;
            let halves: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
            w.fill_and_call(&calls, block, value, &halves);
            let what = format!(
                "{} n={n} round={round} root={root} block={block} chunk={chunk} in_place={in_place} chain={chain} halves={halves:?}",
                coll.name()
            );
            for (me, rank) in w.ranks.iter().enumerate() {
                let out = |i: usize| rank.mem[span + i].load(Relaxed);
                if coll == Coll::Broadcast {
                    for i in 0..block {
                        assert_eq!(out(i), value(root, i), "{what} rank {me} byte {i}");
                    }
                } else {
                    for r in 0..n {
                        for i in 0..block {
                            assert_eq!(
                                out(r * block + i),
                                value(r, i),
                                "{what} rank {me} from {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The two-shot all_reduce in one kernel ([`super::MODE_TWO_SHOT`]) on 3–5
/// ranks, in and out of place, with parts of 1–13 chunks (up to 26 ring
/// positions per pair: six laps of K = 4 slots, so the folded parts' credits
/// wait on this call's own earlier chunks), many calls on one world
/// interleaved with plain all_reduces: every rank ends with the whole sum,
/// no wait hangs, the counters stay in step, in place too, with no marks.
#[test]
fn two_shot_in_one_kernel_sums_every_part() {
    let mut rng = crate::testing::Rng::new(0x2f69_3a1b_64c7_1e0d);
    let mut next = |m: u64| rng.below(m);
    for n in 3..=5 {
        let (slot, span) = (64, 4096);
        let w = world(n, slot, 2 * span);
        for round in 0..24 {
            let in_place = round % 2 == 1;
            let fused = round % 4 != 3;
            let part = 1 + next(400) as usize;
            let block = n * part;
            let chunk = 32; // up to 13 chunks a part: calls lap the K = 4 slots
            let calls: Vec<Call> = (0..n)
                .map(|me| {
                    let mut c = call_of(Coll::AllReduce, me, n, block, in_place, span);
                    c.chunk = chunk;
                    if fused {
                        c.mode = Mode::TwoShot;
                        c.seg = part;
                        c.send_stride = part;
                        c.out_stride = part;
                        // In place without marks: a peer's folded chunk
                        // of its part exists only once this rank's sender
                        // delivered that chunk of the part it overwrites.
                        c.overlap = false;
                    }
                    c.spread = next(2) == 1;
                    c
                })
                .collect();
            let value = |r: usize, i: usize| (r * 53 + i * 3 + round * 17 + 9) as u8;
            let halves: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
            w.fill_and_call(&calls, block, value, &halves);
            for (me, rank) in w.ranks.iter().enumerate() {
                for i in 0..block {
                    let want = (0..n).fold(0u8, |a, r| a.wrapping_add(value(r, i)));
                    assert_eq!(
                        rank.mem[span + i].load(Relaxed),
                        want,
                        "n={n} round={round} fused={fused} in_place={in_place} part={part} rank {me} byte {i}"
                    );
                }
            }
        }
    }
}

/// The direct modes ([`super::MODE_DIRECT_FOLD`], `_GATHER`, `_BROADCAST`)
/// on 1–5 ranks, in and out of place (an all_reduce in place through the
/// scratch), with grids that differ between ranks, interleaved with calls
/// of the ring modes on the same rings of a few slots: every result right,
/// no wait outlives the protocol, the counters in step (the two empty chunks
/// per pair and call lap the rings like any other), no error raised.
#[test]
fn direct_modes_beside_the_ring_modes_lapping_small_rings() {
    let mut rng = crate::testing::Rng::new(0x3c6e_f372_fe94_f82b);
    let mut next = |m: u64| rng.below(m);
    let colls = [Coll::AllReduce, Coll::AllGather, Coll::Broadcast];
    for n in 1..=5 {
        let (slot, span) = (32, 4096);
        let w = world(n, slot, 3 * span);
        for round in 0..30 {
            let coll = colls[round % colls.len()];
            let direct = round % 4 != 3;
            let in_place = round % 5 < 2;
            let block = 1 + next(90) as usize;
            let chunk = [16, 32][next(2) as usize];
            let calls: Vec<Call> = (0..n)
                .map(|me| {
                    let mut c = call_of(coll, me, n, block, in_place, span);
                    c.chunk = chunk;
                    if direct {
                        c.overlap = false;
                        c.mode = match coll {
                            Coll::AllReduce => Mode::DirectFold,
                            Coll::AllGather => Mode::DirectGather,
                            _ => Mode::DirectBroadcast,
                        };
                        if coll == Coll::AllReduce && in_place {
                            c.scratch = Some(2 * span);
                        }
                    }
                    c.spread = next(2) == 1;
                    c
                })
                .collect();
            let value = |r: usize, i: usize| (r * 41 + i * 13 + round * 7 + 2) as u8;
            let halves: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
            w.fill_and_call(&calls, block, value, &halves);
            let what = format!(
                "{} n={n} round={round} direct={direct} block={block} chunk={chunk} in_place={in_place} halves={halves:?}",
                coll.name()
            );
            for (me, rank) in w.ranks.iter().enumerate() {
                assert_eq!(rank.err.load(Relaxed), 0, "{what} rank {me}: an error");
                let out = |i: usize| rank.mem[span + i].load(Relaxed);
                for i in 0..block {
                    match coll {
                        Coll::AllReduce => {
                            let want = (0..n).fold(0u8, |a, r| a.wrapping_add(value(r, i)));
                            assert_eq!(out(i), want, "{what} rank {me} byte {i}");
                        }
                        Coll::AllGather => {
                            for r in 0..n {
                                assert_eq!(
                                    out(r * block + i),
                                    value(r, i),
                                    "{what} rank {me} from {r}"
                                );
                            }
                        }
                        _ => assert_eq!(out(i), value(n - 1, i), "{what} rank {me} byte {i}"),
                    }
                }
            }
        }
    }
}

/// Windows that are not symmetric for a call: rank 0 all_reduces in place
/// (its input at the receive offset), rank 1 out of place (its input
/// elsewhere), so rank 0 would read rank 1's output as its input. Both
/// ranks' blocks find the other's offsets in its first chunk, record the
/// peer (the kernel's `ERR_WINDOW`), write nothing and end; the same for an
/// all_gather whose receive buffers lie at different offsets.
#[test]
fn direct_modes_fail_on_windows_that_are_not_symmetric_naming_the_peer() {
    let (slot, span) = (32, 4096);
    for coll in [Coll::AllReduce, Coll::AllGather] {
        let w = world(2, slot, 3 * span);
        let calls: Vec<Call> = (0..2)
            .map(|me| {
                let mut c = match coll {
                    Coll::AllReduce => call_of(coll, me, 2, 40, me == 0, span),
                    // Rank 1's receive buffer 64 bytes further on.
                    _ => call_at(coll, me, 2, 40, false, 0, span + 64 * me),
                };
                c.chunk = 16;
                c.overlap = false;
                c.mode = if coll == Coll::AllReduce {
                    Mode::DirectFold
                } else {
                    Mode::DirectGather
                };
                c.scratch = (coll == Coll::AllReduce && me == 0).then_some(2 * span);
                c
            })
            .collect();
        for rank in &w.ranks {
            for i in 0..3 * span {
                rank.mem[i].store(0xee, Relaxed);
            }
        }
        w.call(&calls, &[2, 1]);
        for (me, rank) in w.ranks.iter().enumerate() {
            assert_eq!(
                rank.err.load(Relaxed),
                (1 - me) as u64 + 1,
                "{} rank {me} names rank {}",
                coll.name(),
                1 - me
            );
            assert!(
                (0..3 * span).all(|i| rank.mem[i].load(Relaxed) == 0xee),
                "{} rank {me}: memory written",
                coll.name()
            );
        }
    }
}
