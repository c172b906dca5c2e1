//! Simulated ranks executing what ce issues (test only).
//!
//! Every rank gets the program its stream would run — per collective: the
//! user's fill of its buffers, the barriers' memory operations from
//! [`Sequencer`], the copies from [`plan`], then the user's read of the
//! result — and a scheduler interleaves the ranks at random (a small
//! deterministic PRNG): each rank runs its operations in order, a wait runs
//! only once its condition holds, a copy moves labels between simulated
//! buffers. The checks:
//!
//! * every schedule completes (a rank that can never run again is a deadlock);
//! * a wait passes only when the peer really wrote that barrier (no barrier
//!   is passed on a stale value);
//! * a copy into rank `r`'s buffer happens only while `r` is inside that
//!   collective (after its fill, before it passed the last barrier);
//! * when a rank passed a collective's last barrier its receive buffer holds
//!   exactly NCCL's result, and every byte that changed was written exactly
//!   once (bytes already in place: never).
//!
//! Mutated programs (padding, resets, copies removed or moved) must fail, so
//! the checks are known to bite.

use crate::plan::{self, Batching, Push, Shape};
use crate::sync::{Array, MemOp, Mode, Sequencer, Step};
use crate::watch::{self, Expect, Snapshot};
use ferrocx_sdk::collective::Coll;

/// xorshift64*: deterministic, good enough to shuffle schedules.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What a simulated byte holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    /// Whatever the user left there.
    Junk { inst: usize, rank: usize, at: usize },
    /// Byte `byte` of block `blk` of rank `rank`'s input.
    Input {
        inst: usize,
        rank: usize,
        blk: usize,
        byte: usize,
    },
}

/// One collective call (the same on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    coll: Coll,
    root: usize,
    in_place: bool,
    /// Staged through the scratch buffers (pulls; see plan::stage).
    staged: bool,
}

#[derive(Debug, Clone)]
enum Instr {
    /// The user writes this rank's buffers for collective `inst`.
    Fill(usize),
    /// The stream reaches collective `inst`.
    Enter(usize),
    /// One barrier operation; `ord` counts the rank's barriers of `mode`.
    Op { op: MemOp, mode: Mode, ord: u64 },
    /// One copy of collective `inst`.
    Copy { inst: usize, push: Push },
    /// The stream passed the last barrier of `inst`.
    Leave(usize),
    /// The user reads the result of `inst`.
    Check(usize),
}

/// Builds every rank's program.
struct Builder {
    n: usize,
    block: usize,
    how: Batching,
    base: u32,
    seqs: Vec<Sequencer>,
    progs: Vec<Vec<Instr>>,
    calls: Vec<Call>,
    ords: Vec<[u64; 2]>,
    /// Per rank, per collective: its eager barriers, as the watchdog tracks them.
    expects: Vec<Vec<Vec<Expect>>>,
}

/// Changes a rank's steps before they run: (rank, batches every rank issues, steps).
type Mutate<'a> = &'a dyn Fn(usize, usize, &mut Vec<Step>);

fn keep(_: usize, _: usize, _: &mut Vec<Step>) {}

impl Builder {
    /// `base`: what every eager flag holds at the start (values are base + 1, …).
    fn new(n: usize, block: usize, how: Batching, base: u32) -> Self {
        Builder {
            n,
            block,
            how,
            base,
            seqs: (0..n).map(|r| Sequencer::with_base(r, n, base)).collect(),
            progs: vec![Vec::new(); n],
            calls: Vec::new(),
            ords: vec![[0; 2]; n],
            expects: vec![Vec::new(); n],
        }
    }

    fn shape(&self, c: &Call, rank: usize) -> Shape {
        Shape {
            coll: c.coll,
            nranks: self.n,
            rank,
            root: c.root,
            block: self.block,
            in_place: c.in_place,
            elem: 1,
            staged: c.staged,
            one_shot: false,
        }
    }

    fn steps(&mut self, c: &Call, rank: usize, mode: Mode, mutate: Mutate<'_>) -> Vec<Step> {
        let shape = self.shape(c, rank);
        let mut steps = self.seqs[rank].reduction(mode, plan::parts(&shape, &self.how));
        mutate(rank, plan::rounds(&shape, &self.how), &mut steps);
        steps
    }

