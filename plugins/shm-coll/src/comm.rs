//! One communicator: setup (`comm_init`), the bid, and a call — the mailbox
//! protocol of [`layout`](crate::layout) run by [`crate::exchange`]
//! over this rank's [`Arena`].
//!
//! Rank `r`'s `k`-th collective message to peer `p` (counted per pair and
//! direction, from 0) goes into head `k mod heads` of `p`'s region with the
//! flag `k + 1` (its payload over 16 bytes into slot `k mod depth`), once `p`
//! credited message `k − heads` (`k − depth` for a slot); `p` waits for that
//! flag in its own region, compares the fingerprint with its own call's, uses
//! the payload and credits it (every quarter ring: `credit_every`) when its
//! exchange is done. With the synchronous
//! check the 2-deep rings need no credits: every exchange goes both ways
//! between every pair, and taking `p`'s message `k − 1` says that `p` is done
//! with `k − 2` (`ShmComm::lockstep`). With the deferred
//! check, a rank also looks, after each exchange and while it waits, for a
//! message from a peer it took nothing from (their calls differ) and for a
//! peer that gave up. A failure (a
//! mismatch, a timeout, a dead peer, an abort) breaks this comm for good: its
//! reason goes into the region's header, where peers still waiting read it
//! and report the same cause.

use crate::arena::{Arena, Ring};
use crate::config::{Check, Config};
use crate::cpus;
use crate::exchange::{self, Call, Flows, Peers, Wire};
use crate::layout::{Layout, INLINE, MAX_DEPTH};
use crate::setup::{self, Hello};
use crate::wait::{Backoff, Pause, PEER_CHECK};
use ferrocx_algo::fingerprint::{mismatch_text, CallKind, FINGERPRINT_BYTES, MISMATCH};
use ferrocx_algo::{DataType, Fingerprint, RedOp};
use ferrocx_sdk::collective::{Coll, CollDesc, CommInfo, Oob};
use ferrocx_sdk::region::Region;
use ferrocx_sdk::MemKind;
use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::time::{Duration, Instant};

/// Region names start with this (after the `/`); the creator's pid follows.
pub const PREFIX: &str = "ferrocx-shmcoll-";

/// One communicator's state.
pub struct ShmComm {
    host: Host,
    check: Check,
    /// With the deferred check, this rank's recent calls by sequence number
    /// (mod [`MAX_DEPTH`]): what a peer's late message is compared with.
    recent: Box<[Option<Fingerprint>; MAX_DEPTH]>,
    rank: usize,
    nranks: usize,
    priority: i32,
    /// The slot: the most a message carries.
    bytes: usize,
    /// The largest block bid for (chunked through the slots).
    max_block: usize,
    arena: Arena,
    /// Collective slots per pair.
    depth: usize,
    /// Collective heads per pair.
    heads: usize,
    /// Exchanges so far with each peer (calls, or chunks of calls): what a
    /// point-to-point message's epoch counts.
    exchanges: Vec<u64>,
    /// Collective messages posted to each peer so far.
    posted: Vec<u64>,
    /// Collective messages taken from each peer so far.
    coll_taken: Vec<u64>,
    /// Each peer's collective credits as last read (read again only when
    /// the ring looks full).
    coll_credits_seen: Vec<u64>,
    /// Credit a peer every this many of its collective messages taken
    /// ([`credit_every`]).
    credit_every: u64,
    /// The largest point-to-point message (0: none).
    p2p_bytes: usize,
    /// Point-to-point messages sent to each peer so far.
    sent: Vec<u64>,
    /// Point-to-point messages taken from each peer so far.
    taken: Vec<u64>,
    /// Each peer's credits as last read: the credit word is read again only
    /// when these show a full ring (a read of a line the peer writes costs a
    /// cache-line transfer; one per ring instead of one per send).
    credits_seen: Vec<u64>,
    pids: Vec<i32>,
    oversubscribed: bool,
    broken: Option<PluginError>,
    /// The last call's arguments and what `launch` derived from them.
    last: Option<Derived>,
    /// With the deferred check, for the comparison of last calls at
    /// `comm_destroy` (`closing.rs`).
    oob: Option<Oob>,
}

