//! The point-to-point kernel's protocol run on the CPU, as the Simple
//! kernel's model runs its own (and on its rings: heads, frees, counters):
//! every block of every rank a thread, per-peer messages in both formats —
//! chunks headed by (bytes, index) in the slot rings, LL lines (two halves,
//! each a data word and the flag) in line rings lapped by small limits — the
//! credits and counters carried from call to call, sends that finish a call
//! before their receive, and the size checks: a header that disagrees, and a
//! message in the other format than the receive's, both seen by the receiver
//! instead of read as data or waited for forever.

use super::super::simple::model::{wait, world, World, K};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One rank's LL part: per writer a ring of lines, and its words.
struct Lines {
    /// `[w][R]`, each line's halves `data | flag << 32`.
    ring: Vec<[AtomicU64; 2]>,
    /// Lines sent to each peer.
    sent: Vec<AtomicU64>,
    /// Lines received from each peer.
    got: Vec<AtomicU64>,
    /// `[r]`: lines of this rank's ring in `r`'s part that `r` consumed.
    credit: Vec<AtomicU64>,
    /// The model's own check, not the kernel's: `[w][R]`, one past the
    /// last line read at each place.
    read: Vec<AtomicU64>,
}

struct P2pWorld {
    w: Arc<World>,
    lines: Vec<Lines>,
    /// Lines per ring.
    ring: u64,
    /// The largest message sent as lines (0: none).
    ll_max: usize,
    /// Raised by a receive that found a mismatch: every wait gives up, as
    /// the kernel's abort word makes it.
    abort: AtomicBool,
    /// The chunk headers, `[rank][2 × slot index]` (bytes, chunk index).
    hdr: Vec<Vec<AtomicU64>>,
}

/// One rank's side of a kernel: per peer, what it sends (input offset, bytes)
/// and receives (output offset, bytes), as [`super::P2pArgs`] holds them.
#[derive(Clone, Debug, Default)]
struct P2pCall {
    send: Vec<Option<(usize, usize)>>,
    recv: Vec<Option<(usize, usize)>>,
}

fn flag(at: u64, ring: u64) -> u64 {
    1 + (at / ring) % 0xffff_ffff
}

fn put_line(line: &[AtomicU64; 2], v: u64, flag: u64) {
    line[0].store((v & 0xffff_ffff) | flag << 32, Release);
    line[1].store((v >> 32) | flag << 32, Release);
}

fn line_has(line: &[AtomicU64; 2], flag: u64) -> Option<u64> {
    let (a, b) = (line[0].load(Acquire), line[1].load(Acquire));
    (a >> 32 == flag && b >> 32 == flag).then_some((a & 0xffff_ffff) | (b & 0xffff_ffff) << 32)
}

impl P2pWorld {
    fn new(n: usize, slot: usize, mem: usize, ll_max: usize) -> Arc<P2pWorld> {
        let ring = super::ring_lines(ll_max) as u64;
        let words = |len: usize| (0..len).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Arc::new(P2pWorld {
            w: world(n, slot, mem),
            lines: (0..n)
                .map(|_| Lines {
                    ring: (0..n * ring as usize)
                        .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                        .collect(),
                    sent: words(n),
                    got: words(n),
                    credit: words(n),
                    read: words(n * ring as usize),
                })
                .collect(),
            ring,
            ll_max,
            abort: AtomicBool::new(false),
            hdr: (0..n).map(|_| words(2 * n * K as usize)).collect(),
        })
    }

    /// The side as the kernel's arguments have it: `(chunk, chunks, lines)`.
    fn side(&self, me: usize, peer: usize, bytes: usize) -> (usize, usize, usize) {
        let s = super::P2pSide::new(
            1,
            bytes,
            self.w.slot,
            if peer == me { 0 } else { self.ll_max },
        );
        (s.chunk as usize, s.chunks as usize, s.lines as usize)
    }

    /// Wait for `ready` (true) while watching `other` (the other format's
    /// sign: one more look at `ready`, then a mismatch); false on a mismatch
    /// (which raises the abort) or a raised abort.
    fn wait_either(&self, ready: impl Fn() -> bool, other: impl Fn() -> bool, what: &str) -> bool {
        let start = Instant::now();
        loop {
            if ready() {
                return true;
            }
            if self.abort.load(Acquire) {
                return false;
            }
            if other() {
                if ready() {
                    return true;
                }
                self.abort.store(true, Release);
                return false;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "waited 20 s for {what}: the protocol hangs"
            );
            std::thread::yield_now();
        }
    }