    fn lower(&mut self, rank: usize, inst: usize, steps: &[Step], mode: Mode) {
        let m = mode as usize;
        let mut prog = vec![Instr::Fill(inst), Instr::Enter(inst)];
        let mut expects = Vec::new();
        for s in steps {
            match s {
                Step::Sync(b) => {
                    let ord = self.ords[rank][m];
                    self.ords[rank][m] += 1;
                    if mode == Mode::Eager {
                        expects.push(Expect::of(b));
                    }
                    prog.extend(b.ops.iter().map(|&op| Instr::Op { op, mode, ord }));
                }
                Step::Copies(v) => prog.extend(v.iter().map(|&push| Instr::Copy { inst, push })),
                // The sim runs the copy collectives (plan::COLLS); reductions are
                // checked by plan's tests (same barriers, no cross-rank hazard).
                Step::Reduce(_) => unreachable!("the sim runs no reduction"),
            }
        }
        prog.extend([Instr::Leave(inst), Instr::Check(inst)]);
        self.progs[rank].extend(prog);
        self.expects[rank].push(expects);
    }

    /// One eager collective.
    fn eager(&mut self, call: Call, mutate: Mutate<'_>) {
        let inst = self.calls.len();
        self.calls.push(call);
        for r in 0..self.n {
            let steps = self.steps(&call, r, Mode::Eager, mutate);
            self.lower(r, inst, &steps, Mode::Eager);
        }
    }

    /// `calls` captured into one graph, replayed `replays` times (new inputs each time).
    fn graph(&mut self, calls: &[Call], replays: usize, mutate: Mutate<'_>) {
        let captured: Vec<Vec<Vec<Step>>> = (0..self.n)
            .map(|r| {
                calls
                    .iter()
                    .map(|c| self.steps(c, r, Mode::Graph, mutate))
                    .collect()
            })
            .collect();
        for _ in 0..replays {
            for (i, c) in calls.iter().enumerate() {
                let inst = self.calls.len();
                self.calls.push(*c);
                for (r, cap) in captured.iter().enumerate() {
                    self.lower(r, inst, &cap[i], Mode::Graph);
                }
            }
        }
    }

    fn sim(self) -> Sim {
        let n = self.n;
        let bytes = n * self.block;
        let nothing = Label::Junk {
            inst: 0,
            rank: 0,
            at: 0,
        };
        let junk = vec![vec![nothing; bytes]; n];
        Sim {
            n,
            block: self.block,
            calls: self.calls,
            progs: self.progs,
            expects: self.expects,
            pc: vec![0; n],
            flags: vec![
                (0..4)
                    .map(|a| vec![if a < 2 { self.base } else { 0 }; n])
                    .collect();
                n
            ],
            sent: vec![vec![vec![0; n]; n]; 2],
            send: junk.clone(),
            recv: junk.clone(),
            scratch: junk,
            filled: vec![Vec::new(); n],
            writes: vec![vec![0; bytes]; n],
            inside: vec![None; n],
            lenient: false,
        }
    }
}

struct Sim {
    n: usize,
    block: usize,
    calls: Vec<Call>,
    progs: Vec<Vec<Instr>>,
    expects: Vec<Vec<Vec<Expect>>>,
    pc: Vec<usize>,
    /// flags[rank][array][slot]
    flags: Vec<Vec<Vec<u32>>>,
    /// sent[mode][writer][target]: barrier writes done (resets not counted).
    sent: Vec<Vec<Vec<u64>>>,
    send: Vec<Vec<Label>>,
    recv: Vec<Vec<Label>>,
    /// Each rank's scratch (staged collectives).
    scratch: Vec<Vec<Label>>,
    /// The receive buffer right after the last fill.
    filled: Vec<Vec<Label>>,
    /// Writes into each receive byte since the last fill.
    writes: Vec<Vec<u32>>,
    inside: Vec<Option<usize>>,
    /// After a watchdog release: data and barrier checks off, only progress counts.
    lenient: bool,
}

