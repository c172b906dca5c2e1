//! A deterministic in-process simulated fabric: runs the schedules of every
//! rank (and every channel) of one collective together, on real byte
//! buffers, and checks them.
//!
//! The matching rules are the real engine's: messages between a pair of
//! ranks on one channel match in posting order. Completion is
//! **rendezvous**, the strictest the engine allows: a rank's current stage
//! posts all its sends and receives at once, a send completes only when the
//! peer has posted the matching receive, and the stage's local steps run (in
//! order) once every transfer of the stage matched; then the next stage is
//! posted. Channels of one rank advance independently. Any schedule that
//! completes here completes on any transport that buffers at least as much.
//!
//! Every violation of the [`Schedule`] contract is reported
//! as an `Err` describing the case, rank, channel and stage, never a panic:
//! a send or receive to itself or to a rank out of range, a region out of
//! bounds of its buffer, a write into [`Buf::Send`], a receive overlapping
//! another receive or a send of the same stage (actual memory is compared,
//! so in-place aliasing counts), a reduce or copy whose destination
//! partially overlaps a source, matched messages of different lengths, two
//! channels of one rank touching the same memory when one of them writes
//! it, and deadlock (with which ranks wait at which stage for whom).
//!
//! Buffers follow NCCL's layouts: separate send and receive allocations
//! out-of-place; one allocation per rank in-place (see [`SimCase::in_place`]).
//! Receive memory and scratch start filled with [`POISON`] bytes, so
//! elements an algorithm forgets to write show up in the results.
//!
//! The run is event-driven rather than a polling loop, with the same
//! outcome: a stage is posted as soon as the previous one completed, every
//! match is carried out (data copied) when both sides are posted, and the run
//! ends when no rank-channel can move.
//!
//! ```
//! use ferrocx_algo::sim::{self, SimCase};
//! use ferrocx_algo::{Algo, CollKind};
//!
//! // Ring all-reduce of 10 int32 (sum) over 4 ranks: rank r holds r+1 everywhere.
//! let case = SimCase::new(CollKind::AllReduce, Algo::Ring, 4, 10);
//! let inputs: Vec<Vec<u8>> = (0..4i32)
//!     .map(|r| (0..10).flat_map(|_| (r + 1).to_ne_bytes()).collect())
//!     .collect();
//! let out = sim::run(&case, &inputs)?;
//! assert!(out.iter().all(|b| b.chunks(4).all(|x| x == 10i32.to_ne_bytes())));
//! # Ok::<(), String>(())
//! ```

use crate::reduce;
use crate::types::{DataType, RedOp};
use crate::{
    in_place_safe, schedule, Algo, Buf, CollArgs, CollKind, Local, Part, Region, Schedule, VCounts,
    Xfer,
};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// The byte every receive buffer, the rest of an in-place allocation, and
/// scratch memory hold before the collective runs.
pub const POISON: u8 = 0xA5;

/// One collective call, as every rank makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCase {
    /// The collective.
    pub kind: CollKind,
    /// The algorithm (must implement `kind`).
    pub algo: Algo,
    /// Number of ranks (≥ 1).
    pub nranks: usize,
    /// NCCL's `count` (ignored by all-to-all-v).
    pub count: usize,
    /// Root of rooted collectives (< `nranks`).
    pub root: usize,
    /// Number of channels the call is split over (≥ 1); channel `c` runs
    /// the schedule of [`Part`] `{ index: c, of: nparts }`.
    pub nparts: usize,
    /// Largest message in elements (≥ 1).
    pub chunk: usize,
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator (used by reducing collectives only).
    pub op: RedOp,
    /// NCCL's in-place layout (only where [`in_place_safe`]): one allocation
    /// per rank; all-reduce, broadcast, reduce: send = recv; all-gather, and
    /// gather at the root: send = recv + rank·count; reduce-scatter, and
    /// scatter at the root: recv = send + rank·count; other ranks of gather
    /// and scatter: send = recv.
    pub in_place: bool,
    /// All-to-all-v: every rank's counts, indexed by rank (empty otherwise).
    pub v: Vec<VCounts>,
}

impl SimCase {
    /// A case with root 0, one channel, a 1 Mi-element chunk, `int32`, `Sum`,
    /// out-of-place.
    pub fn new(kind: CollKind, algo: Algo, nranks: usize, count: usize) -> Self {
        SimCase {
            kind,
            algo,
            nranks,
            count,
            root: 0,
            nparts: 1,
            chunk: 1 << 20,
            dtype: DataType::I32,
            op: RedOp::Sum,
            in_place: false,
            v: Vec::new(),
        }
    }