    /// Sending block `first` of `half`: the LL messages' lines `first, first +
    /// half, …` (after the ring's credit), the rank's own block, then the
    /// chunks `first, first + half, …` of each chunked message.
    fn sender(
        &self,
        me: usize,
        c: &P2pCall,
        first: usize,
        half: usize,
        sent: &[u64],
        lsent: &[u64],
    ) {
        let (w, n, r) = (&self.w, self.w.n, self.ring);
        let mine = &w.ranks[me];
        for j in 1..n {
            let q = (me + j) % n;
            let Some((input, bytes)) = c.send[q] else {
                continue;
            };
            let (_, _, lines) = self.side(me, q, bytes);
            if lines == 0 {
                continue;
            }
            let end = lsent[q] + lines as u64;
            if end > r {
                wait(&self.lines[me].credit[q], end - r, "a line credit");
            }
            for i in (first..lines).step_by(half) {
                let at = lsent[q] + i as u64;
                // The header: the size, and the chunks sent to q before this message.
                let v = if i == 0 {
                    bytes as u64 | sent[q] << 32
                } else {
                    let lo = 8 * (i - 1);
                    (lo..(lo + 8).min(bytes)).fold(0u64, |v, k| {
                        v | (mine.mem[input + k].load(Relaxed) as u64) << (8 * (k - lo))
                    })
                };
                let place = me * r as usize + (at % r) as usize;
                let line = &self.lines[q].ring[place];
                let before = line[0].load(Acquire) >> 32;
                assert!(
                    before == 0 && at < r || before == flag(at - r, r),
                    "line {at} of {me}→{q} overwrites a line not yet lapped"
                );
                assert!(
                    at < r || self.lines[q].read[place].load(Acquire) > at - r,
                    "line {at} of {me}→{q} overwrites line {} before {q} read it",
                    at - r
                );
                put_line(line, v, flag(at, r));
            }
        }
        if let (Some((input, bytes)), Some((output, _))) = (c.send[me], c.recv[me]) {
            let (chunk, m, _) = self.side(me, me, bytes);
            for ch in (first..m).step_by(half) {
                let lo = ch * chunk;
                for i in lo..(lo + chunk).min(bytes) {
                    let b = mine.mem[input + i].load(Relaxed);
                    mine.mem[output + i].store(b, Relaxed);
                }
            }
        }
        for j in 1..n {
            let q = (me + j) % n;
            let Some((input, bytes)) = c.send[q] else {
                continue;
            };
            let (chunk, m, _) = self.side(me, q, bytes);
            for ch in (first..m).step_by(half) {
                let lo = ch * chunk;
                let len = chunk.min(bytes - lo.min(bytes));
                let g = sent[q] + ch as u64;
                let k = g % K;
                if g >= K {
                    wait(
                        &mine.frees[q * K as usize + k as usize],
                        g + 1 - K,
                        "a p2p free",
                    );
                }
                let peer = &w.ranks[q];
                let head = &peer.heads[me * K as usize + k as usize];
                assert_eq!(
                    head.load(Acquire),
                    (g + 1).saturating_sub(K),
                    "a slot lapped"
                );
                let slot = me * K as usize + k as usize;
                self.hdr[q][2 * slot].store(bytes as u64, Relaxed);
                // With the lines sent to q before this message.
                self.hdr[q][2 * slot + 1].store(ch as u64 | lsent[q] << 32, Relaxed);
                for i in 0..len {
                    let b = mine.mem[input + lo + i].load(Relaxed);
                    peer.data[slot * w.slot + i].store(b, Relaxed);
                }
                head.store(g + 1, Release);
            }
        }
    }