/// How many collective messages a receiver takes between two credits to
/// their sender, with `depth` slots per pair (fewer than heads): a quarter of
/// the slots' ring. Each credit is a
/// store to a line the sender reads when its ring looks full, so a credit per
/// message moved that line between the cores on every call of a root that
/// runs ahead (2 ranks on the dev VM, 8 B broadcast checked later: 0.11–0.14
/// → 0.10–0.11 µs). A receiver waiting for message `m` took every one before
/// it and credited at least `m − every + 1`, so the sender has room for `m`
/// while `every ≤ depth`: batching never stalls a sender its receiver waits for.
fn credit_every(depth: usize) -> u64 {
    (depth as u64 / 4).max(1)
}

/// This rank's region and what it was made for.
struct Local {
    region: Region,
    bytes: usize,
    p2p_bytes: usize,
    depth: usize,
    heads: usize,
}

/// The setup of this rank, or why it cannot take part.
fn local_setup(info: &CommInfo, cfg: &Config, name: &str) -> Result<Local, String> {
    if !cfg.enabled() {
        return Err("disabled (FERROCX_SHM_COLL_PRIORITY, _BYTES or _MAX_RANKS is 0)".into());
    }
    if !info.single_host() {
        return Err("the ranks are on more than one host".into());
    }
    if info.nranks > cfg.max_ranks {
        return Err(format!(
            "{} ranks exceed FERROCX_SHM_COLL_MAX_RANKS={}",
            info.nranks, cfg.max_ranks
        ));
    }
    let bytes = cfg.slot_bytes(info.nranks).ok_or_else(|| {
        format!(
            "no slot of 64 bytes or more: FERROCX_SHM_COLL_BYTES={}, {} ranks in FERROCX_SHM_COLL_MEMORY={}",
            cfg.bytes, info.nranks, cfg.memory
        )
    })?;
    let p2p = cfg.p2p_slot_bytes(info.nranks);
    let depth = cfg.depth(info.nranks, bytes);
    let heads = cfg.heads(depth);
    let region = Arena::create(name, &Layout::new(info.nranks, bytes, depth, heads, p2p))
        .map_err(|e| format!("cannot create {name}: {e}"))?;
    Ok(Local {
        region,
        bytes,
        p2p_bytes: p2p,
        depth,
        heads,
    })
}