/// The inputs NCCL's layout puts in place (as the core's tests fill them).
fn fill(c: &Call, inst: usize, me: usize, n: usize, b: usize) -> (Vec<Label>, Vec<Label>) {
    let junk = |off: usize| {
        move |at: usize| Label::Junk {
            inst,
            rank: me,
            at: off + at,
        }
    };
    let mut recv: Vec<Label> = (0..n * b).map(junk(0)).collect();
    let mut send: Vec<Label> = (0..n * b).map(junk(1 << 20)).collect();
    let buf = if c.in_place { &mut recv } else { &mut send };
    let mut put = |at: usize, blk: usize| {
        for byte in 0..b {
            buf[at + byte] = Label::Input {
                inst,
                rank: me,
                blk,
                byte,
            };
        }
    };
    match c.coll {
        Coll::AllGather if c.in_place => put(me * b, 0),
        Coll::Gather if c.in_place && me == c.root => put(me * b, 0),
        Coll::AllGather | Coll::Gather => put(0, 0),
        Coll::Broadcast if me == c.root => put(0, 0),
        Coll::AllToAll => (0..n).for_each(|p| put(p * b, p)),
        Coll::Scatter if me == c.root => (0..n).for_each(|p| put(p * b, p)),
        _ => {}
    }
    (send, recv)
}

/// NCCL's result in the receive buffer, from what it held after the fill.
fn expected(c: &Call, inst: usize, me: usize, n: usize, b: usize, before: &[Label]) -> Vec<Label> {
    let mut out = before.to_vec();
    let mut put = |at: usize, rank: usize, blk: usize| {
        for byte in 0..b {
            out[at + byte] = Label::Input {
                inst,
                rank,
                blk,
                byte,
            };
        }
    };
    match c.coll {
        Coll::AllGather => (0..n).for_each(|r| put(r * b, r, 0)),
        Coll::Broadcast => put(0, c.root, 0),
        Coll::AllToAll => (0..n).for_each(|p| put(p * b, p, me)),
        Coll::Gather if me == c.root => (0..n).for_each(|r| put(r * b, r, 0)),
        Coll::Scatter => put(
            if c.in_place && me == c.root {
                me * b
            } else {
                0
            },
            c.root,
            me,
        ),
        _ => {}
    }
    out
}

/// How a run ended (violations are `Err`).
#[derive(Debug, PartialEq, Eq)]
enum End {
    Completed,
    /// No rank can run; these ranks have work left.
    Stuck(Vec<usize>),
}

impl Sim {
    fn runnable(&self, r: usize, stop: &[Option<usize>]) -> bool {
        let pc = self.pc[r];
        if pc >= self.progs[r].len() || stop[r].is_some_and(|s| pc >= s) {
            return false;
        }
        match &self.progs[r][pc] {
            Instr::Op {
                op:
                    MemOp::Wait {
                        array,
                        slot,
                        value,
                        cmp,
                    },
                ..
            } => cmp.holds(self.flags[r][array.index()][*slot], *value),
            _ => true,
        }
    }