    /// Receiving block `first` of `half`, with the chunks and lines received
    /// from each rank before this call: the LL messages' lines (the header
    /// line watching the chunk ring), the credits once every receiving block
    /// is done with its lines, then the chunks (each wait watching the line
    /// ring); false on a mismatch or abort.
    fn receiver(
        &self,
        me: usize,
        c: &P2pCall,
        first: usize,
        half: usize,
        (recvd, lgot): (&[u64], &[u64]),
        lines_done: &AtomicUsize,
    ) -> bool {
        let (w, n, r) = (&self.w, self.w.n, self.ring);
        let mine = &w.ranks[me];
        // Receivers start late, so a send that must wait for one is caught
        // if it does not.
        std::thread::sleep(Duration::from_millis(2));
        let head_in = |from: usize, g: u64| {
            mine.heads[from * K as usize + (g % K) as usize].load(Acquire) > g
        };
        let line_at = |from: usize, at: u64| {
            &self.lines[me].ring[from * r as usize + (at % r.max(1)) as usize]
        };
        let header_in = |from: usize| {
            r > 0 && line_has(line_at(from, lgot[from]), flag(lgot[from], r)).is_some()
        };
        let lines_ok = (|| {
            for j in 1..n {
                let from = (me + n - j) % n;
                let Some((output, bytes)) = c.recv[from] else {
                    continue;
                };
                let (_, _, lines) = self.side(me, from, bytes);
                for i in (first..lines).step_by(half) {
                    let at = lgot[from] + i as u64;
                    let line = line_at(from, at);
                    let ready = || line_has(line, flag(at, r)).is_some();
                    let ok = if i == 0 {
                        self.wait_either(ready, || head_in(from, recvd[from]), "an LL header")
                    } else {
                        self.wait_either(ready, || false, "an LL line")
                    };
                    if !ok {
                        return false;
                    }
                    let v = line_has(line, flag(at, r)).expect("seen");
                    let place = from * r as usize + (at % r) as usize;
                    self.lines[me].read[place].store(at + 1, Release);
                    if i == 0 {
                        // Its size, and the chunks sent before it: those received so far.
                        if v != (bytes as u64 | recvd[from] << 32) {
                            self.abort.store(true, Release);
                            return false;
                        }
                        continue;
                    }
                    let lo = 8 * (i - 1);
                    for k in lo..(lo + 8).min(bytes) {
                        mine.mem[output + k].store((v >> (8 * (k - lo))) as u8, Relaxed);
                    }
                }
            }
            true
        })();
        // The last receiving block done with its lines gives the senders
        // their ring space back (the kernel's fourth LL word), before its
        // chunks, whether or not its lines matched.
        if lines_done.fetch_add(1, AcqRel) + 1 == half {
            for from in (0..n).filter(|&f| f != me) {
                if let Some((_, bytes)) = c.recv[from] {
                    let (_, _, l) = self.side(me, from, bytes);
                    if l > 0 {
                        self.lines[from].credit[me].store(lgot[from] + l as u64, Release);
                    }
                }
            }
        }
        if !lines_ok {
            return false;
        }
        for j in 1..n {
            let from = (me + n - j) % n;
            let Some((output, bytes)) = c.recv[from] else {
                continue;
            };
            let (chunk, m, _) = self.side(me, from, bytes);
            for ch in (first..m).step_by(half) {
                let lo = ch * chunk;
                let len = chunk.min(bytes - lo.min(bytes));
                let g = recvd[from] + ch as u64;
                let k = (g % K) as usize;
                if !self.wait_either(|| head_in(from, g), || header_in(from), "a p2p head") {
                    return false;
                }
                let slot = from * K as usize + k;
                if self.hdr[me][2 * slot].load(Relaxed) != bytes as u64
                    || self.hdr[me][2 * slot + 1].load(Relaxed) != (ch as u64 | lgot[from] << 32)
                {
                    self.abort.store(true, Release);
                    return false;
                }
                for i in 0..len {
                    let b = mine.data[slot * w.slot + i].load(Relaxed);
                    mine.mem[output + lo + i].store(b, Relaxed);
                }
                // Release here; the CUDA free is a plain store after the block's
                // barrier (as the Simple kernel's, `simple/model.rs`).
                w.ranks[from].frees[me * K as usize + k].store(g + 1, Release);
            }
        }
        true
    }