impl ShmComm {
    /// Set up: two out-of-band rounds, every rank deciding alike.
    pub fn init(host: Host, cfg: Config, info: &CommInfo, oob: Oob) -> PluginResult<Self> {
        let name = format!(
            "/{PREFIX}{}-{:x}-{}",
            std::process::id(),
            info.comm_hash,
            info.rank
        );
        let mine = local_setup(info, &cfg, &name);
        let hello = Hello {
            failed: mine.as_ref().err().cloned(),
            priority: cfg.priority,
            bytes: mine.as_ref().map_or(0, |m| m.bytes) as u64,
            max_block: cfg.max_block(info.nranks) as u64,
            max_ranks: cfg.max_ranks as u64,
            p2p_bytes: mine.as_ref().map_or(0, |m| m.p2p_bytes) as u64,
            depth: mine.as_ref().map_or(0, |m| m.depth) as u64,
            heads: mine.as_ref().map_or(0, |m| m.heads) as u64,
            check: cfg.check,
            name: name.clone(),
            cpus: cpus::this_process(),
        };
        let all = oob.all_gather(&hello.encode())?;
        let hellos: Vec<_> = all.iter().map(|b| Hello::decode(b)).collect();
        let agreed = setup::agree(&hellos).map_err(PluginError::unsupported)?;
        let sets: Vec<_> = hellos
            .iter()
            .map(|h| h.as_ref().map_or_else(Default::default, |h| h.cpus))
            .collect();
        let sharing = cpus::sharing(&sets, info.rank, cpus::host_limit());
        if sharing.over() {
            host.info(format!(
                "shm-coll: rank {} shares its CPUs with {} more rank(s) on {} CPU(s): a waiting rank yields at once",
                info.rank,
                sharing.ranks - 1,
                sharing.cpus
            ));
        }
        let mine = mine.map_err(PluginError::internal)?.region;
        let layout = Layout::new(
            info.nranks,
            agreed.bytes,
            agreed.depth,
            agreed.heads,
            agreed.p2p_bytes,
        );
        let arena = Arena::new(info.rank, layout, mine, |r| {
            let name = &hellos[r].as_ref().expect("agreed").name;
            Region::open(name, Some(layout.len()))
                .map_err(|e| std::io::Error::other(format!("cannot map rank {r}'s {name}: {e}")))
        });
        let status = setup::opened(arena.as_ref().err().map(|e| e.to_string()).as_deref());
        let statuses = oob.all_gather(&status)?;
        setup::all_opened(&statuses).map_err(PluginError::unsupported)?;
        let mut arena = arena.map_err(|e| PluginError::system(e.to_string()))?;
        // Every rank mapped every region: the names can go (the mappings stay).
        let _ = arena.unlink_own();
        Ok(ShmComm {
            host,
            check: agreed.check,
            recent: Box::new([None; MAX_DEPTH]),
            rank: info.rank,
            nranks: info.nranks,
            priority: agreed.priority,
            bytes: agreed.bytes,
            max_block: agreed.max_block,
            arena,
            depth: agreed.depth,
            heads: agreed.heads,
            exchanges: vec![0; info.nranks],
            posted: vec![0; info.nranks],
            coll_taken: vec![0; info.nranks],
            coll_credits_seen: vec![0; info.nranks],
            credit_every: credit_every(agreed.depth),
            p2p_bytes: agreed.p2p_bytes,
            sent: vec![0; info.nranks],
            taken: vec![0; info.nranks],
            credits_seen: vec![0; info.nranks],
            pids: info.peers.iter().map(|p| p.pid).collect(),
            oversubscribed: sharing.over(),
            broken: None,
            last: None,
            oob: (agreed.check == Check::Deferred).then_some(oob),
        })
    }

    /// The bid: the same on every rank for the same call.
    pub fn can_run<W>(&self, d: &CollDesc<'_, W>) -> i32 {
        if self.runnable(d).is_some() {
            self.priority
        } else {
            0
        }
    }

    /// The type and operator of a call this comm can run.
    fn runnable<W>(&self, d: &CollDesc<'_, W>) -> Option<(DataType, RedOp)> {
        if d.mem != MemKind::Host || d.block_bytes() > self.max_block {
            return None;
        }
        Some((
            DataType::from_code(d.dtype as u32).ok()?,
            RedOp::from_code(d.op as u32).ok()?,
        ))
    }

    /// Break this comm for good with `e`, telling the peers (they report the
    /// same cause); `e` is returned.
    pub(crate) fn break_with(&mut self, e: PluginError) -> PluginError {
        self.arena.mark_broken(e.message());
        self.broken = Some(e.clone());
        e
    }