    /// The arguments rank `rank` passes to [`schedule`] for channel `part`.
    pub fn args(&self, rank: usize, part: usize) -> CollArgs<'_> {
        CollArgs {
            kind: self.kind,
            algo: self.algo,
            rank,
            nranks: self.nranks,
            count: self.count,
            root: self.root,
            part: Part {
                index: part,
                of: self.nparts,
            },
            chunk: self.chunk,
            v: match self.kind {
                CollKind::AllToAllV => self.v.get(rank),
                _ => None,
            },
        }
    }

    /// Elements of rank `rank`'s (send, receive) buffer.
    pub fn buffer_elems(&self, rank: usize) -> Result<(usize, usize), String> {
        if self.kind == CollKind::AllToAllV {
            let v = self
                .v
                .get(rank)
                .ok_or_else(|| format!("{self}: no VCounts for rank {rank}"))?;
            return v.extents(self.nranks).map_err(|e| format!("{self}: {e}"));
        }
        self.kind
            .buffer_elems(self.count, self.nranks, rank, self.root)
            .ok_or_else(|| format!("{self}: buffer size overflows"))
    }

    /// Where rank `rank`'s send and receive buffers start in its one
    /// allocation, and that allocation's size (elements), in-place.
    fn in_place_layout(&self, rank: usize, send: usize, recv: usize) -> (usize, usize, usize) {
        let at = rank * self.count;
        match self.kind.in_place_offset(self.count, rank, self.root) {
            Some(s) => (s, 0, recv.max(s + send)),
            None => match self.kind {
                CollKind::ReduceScatter => (0, at, send.max(at + recv)),
                CollKind::Scatter if rank == self.root => (0, at, send.max(at + recv)),
                _ => (0, 0, send.max(recv)),
            },
        }
    }

    fn validate(&self, inputs: &[Vec<u8>]) -> Result<(), String> {
        let bad = |m: String| Err(format!("{self}: {m}"));
        if self.nranks == 0 || self.nparts == 0 || self.chunk == 0 {
            return bad("nranks, nparts and chunk must be at least 1".into());
        }
        if self.root >= self.nranks {
            return bad(format!("root {} out of range", self.root));
        }
        if !self.algo.applies(self.kind) {
            return bad(format!(
                "{} does not implement {}",
                self.algo.name(),
                self.kind.name()
            ));
        }
        if self.in_place && !in_place_safe(self.kind) {
            return bad(format!("{} has no in-place layout", self.kind.name()));
        }
        if self.kind == CollKind::AllToAllV {
            if self.v.len() != self.nranks {
                return bad(format!(
                    "{} VCounts for {} ranks",
                    self.v.len(),
                    self.nranks
                ));
            }
            for (r, v) in self.v.iter().enumerate() {
                v.extents(self.nranks)
                    .map_err(|e| format!("{self}: rank {r}: {e}"))?;
            }
            for (s, vs) in self.v.iter().enumerate() {
                for (d, vd) in self.v.iter().enumerate() {
                    if vs.send_counts[d] != vd.recv_counts[s] {
                        return bad(format!(
                            "rank {s} sends {} elements to rank {d}, which expects {}",
                            vs.send_counts[d], vd.recv_counts[s]
                        ));
                    }
                }
            }
        }
        if inputs.len() != self.nranks {
            return bad(format!("{} inputs for {} ranks", inputs.len(), self.nranks));
        }
        for (r, inp) in inputs.iter().enumerate() {
            let (send, _) = self.buffer_elems(r)?;
            if inp.len() != send * self.dtype.size() {
                return bad(format!(
                    "rank {r}'s input has {} bytes, its send buffer {send} elements of {}",
                    inp.len(),
                    self.dtype.name()
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for SimCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} nranks={} count={} root={} parts={} chunk={} {}",
            self.kind.name(),
            self.algo.name(),
            self.nranks,
            self.count,
            self.root,
            self.nparts,
            self.chunk,
            self.dtype.name(),
        )?;
        if self.kind.reduces() {
            write!(f, "/{}", self.op.name())?;
        }
        f.write_str(if self.in_place {
            " in-place"
        } else {
            " out-of-place"
        })
    }
}

/// Run `case` on the simulated fabric with the crate's [`schedule`].
/// `inputs[r]` is rank `r`'s send buffer (exactly its
/// [`SimCase::buffer_elems`] elements of `case.dtype`, native byte order).
/// Returns every rank's receive buffer, or what went wrong.
pub fn run(case: &SimCase, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
    run_with(case, inputs, schedule)
}

/// [`run`] with the schedules from `sched` instead of [`schedule`] (called
/// once per rank and channel, in rank then channel order).
pub fn run_with(
    case: &SimCase,
    inputs: &[Vec<u8>],
    mut sched: impl FnMut(&CollArgs<'_>) -> Schedule,
) -> Result<Vec<Vec<u8>>, String> {
    case.validate(inputs)?;
    let mut sim = Sim::new(case, inputs)?;
    for rank in 0..case.nranks {
        for part in 0..case.nparts {
            let s = sched(&case.args(rank, part));
            sim.add_unit(rank, part, s)?;
        }
    }
    if case.nparts > 1 {
        for rank in 0..case.nranks {
            sim.check_channel_races(rank)?;
        }
    }
    sim.execute()?;
    Ok(sim.results())
}

/// Check [`quadratic_deltas`](super::quadratic_deltas)`(n)`: `n` rounds
/// whose peer deltas are every value in `0..n` exactly once, in NCCL's order
/// (`(x·x + x)/2 mod 2^k`, `2^k ≥ n`, skipping values ≥ `n`).
pub fn check_quadratic(n: usize) -> Result<(), String> {
    let got = super::quadratic_deltas(n);
    if got.len() != n {
        return Err(format!("quadratic_deltas({n}) has {} rounds", got.len()));
    }
    let mut seen = vec![false; n];
    for (round, &d) in got.iter().enumerate() {
        if d >= n || std::mem::replace(&mut seen[d], true) {
            return Err(format!(
                "quadratic_deltas({n}): round {round} has delta {d}, out of range or repeated"
            ));
        }
    }
    let pow2 = n.next_power_of_two();
    let want: Vec<usize> = (0..pow2)
        .map(|x| (x * x + x) / 2 % pow2)
        .filter(|&d| d < n)
        .collect();
    if got != want {
        return Err(format!(
            "quadratic_deltas({n}) = {got:?}, NCCL's enumeration is {want:?}"
        ));
    }
    Ok(())
}

/// A buffer of one rank: where it lies in which allocation.
#[derive(Debug, Clone, Copy)]
struct Span {
    arena: usize,
    /// Byte offset in the arena.
    off: usize,
    /// Elements.
    len: usize,
}

/// A byte range of one allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    arena: usize,
    start: usize,
    end: usize,
}

impl Loc {
    fn overlaps(&self, o: &Loc) -> bool {
        self.arena == o.arena && self.start < o.end && o.start < self.end
    }
    fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// One rank's schedule for one channel, and where it stands.
struct Unit {
    rank: usize,
    part: usize,
    sched: Schedule,
    send: Span,
    recv: Span,
    scratch: Span,
    /// Current stage.
    stage: usize,
    /// Transfers of the current stage not matched yet.
    pending: usize,
    /// Which sends / receives of the current stage matched.
    sent: Vec<bool>,
    received: Vec<bool>,
}

impl Unit {
    fn loc(&self, r: &Region, esz: usize) -> Result<Loc, String> {
        let (span, name) = match r.buf {
            Buf::Send => (self.send, "send"),
            Buf::Recv => (self.recv, "receive"),
            Buf::Scratch => (self.scratch, "scratch"),
        };
        match r.off.checked_add(r.len) {
            Some(end) if end <= span.len => Ok(Loc {
                arena: span.arena,
                start: span.off + r.off * esz,
                end: span.off + end * esz,
            }),
            _ => Err(format!(
                "{r:?} is out of bounds of the {} element {name} buffer",
                span.len
            )),
        }
    }
}

/// Posts between one (channel, source, destination) not matched yet: at
/// rest only one side can have any (they would have matched otherwise).
struct Queue {
    /// Whether the posts are receives (else sends).
    recvs: bool,
    /// (unit, send or receive index), in posting order.
    items: VecDeque<(usize, usize)>,
}

#[cfg(test)]
thread_local! {
    /// Tests: use the hash map for every size (on this thread).
    pub(super) static FORCE_SPARSE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
/// Whether to use the hash map whatever the size (tests of it).
fn force_sparse() -> bool {
    #[cfg(test)]
    return FORCE_SPARSE.with(|f| f.get());
    #[cfg(not(test))]
    false
}

/// Every [`Queue`], by (channel, source, destination): a dense table when
/// it is small enough, a hash map otherwise.
enum Queues {
    Dense { n: usize, q: Vec<Queue> },
    Sparse(HashMap<(usize, usize, usize), Queue, BuildHasherDefault<FxHasher>>),
}

impl Queues {
    fn new(nparts: usize, nranks: usize) -> Self {
        let len = nranks
            .checked_mul(nranks)
            .and_then(|x| x.checked_mul(nparts));
        match len {
            Some(len) if len <= 1 << 21 && !force_sparse() => Queues::Dense {
                n: nranks,
                q: (0..len)
                    .map(|_| Queue {
                        recvs: false,
                        items: VecDeque::new(),
                    })
                    .collect(),
            },
            _ => Queues::Sparse(HashMap::default()),
        }
    }

    /// Post `me` (a send, or a receive if `recv`) on `key`: returns the
    /// other side's oldest post it matches, or queues it. At rest a queue
    /// holds posts of one side only (they would have matched otherwise).
    fn post(
        &mut self,
        key: (usize, usize, usize),
        recv: bool,
        me: (usize, usize),
    ) -> Option<(usize, usize)> {
        match self {
            Queues::Dense { n, q } => {
                let q = &mut q[(key.0 * *n + key.1) * *n + key.2];
                if !q.items.is_empty() && q.recvs != recv {
                    return q.items.pop_front();
                }
                q.recvs = recv;
                q.items.push_back(me);
                None
            }
            Queues::Sparse(m) => match m.entry(key) {
                Entry::Occupied(mut o) if o.get().recvs != recv => {
                    let q = o.get_mut();
                    let t = q.items.pop_front();
                    if q.items.is_empty() {
                        o.remove();
                    }
                    t
                }
                Entry::Occupied(mut o) => {
                    o.get_mut().items.push_back(me);
                    None
                }
                Entry::Vacant(v) => {
                    v.insert(Queue {
                        recvs: recv,
                        items: VecDeque::from([me]),
                    });
                    None
                }
            },
        }
    }

    /// Some queue with posts left, and its key.
    fn leftover(&self) -> Option<((usize, usize, usize), &Queue)> {
        match self {
            Queues::Dense { n, q } => q
                .iter()
                .enumerate()
                .find(|(_, q)| !q.items.is_empty())
                .map(|(i, q)| ((i / (n * n), i / n % n, i % n), q)),
            Queues::Sparse(m) => m.iter().next().map(|(k, q)| (*k, q)),
        }
    }
}

struct Sim<'c> {
    case: &'c SimCase,
    esz: usize,
    /// The memory. Only accessed through `bases` once built.
    _arenas: Vec<Vec<u64>>,
    /// Start of each arena (from `Vec::as_mut_ptr`, taken once).
    bases: Vec<*mut u8>,
    /// Per rank: (send, receive) spans.
    ranks: Vec<(Span, Span)>,
    units: Vec<Unit>,
    queues: Queues,
    /// Reused by `execute`: the queue keys of the stage being posted.
    keys: Vec<(usize, usize, usize)>,
    /// Reused by `check_stage`.
    scratch_xs: Vec<(Loc, bool, usize)>,
}

fn poisoned(bytes: usize) -> Vec<u64> {
    vec![u64::from_ne_bytes([POISON; 8]); bytes.div_ceil(8)]
}

impl<'c> Sim<'c> {
    fn new(case: &'c SimCase, inputs: &[Vec<u8>]) -> Result<Self, String> {
        let esz = case.dtype.size();
        let mut arenas = Vec::new();
        let mut ranks = Vec::with_capacity(case.nranks);
        let mut fills = Vec::with_capacity(case.nranks);
        for rank in 0..case.nranks {
            let (s, r) = case.buffer_elems(rank)?;
            let size = |n: usize| {
                n.checked_mul(esz)
                    .ok_or_else(|| format!("{case}: rank {rank}: buffer size overflows"))
            };
            let (send, recv) = if case.in_place {
                let (so, ro, total) = case.in_place_layout(rank, s, r);
                arenas.push(poisoned(size(total)?));
                let a = arenas.len() - 1;
                (
                    Span {
                        arena: a,
                        off: so * esz,
                        len: s,
                    },
                    Span {
                        arena: a,
                        off: ro * esz,
                        len: r,
                    },
                )
            } else {
                arenas.push(poisoned(size(s)?));
                arenas.push(poisoned(size(r)?));
                let a = arenas.len() - 2;
                (
                    Span {
                        arena: a,
                        off: 0,
                        len: s,
                    },
                    Span {
                        arena: a + 1,
                        off: 0,
                        len: r,
                    },
                )
            };
            fills.push(send);
            ranks.push((send, recv));
        }
        let bases: Vec<*mut u8> = arenas.iter_mut().map(|a| a.as_mut_ptr().cast()).collect();
        for (span, inp) in fills.iter().zip(inputs) {
            // SAFETY: the span lies inside its arena (sized above from the same
            // layout) and `inp` has exactly `span.len * esz` bytes (validated);
            // the input is a separate allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    inp.as_ptr(),
                    bases[span.arena].add(span.off),
                    inp.len(),
                )
            };
        }
        Ok(Sim {
            case,
            esz,
            _arenas: arenas,
            bases,
            ranks,
            units: Vec::new(),
            queues: Queues::new(case.nparts, case.nranks),
            keys: Vec::new(),
            scratch_xs: Vec::new(),
        })
    }

    /// Validate one rank's schedule for one channel and give it scratch.
    fn add_unit(&mut self, rank: usize, part: usize, sched: Schedule) -> Result<(), String> {
        let bytes = sched
            .scratch
            .checked_mul(self.esz)
            .ok_or_else(|| format!("{}: rank {rank} part {part}: scratch overflows", self.case))?;
        // Scratch arenas are allocated after `bases` was built: extend both.
        let mut mem = poisoned(bytes);
        self.bases.push(mem.as_mut_ptr().cast());
        self._arenas.push(mem);
        let (send, recv) = self.ranks[rank];
        let unit = Unit {
            rank,
            part,
            send,
            recv,
            scratch: Span {
                arena: self.bases.len() - 1,
                off: 0,
                len: sched.scratch,
            },
            sched,
            stage: 0,
            pending: 0,
            sent: Vec::new(),
            received: Vec::new(),
        };
        let mut xs = std::mem::take(&mut self.scratch_xs);
        for (s, st) in unit.sched.stages.iter().enumerate() {
            self.check_stage(&unit, st, &mut xs)
                .map_err(|m| format!("{}: {}: {m}", self.case, where_(&unit, s)))?;
        }
        self.scratch_xs = xs;
        self.units.push(unit);
        Ok(())
    }

    /// The static checks of one stage.
    fn check_stage(
        &self,
        u: &Unit,
        st: &super::Stage,
        xs: &mut Vec<(Loc, bool, usize)>,
    ) -> Result<(), String> {
        let esz = self.esz;
        let n = self.case.nranks;
        let desc = |recv: bool, i: usize| {
            let x = if recv { &st.recvs[i] } else { &st.sends[i] };
            let what = if recv { "receive" } else { "send" };
            format!("{what} #{i} ({} {:?})", peer_word(recv, x.peer), x.region)
        };
        // (memory, is a receive, index)
        xs.clear();
        for (list, recv) in [(&st.sends, false), (&st.recvs, true)] {
            for (i, x) in list.iter().enumerate() {
                if x.peer >= n {
                    return Err(format!("{}: peer out of range (nranks {n})", desc(recv, i)));
                }
                if x.peer == u.rank {
                    return Err(format!("{}: to itself", desc(recv, i)));
                }
                if recv && x.region.buf == Buf::Send {
                    return Err(format!("{}: writes into the send buffer", desc(recv, i)));
                }
                let loc = u
                    .loc(&x.region, esz)
                    .map_err(|m| format!("{}: {m}", desc(recv, i)))?;
                if !loc.is_empty() {
                    xs.push((loc, recv, i));
                }
            }
        }
        // A receive may overlap nothing else of the stage: sweep by start,
        // remembering the furthest-reaching send and receive so far.
        xs.sort_unstable_by_key(|(l, r, i)| (l.arena, l.start, *r, *i));
        let mut far_send: Option<usize> = None;
        let mut far_recv: Option<usize> = None;
        for j in 0..xs.len() {
            let (l, recv, _) = xs[j];
            if j > 0 && xs[j - 1].0.arena != l.arena {
                far_send = None;
                far_recv = None;
            }
            let hit = |k: Option<usize>| k.filter(|&k| xs[k].0.end > l.start);
            if let Some(k) = hit(far_recv).or(if recv { hit(far_send) } else { None }) {
                return Err(format!(
                    "{} overlaps {} in memory within one stage",
                    desc(xs[k].1, xs[k].2),
                    desc(recv, xs[j].2)
                ));
            }
            let slot = if recv { &mut far_recv } else { &mut far_send };
            if slot.filter(|&k| xs[k].0.end >= l.end).is_none() {
                *slot = Some(j);
            }
        }
        for (i, l) in st.locals.iter().enumerate() {
            let (dst, srcs): (Region, &[Region]) = match l {
                Local::Reduce { dst, a, b } => (*dst, &[*a, *b]),
                Local::Copy { dst, src } => (*dst, std::slice::from_ref(src)),
                Local::Finish { dst } => (*dst, &[]),
            };
            let desc = || format!("local #{i} {l:?}");
            if dst.buf == Buf::Send {
                return Err(format!("{}: writes into the send buffer", desc()));
            }
            if srcs.iter().any(|s| s.len != dst.len) {
                return Err(format!("{}: regions of different lengths", desc()));
            }
            let d = u.loc(&dst, esz).map_err(|m| format!("{}: {m}", desc()))?;
            for s in srcs {
                let s = u.loc(s, esz).map_err(|m| format!("{}: {m}", desc()))?;
                if d.overlaps(&s) && d != s {
                    return Err(format!(
                        "{}: destination partially overlaps a source in memory",
                        desc()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Two channels of `rank` must not touch the same memory when one writes it.
    fn check_channel_races(&self, rank: usize) -> Result<(), String> {
        let np = self.case.nparts;
        let esz = self.esz;
        let (send, recv) = self.ranks[rank];
        let shared = |l: &Loc| l.arena == send.arena || l.arena == recv.arena;
        // What one access is: (unit, stage, 0 send / 1 receive / 2 local, index).
        type Who = (usize, usize, u8, usize);
        let describe = |(u, s, what, i): Who| {
            let unit = &self.units[u];
            let st = &unit.sched.stages[s];
            let thing = match what {
                0 => format!("send {:?}", st.sends[i].region),
                1 => format!("receive {:?}", st.recvs[i].region),
                _ => format!("{:?}", st.locals[i]),
            };
            format!("{}: {thing}", where_(unit, s))
        };
        // (memory, part, writes, who)
        let mut acc: Vec<(Loc, usize, bool, Who)> = Vec::new();
        for (ui, u) in self
            .units
            .iter()
            .enumerate()
            .filter(|(_, u)| u.rank == rank)
        {
            for (s, st) in u.sched.stages.iter().enumerate() {
                let mut add = |r: &Region, w: bool, who: Who| {
                    // Validated in `add_unit`.
                    if let Ok(l) = u.loc(r, esz) {
                        if !l.is_empty() && shared(&l) {
                            acc.push((l, u.part, w, who));
                        }
                    }
                };
                for (i, x) in st.sends.iter().enumerate() {
                    add(&x.region, false, (ui, s, 0, i));
                }
                for (i, x) in st.recvs.iter().enumerate() {
                    add(&x.region, true, (ui, s, 1, i));
                }
                for (i, l) in st.locals.iter().enumerate() {
                    let who = (ui, s, 2, i);
                    match *l {
                        Local::Reduce { dst, a, b } => {
                            add(&a, false, who);
                            add(&b, false, who);
                            add(&dst, true, who);
                        }
                        Local::Copy { dst, src } => {
                            add(&src, false, who);
                            add(&dst, true, who);
                        }
                        Local::Finish { dst } => add(&dst, true, who),
                    }
                }
            }
        }
        acc.sort_unstable_by_key(|(l, p, w, who)| (l.arena, l.start, *p, *w, *who));
        // Per part: the furthest-reaching access and write so far (index into acc).
        let mut far_any: Vec<Option<usize>> = vec![None; np];
        let mut far_w: Vec<Option<usize>> = vec![None; np];
        for j in 0..acc.len() {
            let (l, p, w, _) = acc[j];
            if j > 0 && acc[j - 1].0.arena != l.arena {
                far_any.iter_mut().for_each(|x| *x = None);
                far_w.iter_mut().for_each(|x| *x = None);
            }
            let hit = |k: Option<usize>| k.filter(|&k| acc[k].0.end > l.start);
            for q in (0..np).filter(|&q| q != p) {
                if let Some(k) = hit(far_w[q]).or(if w { hit(far_any[q]) } else { None }) {
                    return Err(format!(
                        "{}: channels race on rank {rank}'s memory: {} and {}",
                        self.case,
                        describe(acc[k].3),
                        describe(acc[j].3)
                    ));
                }
            }
            let reach = |k: Option<usize>| k.filter(|&k| acc[k].0.end >= l.end).is_none();
            if reach(far_any[p]) {
                far_any[p] = Some(j);
            }
            if w && reach(far_w[p]) {
                far_w[p] = Some(j);
            }
        }
        Ok(())
    }

    fn ptr(&self, l: &Loc) -> *mut u8 {
        // SAFETY: `l` was bounds-checked against its arena by `Unit::loc`.
        unsafe { self.bases[l.arena].add(l.start) }
    }

    /// Run every unit to completion, or fail.
    fn execute(&mut self) -> Result<(), String> {
        let mut ready: VecDeque<usize> = (0..self.units.len()).collect();
        let mut finished = 0;
        let mut completed = Vec::new();
        while let Some(u) = ready.pop_front() {
            loop {
                let unit = &self.units[u];
                if unit.stage == unit.sched.stages.len() {
                    finished += 1;
                    break;
                }
                let st = &unit.sched.stages[unit.stage];
                let (ns, nr) = (st.sends.len(), st.recvs.len());
                if ns + nr == 0 {
                    self.run_locals(u)?;
                    self.units[u].stage += 1;
                    continue;
                }
                let (rank, part) = (unit.rank, unit.part);
                let mut keys = std::mem::take(&mut self.keys);
                keys.clear();
                keys.extend(st.sends.iter().map(|x| (part, rank, x.peer)));
                keys.extend(st.recvs.iter().map(|x| (part, x.peer, rank)));
                let unit = &mut self.units[u];
                unit.pending = ns + nr;
                unit.sent.clear();
                unit.sent.resize(ns, false);
                unit.received.clear();
                unit.received.resize(nr, false);
                for (i, &key) in keys.iter().enumerate() {
                    let recv = i >= ns;
                    let me = (u, if recv { i - ns } else { i });
                    // At rest a queue holds posts of one side only: match
                    // against the other side's oldest post, or wait in line.
                    let other = self.queues.post(key, recv, me);
                    if let Some(t) = other {
                        let (snd, rcv) = if recv { (t, me) } else { (me, t) };
                        self.transfer(snd, rcv, &mut completed)?;
                    }
                }
                self.keys = keys;
                break;
            }
            for c in completed.drain(..) {
                self.run_locals(c)?;
                self.units[c].stage += 1;
                ready.push_back(c);
            }
        }
        if finished < self.units.len() {
            return Err(self.deadlock());
        }
        if let Some(((part, s, d), q)) = self.queues.leftover() {
            return Err(format!(
                "{}: {} unmatched {} left on channel {part} from rank {s} to rank {d}",
                self.case,
                q.items.len(),
                if q.recvs { "receives" } else { "sends" }
            ));
        }
        Ok(())
    }

    /// Carry out a matched message: send `(su, si)` into receive `(ru, ri)`.
    fn transfer(
        &mut self,
        (su, si): (usize, usize),
        (ru, ri): (usize, usize),
        completed: &mut Vec<usize>,
    ) -> Result<(), String> {
        let (s, r) = (&self.units[su], &self.units[ru]);
        let sx: Xfer = s.sched.stages[s.stage].sends[si];
        let rx: Xfer = r.sched.stages[r.stage].recvs[ri];
        if sx.region.len != rx.region.len {
            return Err(format!(
                    "{}: length mismatch: {} send #{si} to rank {} has {} elements, {} receive #{ri} from rank {} expects {}",
                    self.case,
                    where_(s, s.stage),
                    sx.peer,
                    sx.region.len,
                    where_(r, r.stage),
                    rx.peer,
                    rx.region.len
                ));
        }
        // Both were validated in `add_unit`.
        let from = s.loc(&sx.region, self.esz)?;
        let to = r.loc(&rx.region, self.esz)?;
        if !from.is_empty() {
            // SAFETY: both ranges are in bounds of their arenas; they are
            // different ranks' memory (no self-sends), hence different
            // allocations.
            unsafe {
                std::ptr::copy_nonoverlapping(self.ptr(&from), self.ptr(&to), to.end - to.start)
            };
        }
        for (u, i, recv) in [(su, si, false), (ru, ri, true)] {
            let unit = &mut self.units[u];
            if recv {
                unit.received[i] = true;
            } else {
                unit.sent[i] = true;
            }
            unit.pending -= 1;
            if unit.pending == 0 {
                completed.push(u);
            }
        }
        Ok(())
    }

    /// Run the local steps of unit `u`'s current stage.
    fn run_locals(&mut self, u: usize) -> Result<(), String> {
        let unit = &self.units[u];
        let (dt, op, nranks) = (self.case.dtype, self.case.op, self.case.nranks);
        for l in &unit.sched.stages[unit.stage].locals {
            match *l {
                Local::Reduce { dst, a, b } => {
                    let (d, a, b) = (
                        unit.loc(&dst, self.esz)?,
                        unit.loc(&a, self.esz)?,
                        unit.loc(&b, self.esz)?,
                    );
                    if dst.len > 0 {
                        // SAFETY: in bounds and element-aligned (arenas are
                        // 8-aligned, offsets multiples of the element size);
                        // `dst` equals or is disjoint from each source (checked).
                        unsafe {
                            reduce::reduce(
                                dt,
                                op,
                                self.ptr(&d),
                                self.ptr(&a),
                                self.ptr(&b),
                                dst.len,
                            )
                        };
                    }
                }
                Local::Copy { dst, src } => {
                    let (d, s) = (unit.loc(&dst, self.esz)?, unit.loc(&src, self.esz)?);
                    if d != s && !d.is_empty() {
                        // SAFETY: both in bounds, same length; `copy` is a memmove.
                        unsafe { std::ptr::copy(self.ptr(&s), self.ptr(&d), d.end - d.start) };
                    }
                }
                Local::Finish { dst } => {
                    let d = unit.loc(&dst, self.esz)?;
                    if dst.len > 0 {
                        // SAFETY: in bounds and element-aligned.
                        unsafe { reduce::finish(dt, op, self.ptr(&d), dst.len, nranks) };
                    }
                }
            }
        }
        Ok(())
    }

    /// Describe who waits for whom.
    fn deadlock(&self) -> String {
        let stuck: Vec<&Unit> = self
            .units
            .iter()
            .filter(|u| u.stage < u.sched.stages.len())
            .collect();
        let mut msg = format!(
            "{}: deadlock (rendezvous): {} of {} rank-channel schedules cannot progress",
            self.case,
            stuck.len(),
            self.units.len()
        );
        for u in stuck.iter().take(8) {
            let st = &u.sched.stages[u.stage];
            let peer_state = |p: usize| {
                let pu = self
                    .units
                    .iter()
                    .find(|v| v.rank == p && v.part == u.part)
                    .expect("every rank has every part");
                if pu.stage == pu.sched.stages.len() {
                    "finished".to_string()
                } else {
                    format!("at stage {}", pu.stage)
                }
            };
            let mut waits = Vec::new();
            for (x, done, recv) in st
                .sends
                .iter()
                .zip(&u.sent)
                .map(|(x, d)| (x, d, false))
                .chain(st.recvs.iter().zip(&u.received).map(|(x, d)| (x, d, true)))
            {
                if !*done {
                    waits.push(format!(
                        "{} {} ({} elements; rank {} is {})",
                        if recv { "receive" } else { "send" },
                        peer_word(recv, x.peer),
                        x.region.len,
                        x.peer,
                        peer_state(x.peer)
                    ));
                }
            }
            msg += &format!("\n  {} waits to {}", where_(u, u.stage), waits.join(", "));
        }
        if stuck.len() > 8 {
            msg += &format!("\n  … and {} more", stuck.len() - 8);
        }
        msg
    }

    /// Every rank's receive buffer.
    fn results(&self) -> Vec<Vec<u8>> {
        self.ranks
            .iter()
            .map(|(_, r)| {
                let n = r.len * self.esz;
                let mut out = vec![0u8; n];
                // SAFETY: the receive span lies inside its arena; `out` is a
                // separate allocation of `n` bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.bases[r.arena].add(r.off),
                        out.as_mut_ptr(),
                        n,
                    )
                };
                out
            })
            .collect()
    }
}

/// A fast, non-cryptographic hasher for the queue keys (FxHash's mixing).
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        // splitmix64's finalizer: the table indexes by the low bits.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.write_u64(b.into()));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

fn where_(u: &Unit, stage: usize) -> String {
    format!(
        "rank {} part {} stage {}/{}",
        u.rank,
        u.part,
        stage,
        u.sched.stages.len()
    )
}

fn peer_word(recv: bool, peer: usize) -> String {
    if recv {
        format!("from rank {peer}")
    } else {
        format!("to rank {peer}")
    }
}