    /// Rank `me`'s counters after its kernel: what the kernel's last block
    /// does.
    fn finish(&self, me: usize, c: &P2pCall) {
        for q in (0..self.w.n).filter(|&q| q != me) {
            let add = |side: Option<(usize, usize)>| {
                side.map_or((0, 0), |(_, b)| {
                    let (_, m, l) = self.side(me, q, b);
                    (m as u64, l as u64)
                })
            };
            let (sm, sl) = add(c.send[q]);
            let (rm, rl) = add(c.recv[q]);
            self.w.ranks[me].sent[q].fetch_add(sm, AcqRel);
            self.w.ranks[me].recvd[q].fetch_add(rm, AcqRel);
            self.lines[me].sent[q].fetch_add(sl, AcqRel);
            self.lines[me].got[q].fetch_add(rl, AcqRel);
        }
    }

    /// Every rank's kernel at once (ranks with nothing to do too); whether
    /// every receive matched. Each rank's credits advance when its receiving
    /// blocks are done with their lines and its counters when its own last
    /// block ends, as in the kernel, so a send may wait for its peer's kernel
    /// of the same call.
    fn call(self: &Arc<Self>, calls: &[P2pCall], halves: &[usize]) -> bool {
        let n = self.w.n;
        let load = |v: &[AtomicU64]| v.iter().map(|a| a.load(Acquire)).collect::<Vec<u64>>();
        let mut threads = Vec::new();
        for me in 0..n {
            let (sent, recvd) = (load(&self.w.ranks[me].sent), load(&self.w.ranks[me].recvd));
            let (lsent, lgot) = (load(&self.lines[me].sent), load(&self.lines[me].got));
            let half = halves[me];
            let done = Arc::new(AtomicUsize::new(0));
            let lines_done = Arc::new(AtomicUsize::new(0));
            for b in 0..2 * half {
                let (p, c, done) = (self.clone(), calls[me].clone(), done.clone());
                let lines_done = lines_done.clone();
                let (sent, recvd, lsent, lgot) =
                    (sent.clone(), recvd.clone(), lsent.clone(), lgot.clone());
                threads.push(std::thread::spawn(move || {
                    let ok = if b < half {
                        p.sender(me, &c, b, half, &sent, &lsent);
                        true
                    } else {
                        p.receiver(me, &c, b - half, half, (&recvd, &lgot), &lines_done)
                    };
                    if done.fetch_add(1, AcqRel) + 1 == 2 * half {
                        p.finish(me, &c);
                    }
                    ok
                }));
            }
        }
        // Every block joined, not only up to the first that failed.
        let ok: Vec<bool> = threads
            .into_iter()
            .map(|t| t.join().expect("a block panicked"))
            .collect();
        ok.into_iter().all(|ok| ok)
    }
}