    /// Why this comm broke, if it did.
    pub fn status(&self) -> PluginResult<()> {
        match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Run a host-memory call to completion.
    ///
    /// # Safety
    /// The descriptor's buffers are valid as the collective ABI says.
    pub unsafe fn launch<W>(&mut self, d: &CollDesc<'_, W>) -> PluginResult<()> {
        self.status()?;
        let derived = match self.last {
            Some(l) if l.args == CallArgs::of(d) => l,
            _ => self.derive(d)?,
        };
        let (whole, flows) = (derived.whole, derived.flows);
        let total = whole.block;
        let fp = Fingerprint {
            seq: d.seq,
            ..derived.fp
        };
        let encoded = Fingerprint::renumber(&derived.encoded, d.seq);
        let (send, recv) = if d.in_place {
            whole.in_place(d.recv)
        } else {
            (d.send, d.recv)
        };
        if let Err(e) = self.before_collective(&fp) {
            return Err(self.break_with(e));
        }
        if self.check == Check::Deferred {
            // The kept fingerprint, renumbered in place: `fp`, just written
            // field by field, would be read back wider than it was stored,
            // which waits for those stores (a tenth of a 1-rank call).
            let recent = &mut self.recent[d.seq as usize % MAX_DEPTH];
            *recent = Some(derived.fp);
            if let Some(r) = recent {
                r.seq = d.seq;
            }
            self.arena.publish_call(d.seq, &encoded);
        }
        // A block larger than a slot goes through in chunks, one exchange each
        // (the slot is a multiple of 64 bytes: every chunk starts on an element).
        for (at, len) in exchange::chunks(total, self.bytes) {
            let call = Call {
                block: len,
                ..whole
            };
            let mut wire = CallWire {
                comm: self,
                silent: flows.silent,
                fp: &fp,
                encoded: &encoded,
                began: None,
            };
            // `wrapping_add`: a buffer the rank does not use may be null, and is
            // never read or written.
            let (s, r) = (send.wrapping_add(at), recv.wrapping_add(at));
            // SAFETY: the caller's contract, forwarded: the chunk lies at the same
            // offset in every block.
            if let Err(e) = unsafe { exchange::run(&call, &flows, s, r, &mut wire) } {
                return Err(self.break_with(e));
            }
            // The payloads taken were read: their slots go back to the senders
            // (in lockstep, by this rank's next message to each of them).
            let lockstep = self.lockstep();
            for p in flows.taking {
                self.coll_taken[p] += 1;
                if !lockstep && self.coll_taken[p].is_multiple_of(self.credit_every) {
                    self.arena.credit(Ring::Coll, p, self.coll_taken[p]);
                }
            }
            for p in flows.others {
                self.exchanges[p] += 1;
            }
            if self.check == Check::Deferred {
                if let Err(e) = self.unheard(flows.silent, &fp) {
                    return Err(self.break_with(e));
                }
            }
        }
        Ok(())
    }
}

/// The arguments of a call that decide what `launch` derives from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CallArgs {
    coll: Coll,
    dtype: i32,
    elem: usize,
    op: i32,
    count: usize,
    root: usize,
    mem: MemKind,
}

impl CallArgs {
    /// Read field by field: the SDK stored the descriptor just before this
    /// call, and a compare that merged neighbouring fields into one wider
    /// load (the type's and the operator's, the collective's and the memory
    /// kind's) would wait for those narrower stores to land — a third of a
    /// 1-rank broadcast's time (session 35).
    #[inline(always)]
    fn of<W>(d: &CollDesc<'_, W>) -> Self {
        CallArgs {
            coll: apart(&d.coll),
            dtype: apart(&d.dtype),
            elem: apart(&d.elem),
            op: apart(&d.op),
            count: apart(&d.count),
            root: apart(&d.root),
            mem: apart(&d.mem),
        }
    }
}

/// A field read on its own: behind `black_box` the compiler cannot merge the
/// load with its neighbours'.
#[inline(always)]
fn apart<T: Copy>(field: &T) -> T {
    *std::hint::black_box(field)
}

/// What `launch` derives from a call's arguments, kept for the next call:
/// a loop repeats one call, which is then neither checked, decoded nor
/// encoded again.
#[derive(Debug, Clone, Copy)]
struct Derived {
    args: CallArgs,
    /// The whole block's exchange.
    whole: Call,
    /// Its peer sets.
    flows: Flows,
    /// The call's fingerprint and its bytes, numbered 0.
    fp: Fingerprint,
    encoded: [u8; FINGERPRINT_BYTES],
}

impl ShmComm {
    /// Check that this comm can run `d` and derive its exchange and
    /// fingerprint (kept as [`ShmComm::last`]).
    #[inline(never)]
    fn derive<W>(&mut self, d: &CollDesc<'_, W>) -> PluginResult<Derived> {
        let Some((dtype, op)) = self.runnable(d) else {
            return Err(PluginError::invalid(format!(
                "shm-coll cannot run {} of {} bytes per block on {:?} memory",
                d.coll.name(),
                d.block_bytes(),
                d.mem
            )));
        };
        let total = d.block_bytes();
        let fp = Fingerprint::of(0, d.coll.kind(), dtype, op, d.count, d.root, false);
        let whole = Call {
            coll: d.coll,
            dtype,
            op,
            rank: self.rank,
            nranks: self.nranks,
            root: d.root,
            block: total,
            stride: total,
            checked: self.check == Check::Sync,
        };
        let derived = Derived {
            args: CallArgs::of(d),
            whole,
            flows: whole.flows(),
            fp,
            encoded: fp.encode(),
        };
        self.last = Some(derived);
        Ok(derived)
    }
}