    fn step(&mut self, me: usize) -> Result<(), String> {
        let (n, b) = (self.n, self.block);
        let instr = self.progs[me][self.pc[me]].clone();
        self.pc[me] += 1;
        match instr {
            Instr::Fill(inst) => {
                let (s, r) = fill(&self.calls[inst], inst, me, n, b);
                self.send[me] = s;
                self.filled[me] = r.clone();
                self.recv[me] = r;
                self.writes[me].iter_mut().for_each(|w| *w = 0);
            }
            Instr::Enter(inst) => self.inside[me] = Some(inst),
            Instr::Leave(inst) => {
                assert_eq!(
                    self.inside[me],
                    Some(inst),
                    "rank {me} left a collective it was not in"
                );
                self.inside[me] = None;
            }
            Instr::Op { op, mode, ord } => match op {
                MemOp::Write {
                    rank,
                    array,
                    slot,
                    value,
                } => {
                    self.flags[rank][array.index()][slot] = value;
                    if rank != me {
                        self.sent[mode as usize][me][rank] += 1;
                    }
                }
                // Notes are checked by the watchdog (notes.rs), not by the barriers.
                MemOp::Note { .. } => {}
                MemOp::Wait { slot, .. } => {
                    let done = self.sent[mode as usize][slot][me];
                    if done < ord + 1 && !self.lenient {
                        return Err(format!(
                            "rank {me} passed its {mode:?} barrier #{ord} waiting for rank {slot}, which had written only {done} barrier(s) to it"
                        ));
                    }
                }
            },
            Instr::Copy { inst, push } => {
                let to = push.dst_rank;
                if push.dst_buf == plan::Buf::Scratch && to != me {
                    return Err(format!("rank {me} wrote rank {to}'s scratch"));
                }
                if self.inside[to] != Some(inst) && !self.lenient {
                    return Err(format!(
                        "rank {me} copied into rank {to} for collective {inst} ({:?}) while rank {to} was at {:?}",
                        self.calls[inst], self.inside[to]
                    ));
                }
                let src = push.src_rank;
                if self.inside[src] != Some(inst) && !self.lenient {
                    return Err(format!(
                        "rank {me} read rank {src}'s buffer for collective {inst} ({:?}) while rank {src} was at {:?}",
                        self.calls[inst], self.inside[src]
                    ));
                }
                let from = match push.src_buf {
                    plan::Buf::Scratch => &self.scratch[src],
                    plan::Buf::Send if !self.calls[inst].in_place => &self.send[src],
                    _ => &self.recv[src],
                };
                let data = from[push.src..push.src + push.bytes].to_vec();
                for (i, l) in data.into_iter().enumerate() {
                    if push.dst_buf == plan::Buf::Scratch {
                        self.scratch[to][push.dst + i] = l;
                    } else {
                        self.recv[to][push.dst + i] = l;
                        self.writes[to][push.dst + i] += 1;
                    }
                }
            }
            Instr::Check(inst) => {
                if self.lenient {
                    return Ok(());
                }
                let c = self.calls[inst];
                let want = expected(&c, inst, me, n, b, &self.filled[me]);
                for (at, w) in want.iter().enumerate() {
                    let changed = *w != self.filled[me][at];
                    if self.recv[me][at] != *w || self.writes[me][at] != changed as u32 {
                        return Err(format!(
                            "collective {inst} {c:?} on {n} ranks: rank {me} byte {at} holds {:?} after {} write(s), expected {:?} after {}",
                            self.recv[me][at], self.writes[me][at], w, changed as u32
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Interleave the ranks (rank `r` stops before instruction `stop[r]`).
    /// Odd seeds run bursts: the last rank keeps going with probability 7/8.
    fn run(&mut self, seed: u64, stop: &[Option<usize>]) -> Result<End, String> {
        let mut rng = Rng::new(seed);
        let bursty = seed % 2 == 1;
        let mut last = 0;
        let mut ready = Vec::with_capacity(self.n);
        loop {
            ready.clear();
            ready.extend((0..self.n).filter(|&r| self.runnable(r, stop)));
            if ready.is_empty() {
                let left: Vec<usize> = (0..self.n)
                    .filter(|&r| self.pc[r] < self.progs[r].len())
                    .collect();
                return Ok(if left.is_empty() {
                    End::Completed
                } else {
                    End::Stuck(left)
                });
            }
            let r = if bursty && ready.contains(&last) && rng.below(8) != 0 {
                last
            } else {
                ready[rng.below(ready.len())]
            };
            last = r;
            self.step(r)?;
        }
    }
}

fn run(b: Builder, seed: u64) -> Result<End, String> {
    let n = b.n;
    b.sim().run(seed, &vec![None; n])
}

fn call(coll: Coll, root: usize, in_place: bool) -> Call {
    Call {
        coll,
        root,
        in_place,
        staged: false,
    }
}

/// Every call ce supports on `n` ranks: on windows, and staged.
fn every_call(n: usize) -> Vec<Call> {
    let mut v = Vec::new();
    for coll in plan::COLLS {
        for in_place in [false, true] {
            for staged in [false, true] {
                if !staged && plan::needs_staging(coll, in_place) {
                    continue;
                }
                let roots = if matches!(coll, Coll::Broadcast | Coll::Gather | Coll::Scatter) {
                    0..n
                } else {
                    0..1
                };
                v.extend(roots.map(|root| Call {
                    staged,
                    ..call(coll, root, in_place)
                }));
            }
        }
    }
    v
}

const ONE_BATCH: Batching = Batching {
    batch: 8,
    min_bytes: 512 << 20,
};
const SMALL_BATCHES: Batching = Batching {
    batch: 3,
    min_bytes: 0,
};

#[test]
fn every_collective_layout_and_root_on_2_to_8_ranks() {
    let mut runs = 0;
    for n in 2..=8 {
        for c in every_call(n) {
            for (k, how) in [ONE_BATCH, SMALL_BATCHES].into_iter().enumerate() {
                for seed in 0..4u64 {
                    // Twice in a row: the second reuses the buffers of the first.
                    let mut b = Builder::new(n, 3, how, 0);
                    b.eager(c, &keep);
                    b.eager(c, &keep);
                    let s = seed * 2 + k as u64 + n as u64 * 1000;
                    assert_eq!(
                        run(b, s),
                        Ok(End::Completed),
                        "{c:?} on {n} ranks, {how:?}, seed {s}"
                    );
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 1800, "{runs} runs");
}

/// A random sequence of calls on the same buffers, the eager values
/// starting at 0, just before the unsigned wraparound and just before the
/// signed midpoint (the cyclic comparison's edge).
#[test]
fn mixed_sequences_across_the_value_wraparound() {
    let mut rng = Rng::new(42);
    for n in 2..=6 {
        let calls = every_call(n);
        for base in [0, u32::MAX - 3, (1 << 31) - 3] {
            for seed in 0..6u64 {
                let how = if seed % 2 == 0 {
                    ONE_BATCH
                } else {
                    SMALL_BATCHES
                };
                let mut b = Builder::new(n, 2, how, base);
                let seq: Vec<Call> = (0..12).map(|_| calls[rng.below(calls.len())]).collect();
                for c in &seq {
                    b.eager(*c, &keep);
                }
                let s = rng.next();
                assert_eq!(
                    run(b, s),
                    Ok(End::Completed),
                    "{n} ranks, base {base:#x}, seed {s}: {seq:?}"
                );
            }
        }
    }
}

/// A graph of collectives (an odd number of barriers before padding)
/// replayed several times, eager collectives in between.
fn graph_run(n: usize, seed: u64, mutate: Mutate<'_>) -> Result<End, String> {
    // With batches of 2 on 4+ ranks, all_gather/alltoall/scatter have 2+
    // batches: 3 barriers, padded to 4.
    let how = Batching {
        batch: 2,
        min_bytes: 0,
    };
    let mut b = Builder::new(n, 2, how, 0);
    let graph = [
        call(Coll::AllToAll, 0, false),
        call(Coll::Broadcast, n - 1, false),
        call(Coll::AllGather, 0, true),
        call(Coll::Scatter, 1, false),
    ];
    for rep in 0..4 {
        b.graph(&graph, 2, mutate);
        b.eager(call(Coll::Gather, rep % n, rep % 2 == 0), &keep);
    }
    run(b, seed)
}

#[test]
fn graph_replays_lose_no_write() {
    for n in 2..=6 {
        for seed in 0..40u64 {
            assert_eq!(
                graph_run(n, seed, &keep),
                Ok(End::Completed),
                "{n} ranks, seed {seed}"
            );
        }
    }
}

/// Drop the padding barrier of every graph collective that got one.
fn unpad(_: usize, rounds: usize, steps: &mut Vec<Step>) {
    let syncs = steps.iter().filter(|s| matches!(s, Step::Sync(_))).count();
    if syncs > rounds + 1 {
        assert!(matches!(steps.last(), Some(Step::Sync(b)) if b.mode == Mode::Graph));
        steps.pop();
    }
}

#[test]
fn without_the_padding_a_graph_replay_loses_a_write() {
    let mut failed = 0;
    for seed in 0..60u64 {
        match graph_run(4, seed, &unpad) {
            Ok(End::Completed) => {}
            Ok(End::Stuck(_)) | Err(_) => failed += 1,
        }
    }
    eprintln!("without padding: {failed} of 60 schedules failed");
    assert!(
        failed > 0,
        "an odd barrier count per graph collective must fail some schedule"
    );
}

/// Waiting for the previous value (a stale flag) passes a barrier early,
/// and the check sees it — across the wraparound too.
#[test]
fn a_stale_wait_value_passes_a_barrier_early() {
    let stale = |_: usize, _: usize, steps: &mut Vec<Step>| {
        for s in steps.iter_mut() {
            if let Step::Sync(b) = s {
                for op in b.ops.iter_mut() {
                    if let MemOp::Wait { value, .. } = op {
                        *value = value.wrapping_sub(1);
                    }
                }
            }
        }
    };
    for base in [0, u32::MAX - 1] {
        for seed in 0..4 {
            let mut b = Builder::new(3, 2, ONE_BATCH, base);
            for _ in 0..4 {
                b.eager(call(Coll::AllGather, 0, false), &stale);
            }
            let r = run(b, seed);
            assert!(
                matches!(&r, Err(e) if e.contains("passed its Eager barrier")),
                "base {base:#x}, seed {seed}: {r:?}"
            );
        }
    }
}

#[test]
fn a_missing_or_early_copy_is_caught() {
    let drop_one = |rank: usize, _: usize, steps: &mut Vec<Step>| {
        if rank == 1 {
            for s in steps.iter_mut() {
                if let Step::Copies(v) = s {
                    v.pop();
                }
            }
            steps.retain(|s| !matches!(s, Step::Copies(v) if v.is_empty()));
        }
    };
    let mut b = Builder::new(3, 2, ONE_BATCH, 0);
    b.eager(call(Coll::AllToAll, 0, false), &drop_one);
    let r = run(b, 1);
    assert!(matches!(&r, Err(e) if e.contains("rank ")), "{r:?}");

    // Copies before the ready barrier race with the peers' previous use of
    // their buffers: some schedule copies into a rank that is not there yet.
    let early = |_: usize, _: usize, steps: &mut Vec<Step>| {
        let i = steps.iter().position(|s| matches!(s, Step::Copies(_)));
        if let Some(i) = i {
            let c = steps.remove(i);
            steps.insert(0, c);
        }
    };
    let mut failed = 0;
    for seed in 0..20 {
        let mut b = Builder::new(3, 2, ONE_BATCH, 0);
        for _ in 0..3 {
            b.eager(call(Coll::AllGather, 0, false), &early);
        }
        if let Err(e) = run(b, seed) {
            eprintln!("early copies, seed {seed}: {e}");
            failed += 1;
        }
    }
    assert!(
        failed > 0,
        "copies ahead of the ready barrier must be caught"
    );
}

/// A rank stops for good (killed) at various points; every survivor ends up
/// stuck, the watchdog's reading of its flags names the dead rank, and its
/// release (the release value in both eager arrays) lets every survivor's
/// stream run to its end.
#[test]
fn the_watchdog_names_the_rank_that_never_arrived() {
    let n = 4;
    let dead = 2;
    let mut cases = 0;
    for cut in (0..200).step_by(7) {
        for seed in 0..3u64 {
            let mut b = Builder::new(n, 2, SMALL_BATCHES, 0);
            for c in [
                call(Coll::AllToAll, 0, false),
                call(Coll::Scatter, 2, false),
                call(Coll::AllGather, 0, true),
            ] {
                b.eager(c, &keep);
            }
            let mut sim = b.sim();
            if cut >= sim.progs[dead].len() {
                continue;
            }
            let mut stop = vec![None; n];
            stop[dead] = Some(cut);
            let end = sim.run(seed, &stop).expect("no violation");
            let End::Stuck(left) = end else {
                // The dead rank had nothing left that others wait for.
                continue;
            };
            let survivors: Vec<usize> = left.into_iter().filter(|&r| r != dead).collect();
            for &me in &survivors {
                // The oldest pending collective: the one the stream is in.
                let Some(inst) = sim.inside[me] else {
                    panic!("rank {me} stuck outside a collective")
                };
                let snap = Snapshot {
                    ready: sim.flags[me][Array::EagerReady.index()].clone(),
                    complete: sim.flags[me][Array::EagerComplete.index()].clone(),
                };
                let stuck = watch::missing(me, &sim.expects[me][inst], &snap)
                    .unwrap_or_else(|| panic!("rank {me} stuck but nobody missing: {snap:?}"));
                assert!(
                    stuck.missing.contains(&dead),
                    "cut {cut}, seed {seed}: rank {me} names {:?}",
                    stuck.missing
                );
                cases += 1;
            }
            // Every survivor's watchdog releases its stream.
            for &me in &survivors {
                let inst = sim.inside[me].expect("inside");
                let v = watch::release_value(&sim.expects[me][inst]);
                for a in [Array::EagerReady, Array::EagerComplete] {
                    sim.flags[me][a.index()].iter_mut().for_each(|x| *x = v);
                }
            }
            sim.lenient = true;
            let end = sim.run(seed, &stop).expect("lenient");
            assert_eq!(
                end,
                End::Stuck(vec![dead]),
                "cut {cut}, seed {seed}: released survivors finish"
            );
        }
    }
    assert!(cases > 20, "{cases} stuck survivors examined");
}