/// Random groups on 2–5 ranks, each rank sending to a random subset of ranks
/// (itself included) messages of 0–200 bytes, both formats mixed (limits of
/// 0, 24 and 64 bytes: line rings of 8 and 18 lines, lapped again and again).
/// Many sends finish a call or two before their receive is posted (queued
/// per pair while both rings hold them), and one pair per call may send into
/// a ring that only its peer's kernel of the same call frees (the credit
/// arrives once that kernel's receiving blocks are done with their lines). Every received byte is checked, the
/// counters and credits carried from call to call (a slip hangs a later wait,
/// or trips the check that no line is overwritten before its lap is read).
#[test]
fn groups_in_both_formats_on_2_to_5_ranks() {
    let mut rng = crate::testing::Rng::new(0x1234_5678_9abc_def1);
    let mut next = |m: u64| rng.below(m);
    let (mut queued, mut tight, mut tight_lines) = (0, 0, 0);
    for n in 2..=5 {
        for ll_max in [0, 24, 64] {
            let (slot, span) = (48, 8192);
            let p = P2pWorld::new(n, slot, 2 * span, ll_max);
            let r = p.ring as usize;
            // Per pair, messages sent and not yet received: (bytes, round sent).
            let mut queue: Vec<Vec<VecDeque<(usize, usize)>>> = vec![vec![VecDeque::new(); n]; n];
            let rounds = 16;
            for round in 0..rounds {
                let value = |s: usize, d: usize, i: usize, t: usize| {
                    (s * 31 + d * 17 + i * 5 + t * 3) as u8
                };
                let mut calls = vec![
                    P2pCall {
                        send: vec![None; n],
                        recv: vec![None; n]
                    };
                    n
                ];
                let mut check: Vec<(usize, usize, usize, usize)> = Vec::new();
                let mut tight_left = true;
                for s in 0..n {
                    for d in 0..n {
                        let q = &mut queue[s][d];
                        // What this call's receive frees (none in some calls, so
                        // the queues grow), and what stays.
                        let last = round + 1 == rounds;
                        let head = if last || next(3) > 0 {
                            q.pop_front()
                        } else {
                            None
                        };
                        let in_ring = |q: &VecDeque<(usize, usize)>| {
                            q.iter().fold((0, 0), |(l, m), &(b, _)| {
                                let (_, bm, bl) = p.side(s, d, b);
                                (l + bl, m + bm)
                            })
                        };
                        let (head_l, head_m) = head.map_or((0, 0), |(b, _)| {
                            let (_, m, l) = p.side(s, d, b);
                            (l, m)
                        });
                        let (stay_l, stay_m) = in_ring(q);
                        if let Some((b, t)) = head {
                            calls[d].recv[s] = Some((span + s * 256, b));
                            check.push((s, d, b, t));
                        }
                        if next(4) == 0 {
                            continue;
                        }
                        // Half of them as lines where there are any.
                        let b = if ll_max > 0 && next(2) == 0 {
                            next(ll_max as u64 + 1) as usize
                        } else {
                            next(200) as usize
                        };
                        let (_, m, l) = p.side(s, d, b);
                        if head.is_none() && q.is_empty() && (s == d || last || next(2) > 0) {
                            // Received in this call.
                            calls[d].recv[s] = Some((span + s * 256, b));
                            check.push((s, d, b, round));
                        } else if s == d || last {
                            continue;
                        } else {
                            // Queued: it fits beside what stays (no wait), or,
                            // for one pair per call, once this call's receive
                            // freed the head (a wait for the peer's kernel end).
                            let fits =
                                stay_l + head_l + l <= r && stay_m + head_m + m <= K as usize;
                            let fits_after = stay_l + l <= r && stay_m + m <= K as usize;
                            if fits || (tight_left && fits_after && head.is_some()) {
                                if !fits {
                                    tight_left = false;
                                    tight += 1;
                                    tight_lines += (stay_l + head_l + l > r) as usize;
                                }
                                queued += 1;
                                q.push_back((b, round));
                            } else {
                                continue;
                            }
                        }
                        for i in 0..b {
                            p.w.ranks[s].mem[d * 256 + i].store(value(s, d, i, round), Relaxed);
                        }
                        calls[s].send[d] = Some((d * 256, b));
                    }
                }
                let halves: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
                assert!(
                    p.call(&calls, &halves),
                    "n={n} ll_max={ll_max} round={round}: a size check failed"
                );
                for (s, d, b, t) in check {
                    for i in 0..b {
                        assert_eq!(
                            p.w.ranks[d].mem[span + s * 256 + i].load(Relaxed),
                            value(s, d, i, t),
                            "n={n} ll_max={ll_max} round={round} {s}→{d} byte {i} of {b} (sent in round {t})"
                        );
                    }
                }
            }
        }
    }
    assert!(
        queued > 200 && tight > 20 && tight_lines >= 5,
        "{queued} queued, {tight} tight ({tight_lines} in lines)"
    );
}

/// A send that meets a receive of another size fails the receive, never
/// reads past the message or waits forever: in one format (a chunk's header,
/// a header line) and across the formats (a receive waiting for lines sees a
/// chunk's head, one waiting for a chunk sees a header line).
#[test]
fn size_mismatches_are_caught_in_and_across_formats() {
    // Lines up to 48 bytes; (sent, received) bytes.
    for (sent, received, what) in [
        (40, 80, "lines sent, chunks received"),
        (80, 40, "chunks sent, lines received"),
        (40, 16, "lines both ways"),
        (80, 96, "chunks both ways"),
    ] {
        let p = P2pWorld::new(2, 48, 1024, 48);
        let calls = vec![
            P2pCall {
                send: vec![None, Some((0, sent))],
                recv: vec![None, None],
            },
            P2pCall {
                send: vec![None, None],
                recv: vec![Some((512, received)), None],
            },
        ];
        assert!(!p.call(&calls, &[1, 2]), "{what}: unseen");
        assert!(p.abort.load(Acquire), "{what}: no abort raised");
    }
}