/// One call's view of the comm, as `exchange` moves messages.
struct CallWire<'a> {
    comm: &'a mut ShmComm,
    /// The peers this rank takes nothing from ([`Call::silent`]).
    silent: Peers,
    fp: &'a Fingerprint,
    encoded: &'a [u8; FINGERPRINT_BYTES],
    /// When the first wait of this call began polling past its spin phase.
    began: Option<Instant>,
}

impl CallWire<'_> {
    /// The error for a message whose fingerprint differs from this call's.
    fn mismatch(&self, peer: usize, theirs: &[u8; FINGERPRINT_BYTES]) -> PluginError {
        self.comm
            .mismatch(peer, &self.comm.counterpart(self.fp, theirs), theirs)
    }

    /// Between polls of a wait for `peer`'s part: a send of `peer` made
    /// before this call (the calls differ), then [`between_polls`](Self::between_polls).
    fn check(
        &mut self,
        peer: usize,
        last_pid_check: &mut Option<Instant>,
    ) -> PluginResult<Duration> {
        if let Some(theirs) = self.comm.sent_before_exchange(peer) {
            return Err(self.mismatch(peer, &theirs));
        }
        self.between_polls(peer, Awaiting::Part, last_pid_check)
    }

    /// Between polls of any wait for `peer`: [`ShmComm::check_wait`], and with
    /// the deferred check a message no peer should have sent
    /// ([`ShmComm::unheard`]) and the call `peer` is in
    /// ([`ShmComm::elsewhere`]): ranks whose calls differ may each wait for a
    /// part the other never sends, or for room while holding the other's
    /// messages; they fail at once.
    fn between_polls(
        &mut self,
        peer: usize,
        awaiting: Awaiting,
        last_pid_check: &mut Option<Instant>,
    ) -> PluginResult<Duration> {
        if self.comm.check == Check::Deferred {
            self.comm.unheard(self.silent, self.fp)?;
            self.comm.elsewhere(peer, self.fp, self.encoded, awaiting)?;
        }
        self.comm
            .check_wait(peer, self.fp, awaiting, &mut self.began, last_pid_check)
    }
}

/// What a wait waits for (its timeout names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Awaiting {
    /// The peer's message.
    Part,
    /// A free slot: the peer to take this rank's earlier messages.
    Room,
}

impl ShmComm {
    /// The mismatch of this rank's call `mine` with what `peer` wrote instead
    /// (a collective's fingerprint, or the one a pending send implies).
    pub(crate) fn mismatch(
        &self,
        peer: usize,
        mine: &Fingerprint,
        theirs: &[u8; FINGERPRINT_BYTES],
    ) -> PluginError {
        let theirs = match Fingerprint::decode(theirs) {
            Ok(f) => f.to_string(),
            Err(g) => format!("something unreadable ({})", g.0),
        };
        PluginError::invalid(mismatch_text(self.rank, &mine.to_string(), peer, &theirs))
    }

    /// Between polls of a wait for `peer` in `what` (this rank's call):
    /// stop for an abort, a peer that gave up or died, or the timeout.
    /// `began`: when the wait began polling past its spin phase.
    pub(crate) fn check_wait(
        &self,
        peer: usize,
        what: &Fingerprint,
        awaiting: Awaiting,
        began: &mut Option<Instant>,
        last_pid_check: &mut Option<Instant>,
    ) -> PluginResult<Duration> {
        if self.host.aborted() {
            return Err(PluginError::remote(format!(
                "stopped waiting for rank {peer} in {what}: the communicator broke or was aborted"
            )));
        }
        if let Some(e) = self.gave_up(peer) {
            return Err(e);
        }
        let now = Instant::now();
        let began = *began.get_or_insert(now);
        let waited = now - began;
        let last = *last_pid_check.get_or_insert(now);
        if now.duration_since(last) >= PEER_CHECK {
            *last_pid_check = Some(now);
            // The region's liveness lock, else (no OFD locks) the pid.
            let alive = self
                .arena
                .holder_alive(peer)
                .unwrap_or_else(|| ferrocx_sdk::proc::pid_alive(self.pids[peer]));
            if !alive {
                return Err(PluginError::remote(format!(
                    "rank {peer} (pid {}) died during {what}",
                    self.pids[peer]
                )));
            }
        }
        let limit = self.host.timeout();
        if waited >= limit {
            let secs = waited.as_secs_f64();
            return Err(PluginError::timeout(match awaiting {
                Awaiting::Part => {
                    format!("rank {peer} never sent its part of {what} (waited {secs:.1}s)")
                }
                Awaiting::Room => format!(
                    "rank {peer} never took (or never credited) the messages rank {} sent it before {what} (waited {secs:.1}s)",
                    self.rank
                ),
            }));
        }
        Ok(waited)
    }

    /// Why `peer` broke its comm, if it did, in its own words: a mismatch it
    /// saw is reported as such.
    #[inline]
    fn gave_up(&self, peer: usize) -> Option<PluginError> {
        self.arena.broken(peer).map(|why| gave_up_error(peer, why))
    }

    /// With the deferred check, after an exchange of `mine` (this rank's
    /// call): a peer this rank took nothing from in it may have posted to it
    /// all the same — in this call or an earlier one, so their calls differ
    /// (a message of a later call may come early: the peer ran ahead) — or
    /// given up on a mismatch it saw in a message of this rank's. Reading a
    /// line no peer wrote since costs a cache hit.
    #[inline]
    fn unheard(&self, silent: Peers, mine: &Fingerprint) -> PluginResult<()> {
        for p in silent {
            if let Some(e) = self.gave_up(p) {
                return Err(e);
            }
            if self.arena.arrived(p, self.coll_taken[p]) {
                self.heard(p, mine)?;
            }
        }
        Ok(())
    }

    /// [`unheard`](Self::unheard) found a message of `peer` it takes nothing
    /// from in `mine`: a later call's (the peer ran ahead, as where roots
    /// alternate), or a mismatch. Out of line: the usual call finds none.
    #[inline(never)]
    fn heard(&self, peer: usize, mine: &Fingerprint) -> PluginResult<()> {
        let (theirs, _, _) = self.arena.message(peer, self.coll_taken[peer]);
        if Fingerprint::decode(&theirs).is_ok_and(|f| f.seq > mine.seq) {
            return Ok(());
        }
        Err(self.mismatch(peer, &self.counterpart(mine, &theirs), &theirs))
    }

    /// With the deferred check, while this rank waits for `peer` in `mine`:
    /// the call `peer` published. The same number with another call is a
    /// mismatch (ranks that disagree about a root may each wait for a part the
    /// other never sends, with nothing posted for [`unheard`](Self::unheard)
    /// to find). Waiting for its part, a peer already past this call that
    /// posted nothing for it differs too (what it posted before moving on is
    /// visible once its later call is). A peer behind is only slow.
    fn elsewhere(
        &self,
        peer: usize,
        mine: &Fingerprint,
        encoded: &[u8; FINGERPRINT_BYTES],
        awaiting: Awaiting,
    ) -> PluginResult<()> {
        let Some((seq, theirs)) = self.arena.published_call(peer) else {
            return Ok(());
        };
        let differs = match seq.cmp(&mine.seq) {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => theirs != *encoded,
            std::cmp::Ordering::Greater => {
                awaiting == Awaiting::Part && !self.arena.arrived(peer, self.coll_taken[peer])
            }
        };
        if differs {
            return Err(self.mismatch(peer, mine, &theirs));
        }
        Ok(())
    }