/// Messages of the two formats taken in another order than sent: rank 0's
/// sends finish before rank 1 receives (lines X then chunks Y, or chunks Y
/// then lines X), and rank 1 posts the receives the other way round. Each
/// receive finds a header of its own size at once; the counts in the headers
/// (chunks sent before a line message, lines before a chunk message) fail it
/// instead of swapping the messages. Posted in the sent order, both arrive.
#[test]
fn messages_of_both_formats_taken_out_of_order_are_caught() {
    // Lines up to 48 bytes: X (40 B) as lines, Y (80 B) as 3 chunks of 32.
    let (x, y) = (40, 80);
    for lines_first in [true, false] {
        for swapped in [true, false] {
            let p = P2pWorld::new(2, 48, 1024, 48);
            let send = |bytes: usize| {
                vec![
                    P2pCall {
                        send: vec![None, Some((0, bytes))],
                        recv: vec![None, None],
                    },
                    P2pCall {
                        send: vec![None, None],
                        recv: vec![None, None],
                    },
                ]
            };
            let recv = |bytes: usize| {
                vec![
                    P2pCall {
                        send: vec![None, None],
                        recv: vec![None, None],
                    },
                    P2pCall {
                        send: vec![None, None],
                        recv: vec![Some((512, bytes)), None],
                    },
                ]
            };
            let order = if lines_first { [x, y] } else { [y, x] };
            for (k, &b) in order.iter().enumerate() {
                for i in 0..b {
                    p.w.ranks[0].mem[i].store((k * 100 + i) as u8, Relaxed);
                }
                assert!(p.call(&send(b), &[1, 1]), "sending {b}");
            }
            let what = format!("lines first: {lines_first}, taken swapped: {swapped}");
            if swapped {
                assert!(!p.call(&recv(order[1]), &[1, 2]), "{what}: swapped unseen");
                assert!(p.abort.load(Acquire), "{what}");
            } else {
                for (k, &b) in order.iter().enumerate() {
                    assert!(p.call(&recv(b), &[1, 2]), "{what}: receiving {b}");
                    for i in 0..b {
                        assert_eq!(
                            p.w.ranks[1].mem[512 + i].load(Relaxed),
                            (k * 100 + i) as u8,
                            "{what}"
                        );
                    }
                }
            }
        }
    }
}

/// Both ranks send ahead until their rings are full, then each receives one
/// message and sends another in the same call: that send needs the ring
/// space its peer's receive of the same call frees, so the credit must come
/// back once the peer's receiving blocks are done with their lines, not at
/// the end of the peer's kernel (which holds a send waiting the same way).
/// Then the last two messages each way, every byte checked.
#[test]
fn credits_come_back_before_the_receivers_kernel_ends() {
    // Lines up to 48 bytes: 7 lines a message, rings of 14 lines.
    let b = 48;
    for halves in [[1, 1], [2, 3], [3, 1]] {
        let p = P2pWorld::new(2, 48, 4096, b);
        assert_eq!(p.ring, 14);
        let value = |s: usize, m: usize, i: usize| (s * 71 + m * 13 + i) as u8;
        // Message m of rank s sits at s's input m × 64, lands at the peer's 1024 + m × 64.
        for s in 0..2 {
            for m in 0..3 {
                for i in 0..b {
                    p.w.ranks[s].mem[m * 64 + i].store(value(s, m, i), Relaxed);
                }
            }
        }
        let call = |send: Option<usize>, recv: Option<usize>| {
            (0..2)
                .map(|s| {
                    let q = 1 - s;
                    let mut c = P2pCall {
                        send: vec![None, None],
                        recv: vec![None, None],
                    };
                    c.send[q] = send.map(|m| (m * 64, b));
                    c.recv[q] = recv.map(|m| (1024 + m * 64, b));
                    c
                })
                .collect::<Vec<_>>()
        };
        let steps = [
            (Some(0), None),
            (Some(1), None),
            (Some(2), Some(0)),
            (None, Some(1)),
            (None, Some(2)),
        ];
        for (k, (send, recv)) in steps.into_iter().enumerate() {
            assert!(p.call(&call(send, recv), &halves), "{halves:?} call {k}");
        }
        for d in 0..2 {
            for m in 0..3 {
                for i in 0..b {
                    assert_eq!(
                        p.w.ranks[d].mem[1024 + m * 64 + i].load(Relaxed),
                        value(1 - d, m, i),
                        "{halves:?}: rank {d}, message {m}, byte {i}"
                    );
                }
            }
        }
    }
}