    /// The call of this rank to name beside a peer's collective message
    /// `theirs` that does not match `mine`: with the deferred check, this
    /// rank's earlier call of the message's number where still recorded (the
    /// peer's message came late), else `mine`.
    fn counterpart(&self, mine: &Fingerprint, theirs: &[u8; FINGERPRINT_BYTES]) -> Fingerprint {
        match Fingerprint::decode(theirs) {
            Ok(f) if matches!(f.kind, CallKind::Coll(_)) && f.seq < mine.seq => self.recent
                [f.seq as usize % MAX_DEPTH]
                .filter(|r| r.seq == f.seq)
                .unwrap_or(*mine),
            _ => *mine,
        }
    }

    /// Whether the collective rings are clocked by the calls themselves, with
    /// no credits: with the synchronous check every exchange posts to and
    /// takes from every peer (fingerprints where no data flows) and the rings
    /// are 2 deep, so a rank posts its message k to a peer only after taking
    /// the peer's k − 1, which the peer posted (release) once its exchange
    /// k − 2 was done with this rank's k − 2: the slot is free by construction.
    /// The credit's store, to a line the peer reads, cost every call a
    /// coherence round trip (2 ranks on the dev VM: 8 B all_reduce 0.34–0.42 →
    /// 0.27–0.31 µs, broadcast 0.33–0.39 → 0.27–0.28).
    fn lockstep(&self) -> bool {
        self.check == Check::Sync
    }

    /// How many of this rank's collective messages of `len` bytes may be
    /// untaken by a peer: a head each, and a slot each over `INLINE` bytes.
    #[inline]
    fn ring(&self, len: usize) -> u64 {
        if len <= INLINE {
            self.heads as u64
        } else {
            self.depth as u64
        }
    }

    /// The fingerprint of a send `peer` made to this rank before its next
    /// collective exchange with it, not taken yet: in the order of calls
    /// between the two ranks, this rank's collective meets that send. `None`
    /// when there is none (or the check is off).
    #[inline]
    pub(crate) fn sent_before_exchange(&self, peer: usize) -> Option<[u8; FINGERPRINT_BYTES]> {
        if self.p2p_bytes == 0 || !self.check.compares() {
            return None;
        }
        let n = self.taken[peer];
        if !self.arena.p2p_arrived(peer, n) {
            return None;
        }
        self.sent_before(peer, n)
    }

    /// [`sent_before_exchange`](Self::sent_before_exchange) once `peer`'s
    /// send `n` is here (rare: a collective waits without one).
    #[cold]
    #[inline(never)]
    fn sent_before(&self, peer: usize, n: u64) -> Option<[u8; FINGERPRINT_BYTES]> {
        let (len, _, epoch) = self.arena.p2p_message(peer, n);
        // A send made after the exchange this rank waits for is a later call's.
        (epoch == self.exchanges[peer] as u32)
            .then(|| Fingerprint::send(n, self.rank, len).encode())
    }
}

impl CallWire<'_> {
    /// Wait until `peer` took enough of this rank's collective messages that
    /// message `k`, of `len` bytes, has a free head and, over `INLINE`
    /// bytes, a free slot (`ring(len)` earlier ones may be untaken).
    fn wait_for_room(&mut self, peer: usize, k: u64, len: usize) -> PluginResult<()> {
        if self.comm.lockstep() {
            // This rank took the peer's message k − 1, which the peer posted
            // after its exchange k − 2 had read this rank's k − 2 from the slot.
            // True by the pairing of posts and takes in every exchange: a tripwire,
            // so that a change that broke the pairing fails instead of overwriting.
            let taken = self.comm.coll_taken[peer];
            if k != taken {
                return Err(PluginError::internal(format!(
                    "lockstep broken: message {k} to rank {peer} after taking {taken} of its messages"
                )));
            }
            return Ok(());
        }
        let ring = self.comm.ring(len);
        if k < self.comm.coll_credits_seen[peer] + ring {
            return Ok(());
        }
        let mut last_pid_check = None;
        wait_for(
            self,
            self.comm.oversubscribed,
            |w| {
                w.comm.coll_credits_seen[peer] = w.comm.arena.credits(Ring::Coll, peer);
                (k < w.comm.coll_credits_seen[peer] + ring).then_some(())
            },
            |w| w.between_polls(peer, Awaiting::Room, &mut last_pid_check),
        )
    }
}

impl Wire for CallWire<'_> {
    unsafe fn post(&mut self, peer: usize, data: *const u8, len: usize) -> PluginResult<()> {
        let k = self.comm.posted[peer];
        self.wait_for_room(peer, k, len)?;
        // SAFETY: `data` readable for `len` ≤ the slot (can_run bounds the block);
        // `peer` is done with message k − ring(len) (wait_for_room: its credit, or in
        // lockstep this rank took its k − 1).
        unsafe { self.comm.arena.post(peer, k, self.encoded, data, len) };
        self.comm.posted[peer] += 1;
        // A deep ring's sender runs ahead: it claims the next message's lines now,
        // while it has room for it, so its next post's stores do not wait on the
        // reader's copies (2 ranks, 8-64 B deferred broadcast: 0.20 -> 0.15 us).
        // A 2-deep ring's reader polls that head as soon as it calls: no gain.
        if self.comm.heads > 2 && k + 1 < self.comm.coll_credits_seen[peer] + self.comm.ring(len) {
            self.comm.arena.prepare_post(peer, k + 1, len);
        }
        Ok(())
    }

    fn take(&mut self, peer: usize, len: usize) -> PluginResult<*const u8> {
        let k = self.comm.coll_taken[peer];
        let mut last_pid_check = None;
        wait_for(
            self,
            self.comm.oversubscribed,
            |w| w.comm.arena.arrived(peer, k).then_some(()),
            |w| w.check(peer, &mut last_pid_check),
        )?;
        let c = &*self.comm;
        if let Some(theirs) = c.sent_before_exchange(peer) {
            return Err(self.mismatch(peer, &theirs));
        }
        let (fp, got, data) = c.arena.message(peer, k);
        if c.heads > 2 {
            c.arena.prefetch(peer, k + 1, len);
        }
        if c.check.compares() && fp != *self.encoded {
            return Err(self.mismatch(peer, &fp));
        }
        if got != len {
            return Err(PluginError::invalid(format!(
                "mismatched sizes: rank {peer} sent {got} bytes for {} but rank {} expected {len}",
                self.fp, c.rank
            )));
        }
        Ok(data)
    }

    fn scratch(&mut self) -> *mut u8 {
        self.comm.arena.scratch()
    }
}

/// The error for a peer that gave up with `why` (rare: out of line).
#[cold]
#[inline(never)]
fn gave_up_error(peer: usize, why: String) -> PluginError {
    if why.starts_with(MISMATCH) {
        PluginError::invalid(why)
    } else {
        PluginError::remote(format!("rank {peer} gave up: {why}"))
    }
}

/// Act on a wait's [`Pause`].
fn pause(p: Pause) {
    match p {
        Pause::Spin => std::hint::spin_loop(),
        Pause::Yield => std::thread::yield_now(),
        Pause::Sleep(d) => std::thread::sleep(d),
    }
}

/// Every wait of a call: poll `s` with `poll` until it yields, pausing
/// between polls as [`Backoff`] says; every few empty polls `check` runs
/// (an error stops the wait; otherwise it says how long the wait has lasted).
/// The first poll comes before any clock read or pause.
pub(crate) fn wait_for<S, T>(
    s: &mut S,
    oversubscribed: bool,
    mut poll: impl FnMut(&mut S) -> Option<T>,
    mut check: impl FnMut(&mut S) -> PluginResult<Duration>,
) -> PluginResult<T> {
    if let Some(t) = poll(s) {
        return Ok(t);
    }
    let mut backoff = Backoff::new(oversubscribed);
    let mut waited = Duration::ZERO;
    loop {
        if backoff.polled() {
            waited = check(s)?;
        }
        pause(backoff.pause(waited));
        if let Some(t) = poll(s) {
            return Ok(t);
        }
    }
}

mod closing;
mod p2p;
#[cfg(test)]
mod tests;
