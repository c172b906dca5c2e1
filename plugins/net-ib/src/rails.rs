//! Rails and failover for one connection, as sans-IO state machines on top of
//! [`ferrocx_sdk::failover`]: [`PathHealth`] (health per (my port, peer port) path,
//! shared by every connection of the context) and [`InFlight`] (which chunks are
//! unacknowledged on which rail). `conn.rs` turns [`Action`]s into verbs work requests
//! and feeds completions back; the tests here drive the same machines with injected
//! completions.
//!
//! A **rail** is one RC QP on one port. A message travels on one rail as RDMA WRITEs of
//! at most `chunk` bytes followed by a **marker**: a WRITE WITH IMMEDIATE of the
//! message's [`Record`](crate::ctrl::Record) into the receiver's record slot. RC orders
//! the marker after the writes of the same QP, so the receiver completes a message when
//! the marker's immediate arrives. The marker is posted only when every unacknowledged
//! chunk of the message is on the marker's rail.
//!
//! **Failover.** A completion with a path error (retry exceeded, response timeout, a
//! flush of a QP that went to error, …) marks the path down, and
//! [`InFlight::fail_rail`] names the chunks to redo:
//! * chunks of messages whose marker was not lost are rewritten on the surviving rail
//!   (into the same, still unfinished, receive buffer), then the marker follows there;
//! * a message whose marker was lost may or may not have been completed by the
//!   receiver (the write may have landed with only its ACK lost). Rewriting it could
//!   scribble over a buffer the receiver has already handed back, so the sender first
//!   reads the receiver's record slot over the surviving rail (RDMA READ): the marker's
//!   bytes are there if and only if it landed, and the failed QP, now in error, can
//!   never place it later. Landed: the message is complete. Not landed: its lost
//!   chunks and the marker are redone on the surviving rail.
//!
//! No write therefore lands in a receive buffer after its message completed.
//!
//! **Recovery.** After the quiet window of [`PathHealth`] the sender re-arms its failed
//! QP (RESET → RTS with new PSNs) and asks the receiver, over the surviving rail, to do
//! the same with its end ([`RailAction::Rearm`]); once the receiver acknowledges, a
//! probe (a small RDMA WRITE) on the re-armed rail decides: success brings the path
//! back (new messages use it again), failure re-arms the window, doubled.

use crate::ctrl::RAILS;
use ferrocx_sdk::failover::{ChunkId, InFlight, PathHealth};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Work completion status values (`enum ibv_wc_status`, stable verbs ABI).
pub mod wc {
    #![allow(missing_docs)]
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_EEC_OP_ERR: u32 = 3;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const LOC_RDD_VIOL_ERR: u32 = 14;
    pub const REM_INV_RD_REQ_ERR: u32 = 15;
    pub const REM_ABORT_ERR: u32 = 16;
    pub const INV_EECN_ERR: u32 = 17;
    pub const INV_EEC_STATE_ERR: u32 = 18;
    pub const FATAL_ERR: u32 = 19;
    pub const RESP_TIMEOUT_ERR: u32 = 20;
    pub const GENERAL_ERR: u32 = 21;
}

/// What a completion status means for the rail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Success.
    Ok,
    /// The path (link, switch, peer port, QP) failed: fail over.
    PathFailure,
    /// A local or protocol error (bad key, bad length): failing over would not help.
    Fatal,
}

/// Classify a work completion status.
pub fn classify(status: u32) -> Outcome {
    match status {
        wc::SUCCESS => Outcome::Ok,
        wc::WR_FLUSH_ERR
        | wc::BAD_RESP_ERR
        | wc::REM_OP_ERR
        | wc::RETRY_EXC_ERR
        | wc::REM_ABORT_ERR
        | wc::FATAL_ERR
        | wc::RESP_TIMEOUT_ERR
        | wc::GENERAL_ERR => Outcome::PathFailure,
        _ => Outcome::Fatal,
    }
}

/// Name of a status, as `ibv_wc_status_str` would print it (for logs and errors).
pub fn status_name(status: u32) -> &'static str {
    match status {
        wc::SUCCESS => "success",
        wc::LOC_LEN_ERR => "local length error",
        wc::LOC_QP_OP_ERR => "local QP operation error",
        wc::LOC_EEC_OP_ERR => "local EE context operation error",
        wc::LOC_PROT_ERR => "local protection error",
        wc::WR_FLUSH_ERR => "work request flushed error",
        wc::MW_BIND_ERR => "memory bind operation error",
        wc::BAD_RESP_ERR => "bad response error",
        wc::LOC_ACCESS_ERR => "local access error",
        wc::REM_INV_REQ_ERR => "remote invalid request error",
        wc::REM_ACCESS_ERR => "remote access error",
        wc::REM_OP_ERR => "remote operation error",
        wc::RETRY_EXC_ERR => "transport retry counter exceeded",
        wc::RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
        wc::LOC_RDD_VIOL_ERR => "local RDD violation error",
        wc::REM_INV_RD_REQ_ERR => "remote invalid RD request",
        wc::REM_ABORT_ERR => "aborted error",
        wc::INV_EECN_ERR => "invalid EE context number",
        wc::INV_EEC_STATE_ERR => "invalid EE context state",
        wc::FATAL_ERR => "fatal error",
        wc::RESP_TIMEOUT_ERR => "response timeout error",
        wc::GENERAL_ERR => "general error",
        _ => "unknown status",
    }
}

/// What a work request is, carried in its `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrKind {
    /// One chunk of a message (RDMA WRITE).
    Data = 0,
    /// A message's marker (WRITE WITH IMM of its record).
    Marker = 1,
    /// Failover: read the receiver's record slot.
    ReadRecord = 2,
    /// Receiver: a FIFO entry (RDMA WRITE into the sender's FIFO).
    Fifo = 3,
    /// Recovery probe.
    Probe = 4,
    /// Re-arm request (sender → receiver mailbox).
    Rearm = 5,
    /// Re-arm acknowledgement (receiver → sender mailbox).
    RearmAck = 6,
    /// A posted receive (consumed by a WRITE WITH IMM).
    Recv = 7,
}

impl WrKind {
    fn from_bits(b: u64) -> WrKind {
        match b {
            0 => WrKind::Data,
            1 => WrKind::Marker,
            2 => WrKind::ReadRecord,
            3 => WrKind::Fifo,
            4 => WrKind::Probe,
            5 => WrKind::Rearm,
            6 => WrKind::RearmAck,
            _ => WrKind::Recv,
        }
    }
}

const MSG_BITS: u32 = 40;
const INDEX_BITS: u32 = 20;
/// Largest chunk index; a message has at most this many data chunks (the marker takes
/// index `nchunks`).
pub const MAX_CHUNKS: u32 = (1 << INDEX_BITS) - 2;

/// The decoded `wr_id` of a work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrId {
    /// Kind.
    pub kind: WrKind,
    /// Rail (0 or 1).
    pub rail: usize,
    /// Message sequence number (low 40 bits).
    pub msg: u64,
    /// Chunk index (data chunks; the marker is `nchunks`).
    pub index: u32,
}

impl WrId {
    /// Pack into 64 bits: kind (3) | rail (1) | index (20) | msg (40).
    pub fn encode(self) -> u64 {
        ((self.kind as u64) << 61)
            | ((self.rail as u64 & 1) << 60)
            | ((self.index as u64 & ((1 << INDEX_BITS) - 1)) << MSG_BITS)
            | (self.msg & ((1 << MSG_BITS) - 1))
    }

    /// Unpack.
    pub fn decode(raw: u64) -> WrId {
        WrId {
            kind: WrKind::from_bits(raw >> 61),
            rail: ((raw >> 60) & 1) as usize,
            index: ((raw >> MSG_BITS) & ((1 << INDEX_BITS) - 1)) as u32,
            msg: raw & ((1 << MSG_BITS) - 1),
        }
    }
}

/// One path: my port and the peer's port at the other end of a rail.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathKey {
    /// My device and port, `mlx5_0:1`.
    pub local: String,
    /// The peer port's GID.
    pub remote_gid: [u8; 16],
    /// The peer port's LID (InfiniBand).
    pub remote_lid: u16,
}

/// State of this connection's QP on one rail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RailState {
    /// The QP works (its path may still be down: then it is probed before use).
    Ready,
    /// The QP is in error: it must be re-armed before any use.
    Broken,
    /// Re-armed locally; waiting for the peer to acknowledge generation `gen`.
    Rearming {
        /// Generation asked for.
        gen: u64,
        /// When it was asked.
        since: Instant,
    },
    /// A probe is in flight.
    Probing,
}

/// Things worth a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Rail `rail` failed with `status`; traffic moves to `to` (none: nowhere).
    /// `newly` is false when the path was already known down (another connection).
    Failover {
        /// Failed rail.
        rail: usize,
        /// Completion status.
        status: u32,
        /// Surviving rail.
        to: Option<usize>,
        /// First report of this path's failure in the process.
        newly: bool,
    },
    /// The path of `rail` works again after `down_for`.
    Recovered {
        /// Rail.
        rail: usize,
        /// How long it was down.
        down_for: Duration,
    },
    /// A probe of `rail` failed; the window is re-armed (doubled).
    ProbeFailed {
        /// Rail.
        rail: usize,
    },
    /// The peer did not acknowledge a re-arm in time.
    RearmTimedOut {
        /// Rail.
        rail: usize,
    },
}

/// Recovery work for `conn.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RailAction {
    /// Post a probe write on `rail`.
    Probe {
        /// Rail to probe.
        rail: usize,
    },
    /// Reset `rail`'s QP to RTS with fresh PSNs and send a re-arm request of generation
    /// `gen` to the peer over `via`.
    Rearm {
        /// Rail to re-arm.
        rail: usize,
        /// Working rail that carries the request.
        via: usize,
        /// Generation.
        gen: u64,
    },
}

/// The rails of one connection end.
pub struct RailSet<K> {
    paths: Vec<K>,
    health: Arc<PathHealth<K>>,
    state: Vec<RailState>,
    gen: u64,
    /// The sending end drives re-arms; the receiving end follows.
    drives_rearm: bool,
    events: Vec<Event>,
}

impl<K: std::hash::Hash + Eq + Clone> RailSet<K> {
    /// Rails with these paths (1 or 2), health shared with the context.
    pub fn new(paths: Vec<K>, health: Arc<PathHealth<K>>, drives_rearm: bool) -> Self {
        assert!(!paths.is_empty() && paths.len() <= RAILS);
        let n = paths.len();
        RailSet {
            paths,
            health,
            state: vec![RailState::Ready; n],
            gen: 0,
            drives_rearm,
            events: Vec::new(),
        }
    }

    /// Number of rails.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Always false (a connection has at least one rail).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The path of `rail`.
    pub fn path(&self, rail: usize) -> &K {
        &self.paths[rail]
    }

    /// This connection's state of `rail`.
    pub fn state(&self, rail: usize) -> RailState {
        self.state[rail]
    }

    /// Whether new work may go to `rail`: the QP works and its path is up.
    pub fn usable(&self, rail: usize) -> bool {
        self.state[rail] == RailState::Ready && self.health.is_up(&self.paths[rail])
    }

    /// The rail new work goes to: the lowest usable one (the primary when healthy).
    pub fn active(&self) -> Option<usize> {
        (0..self.len()).find(|&r| self.usable(r))
    }

    /// Whether the connection can still hope to move data: some rail works, or can be
    /// re-armed through a working one, or is being probed or re-armed.
    pub fn alive(&self) -> bool {
        self.state.iter().any(|s| *s != RailState::Broken)
    }

    /// Drain the events since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// A completion on `rail` failed with a path error at `now`. Returns true when this
    /// is news for this connection (the rail was working until now).
    pub fn failed(&mut self, rail: usize, status: u32, now: Instant) -> bool {
        match self.state[rail] {
            RailState::Broken | RailState::Rearming { .. } => false,
            s => {
                self.state[rail] = RailState::Broken;
                let path = &self.paths[rail];
                let newly = self.health.fail(path, now);
                if s == RailState::Probing {
                    self.health.probe_failed(path, now);
                }
                let to = self.active();
                self.events.push(Event::Failover {
                    rail,
                    status,
                    to,
                    newly,
                });
                true
            }
        }
    }

    /// Recovery work due at `now`.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<RailAction>) {
        for r in 0..self.len() {
            let path = self.paths[r].clone();
            match self.state[r] {
                RailState::Ready => {
                    if !self.health.is_up(&path) && self.health.probe_due(&path, now) {
                        self.state[r] = RailState::Probing;
                        out.push(RailAction::Probe { rail: r });
                    }
                }
                RailState::Broken => {
                    let due = self.health.is_up(&path) || self.health.probe_due(&path, now);
                    let via = (0..self.len()).find(|&v| v != r && self.usable(v));
                    if let (true, true, Some(via)) = (self.drives_rearm, due, via) {
                        self.gen += 1;
                        self.state[r] = RailState::Rearming {
                            gen: self.gen,
                            since: now,
                        };
                        out.push(RailAction::Rearm {
                            rail: r,
                            via,
                            gen: self.gen,
                        });
                    }
                }
                RailState::Rearming { since, .. } => {
                    if now.saturating_duration_since(since) >= self.health.recovery() {
                        self.health.probe_failed(&path, now);
                        self.state[r] = RailState::Broken;
                        self.events.push(Event::RearmTimedOut { rail: r });
                    }
                }
                RailState::Probing => {}
            }
        }
    }

    /// The peer acknowledged re-arm generation `gen`: the rail's QP works again.
    pub fn rearm_acked(&mut self, gen: u64) -> Option<usize> {
        let r = (0..self.len())
            .find(|&r| matches!(self.state[r], RailState::Rearming { gen: g, .. } if g == gen))?;
        self.state[r] = RailState::Ready;
        Some(r)
    }

    /// Receiving end: the peer re-armed `rail` and this end reset its QP to RTS.
    pub fn rearmed_by_peer(&mut self, rail: usize) {
        self.state[rail] = RailState::Ready;
    }

    /// A probe of `rail` completed.
    pub fn probe_done(&mut self, rail: usize, ok: bool, now: Instant) {
        let path = self.paths[rail].clone();
        if ok {
            if self.state[rail] == RailState::Probing {
                self.state[rail] = RailState::Ready;
            }
            if let Some(down_for) = self.health.recovered(&path, now) {
                self.events.push(Event::Recovered { rail, down_for });
            }
        } else if self.state[rail] == RailState::Probing {
            self.state[rail] = RailState::Broken;
            self.health.probe_failed(&path, now);
            self.events.push(Event::ProbeFailed { rail });
        }
    }
}

/// Send-queue slots kept free for control work (markers, reads, probes, re-arms).
pub const RESERVED_SLOTS: usize = 4;
/// Of those, slots markers and record reads leave free for probes and re-arms (one
/// poll may post both on one rail), which are posted without asking for credit.
const RAIL_ACTION_SLOTS: usize = 2;

/// Sending-end work for `conn.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// RDMA WRITE `len` bytes at `offset` of message `msg` (chunk `index`) on `rail`.
    Data {
        /// Rail.
        rail: usize,
        /// Message.
        msg: u64,
        /// Chunk.
        index: u32,
        /// Byte offset in the message.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// WRITE WITH IMM of message `msg`'s record on `rail` (chunk index `index`).
    Marker {
        /// Rail.
        rail: usize,
        /// Message.
        msg: u64,
        /// The marker's chunk index (the number of data chunks).
        index: u32,
    },
    /// RDMA READ of the receiver's record slot of `msg` on `rail`.
    ReadRecord {
        /// Rail.
        rail: usize,
        /// Message.
        msg: u64,
    },
    /// Recovery work.
    Rail(RailAction),
}

/// Where one message stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MsgState {
    /// Chunks or the marker still to post or to be acknowledged.
    Sending,
    /// The marker was lost with its rail: reading the record to learn whether it landed.
    Resolving {
        /// Data chunks that were lost with the rail.
        lost: Vec<u32>,
        /// A read is in flight.
        read_posted: bool,
    },
    /// Complete at the receiver.
    Done,
    /// Failed for good.
    Failed(String),
}

struct Msg {
    len: u64,
    nchunks: u32,
    rail: Option<usize>,
    next: u32,
    resend: VecDeque<u32>,
    marker_posted: bool,
    /// Unacknowledged data chunks on the wire, per rail.
    outstanding: [u32; RAILS],
    state: MsgState,
}

/// The sending end of one connection. See the module documentation.
pub struct SendEngine<K> {
    /// The rails.
    pub rails: RailSet<K>,
    chunk: u64,
    inflight: InFlight,
    msgs: BTreeMap<u64, Msg>,
    credits: Vec<usize>,
    fatal: Option<String>,
}

impl<K: std::hash::Hash + Eq + Clone> SendEngine<K> {
    /// An engine over `rails` writing chunks of `chunk` bytes, with `sq_depth` send-queue
    /// slots per rail.
    pub fn new(rails: RailSet<K>, chunk: usize, sq_depth: usize) -> Self {
        assert!(sq_depth > RESERVED_SLOTS && chunk > 0);
        let n = rails.len();
        SendEngine {
            rails,
            chunk: chunk as u64,
            inflight: InFlight::new(),
            msgs: BTreeMap::new(),
            credits: vec![sq_depth; n],
            fatal: None,
        }
    }

    /// Data chunks of a message of `len` bytes (0 for an empty message).
    pub fn chunks(&self, len: u64) -> u64 {
        len.div_ceil(self.chunk)
    }

    /// Queue message `msg` of `len` bytes (`len` 0, or a truncated message announced
    /// only by its marker, has no data chunk).
    pub fn push(&mut self, msg: u64, len: u64, data: bool) -> Result<(), String> {
        let nchunks = if data { self.chunks(len) } else { 0 };
        if nchunks > MAX_CHUNKS as u64 {
            return Err(format!(
                "message of {len} bytes needs {nchunks} chunks of {} bytes, more than {MAX_CHUNKS} (raise FERROCX_IB_CHUNK_BYTES)",
                self.chunk
            ));
        }
        let nchunks = nchunks as u32;
        let state = match &self.fatal {
            Some(e) => MsgState::Failed(e.clone()),
            None => MsgState::Sending,
        };
        self.inflight.add_message(msg, nchunks + 1);
        self.msgs.insert(
            msg,
            Msg {
                len,
                nchunks,
                rail: None,
                next: 0,
                resend: VecDeque::new(),
                marker_posted: false,
                outstanding: [0; RAILS],
                state,
            },
        );
        Ok(())
    }

    /// The state of message `msg` (None when unknown or already reaped).
    pub fn state(&self, msg: u64) -> Option<&MsgState> {
        self.msgs.get(&msg).map(|m| &m.state)
    }

    /// Forget message `msg` once its request has reported Done or Failed.
    pub fn reap(&mut self, msg: u64) {
        if let Some(m) = self.msgs.get(&msg) {
            if matches!(m.state, MsgState::Done | MsgState::Failed(_)) {
                self.msgs.remove(&msg);
            }
        }
    }

    /// The error that broke the connection, if any.
    pub fn fatal(&self) -> Option<&str> {
        self.fatal.as_deref()
    }

    /// Messages not reaped.
    pub fn pending(&self) -> usize {
        self.msgs.len()
    }

    fn fail_all(&mut self, why: String) {
        for m in self.msgs.values_mut() {
            if !matches!(m.state, MsgState::Done | MsgState::Failed(_)) {
                m.state = MsgState::Failed(why.clone());
            }
        }
        self.inflight.clear();
        self.fatal.get_or_insert(why);
    }

    fn take_credit(&mut self, rail: usize, reserve: usize) -> bool {
        if self.credits[rail] > reserve {
            self.credits[rail] -= 1;
            true
        } else {
            false
        }
    }

    /// Work to post at `now`, in order.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.fatal.is_some() {
            return;
        }
        let mut ra = Vec::new();
        self.rails.poll(now, &mut ra);
        for a in ra {
            let rail = match a {
                RailAction::Probe { rail } => rail,
                RailAction::Rearm { via, .. } => via,
            };
            // Reserved slots guarantee room for control work.
            self.credits[rail] = self.credits[rail].saturating_sub(1);
            out.push(Action::Rail(a));
        }
        if !self.rails.alive() {
            self.fail_all("every rail to the peer failed".into());
            return;
        }
        let seqs: Vec<u64> = self.msgs.keys().copied().collect();
        for seq in seqs {
            self.poll_msg(seq, out);
        }
    }

    fn poll_msg(&mut self, seq: u64, out: &mut Vec<Action>) {
        let active = self.rails.active();
        let chunk = self.chunk;
        let Some(m) = self.msgs.get(&seq) else { return };
        match &m.state {
            MsgState::Resolving {
                read_posted: false, ..
            } => {
                if let Some(r) = active {
                    if self.take_credit(r, RAIL_ACTION_SLOTS) {
                        let m = self.msgs.get_mut(&seq).expect("present");
                        if let MsgState::Resolving { read_posted, .. } = &mut m.state {
                            *read_posted = true;
                        }
                        out.push(Action::ReadRecord { rail: r, msg: seq });
                    }
                }
                return;
            }
            MsgState::Sending => {}
            _ => return,
        }
        // Move to the active rail when the message's rail can no longer take work.
        let rail = match m.rail {
            Some(r) if self.rails.usable(r) => r,
            _ => match active {
                Some(r) => r,
                None => return, // wait for a re-arm or a probe
            },
        };
        self.msgs.get_mut(&seq).expect("present").rail = Some(rail);
        loop {
            let m = self.msgs.get(&seq).expect("present");
            let index = if let Some(&i) = m.resend.front() {
                i
            } else if m.next < m.nchunks {
                m.next
            } else {
                break;
            };
            if !self.take_credit(rail, RESERVED_SLOTS) {
                return;
            }
            let m = self.msgs.get_mut(&seq).expect("present");
            if m.resend.front() == Some(&index) {
                m.resend.pop_front();
            } else {
                m.next += 1;
            }
            m.outstanding[rail] += 1;
            self.inflight.sent(ChunkId { msg: seq, index }, rail);
            let offset = index as u64 * chunk;
            out.push(Action::Data {
                rail,
                msg: seq,
                index,
                offset,
                len: chunk.min(m.len - offset),
            });
        }
        let m = self.msgs.get(&seq).expect("present");
        let others_clear = (0..RAILS).all(|r| r == rail || m.outstanding[r] == 0);
        if !m.marker_posted && others_clear && self.take_credit(rail, RAIL_ACTION_SLOTS) {
            let m = self.msgs.get_mut(&seq).expect("present");
            m.marker_posted = true;
            let index = m.nchunks;
            self.inflight.sent(ChunkId { msg: seq, index }, rail);
            out.push(Action::Marker {
                rail,
                msg: seq,
                index,
            });
        }
    }

    fn ack(&mut self, rail: usize, msg: u64, index: u32) {
        let id = ChunkId { msg, index };
        let first = !self.inflight.is_acked(id);
        let done = self.inflight.acked(id);
        if let Some(m) = self.msgs.get_mut(&msg) {
            if first && index < m.nchunks {
                m.outstanding[rail] = m.outstanding[rail].saturating_sub(1);
            }
            if done.is_some() {
                m.state = MsgState::Done;
            }
        }
    }

    fn rail_lost(&mut self, rail: usize) {
        let lost = self.inflight.fail_rail(rail);
        let mut by_msg: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for c in lost {
            by_msg.entry(c.msg).or_default().push(c.index);
        }
        for (seq, idxs) in by_msg {
            let Some(m) = self.msgs.get_mut(&seq) else {
                continue;
            };
            let data: Vec<u32> = idxs.iter().copied().filter(|&i| i < m.nchunks).collect();
            m.outstanding[rail] = m.outstanding[rail].saturating_sub(data.len() as u32);
            if idxs.contains(&m.nchunks) {
                m.marker_posted = false;
                m.state = MsgState::Resolving {
                    lost: data,
                    read_posted: false,
                };
            } else {
                m.resend.extend(data);
                m.resend.make_contiguous().sort_unstable();
            }
        }
    }

    /// A send-queue completion on `rail` for work request `wr` with `status` at `now`.
    pub fn on_completion(&mut self, rail: usize, wr: WrId, status: u32, now: Instant) {
        if let Some(c) = self.credits.get_mut(rail) {
            *c += 1;
        }
        match classify(status) {
            Outcome::Ok => match wr.kind {
                WrKind::Data | WrKind::Marker => self.ack(rail, wr.msg, wr.index),
                WrKind::Probe => self.rails.probe_done(rail, true, now),
                _ => {}
            },
            Outcome::PathFailure => {
                if wr.kind == WrKind::Probe {
                    self.rails.probe_done(rail, false, now);
                } else {
                    self.rails.failed(rail, status, now);
                }
                if wr.kind == WrKind::ReadRecord {
                    if let Some(MsgState::Resolving { read_posted, .. }) =
                        self.msgs.get_mut(&wr.msg).map(|m| &mut m.state)
                    {
                        *read_posted = false;
                    }
                }
                self.rail_lost(rail);
            }
            Outcome::Fatal => self.fail_all(format!(
                "{:?} work request on rail {rail} completed with {} ({status})",
                wr.kind,
                status_name(status)
            )),
        }
    }

    /// A work request posted on `rail` outside the engine (its completion comes back
    /// through [`on_completion`](Self::on_completion)): take its send-queue slot.
    pub fn reserve(&mut self, rail: usize) {
        self.credits[rail] = self.credits[rail].saturating_sub(1);
    }

    /// `rail`'s QP was reset (re-arm): work requests still on it vanished without
    /// completions. Treat them as lost and give the send queue its slots back.
    pub fn rail_reset(&mut self, rail: usize, sq_depth: usize) {
        self.rail_lost(rail);
        self.credits[rail] = sq_depth;
    }

    /// Resolve message `msg` after its record read: `landed` when the receiver's record
    /// slot holds this message's marker.
    pub fn resolved(&mut self, msg: u64, landed: bool) {
        let Some(m) = self.msgs.get_mut(&msg) else {
            return;
        };
        let MsgState::Resolving { lost, .. } = &m.state else {
            return;
        };
        let lost = lost.clone();
        if landed {
            let marker = m.nchunks;
            for i in lost.into_iter().chain([marker]) {
                self.inflight.acked(ChunkId { msg, index: i });
            }
            m.state = MsgState::Done;
        } else {
            m.resend.extend(lost);
            m.resend.make_contiguous().sort_unstable();
            m.state = MsgState::Sending;
        }
    }
}

/// The receiving end's writes into the sender's FIFO, over the rails, redone on the
/// surviving rail when one fails (a FIFO entry is idempotent: same bytes, same slot).
pub struct FifoWriter<K> {
    /// The rails.
    pub rails: RailSet<K>,
    inflight: InFlight,
    pending: VecDeque<u64>,
    credits: Vec<usize>,
    fatal: Option<String>,
}

/// Receiving-end work for `conn.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvAction {
    /// Write FIFO entry `seq` on `rail`.
    Fifo {
        /// Rail.
        rail: usize,
        /// Receive sequence number.
        seq: u64,
    },
    /// Recovery work (probes only: the sender drives re-arms).
    Rail(RailAction),
}

impl<K: std::hash::Hash + Eq + Clone> FifoWriter<K> {
    /// A writer over `rails` with `sq_depth` send-queue slots per rail.
    pub fn new(rails: RailSet<K>, sq_depth: usize) -> Self {
        let n = rails.len();
        FifoWriter {
            rails,
            inflight: InFlight::new(),
            pending: VecDeque::new(),
            credits: vec![sq_depth; n],
            fatal: None,
        }
    }

    /// Queue FIFO entry `seq`.
    pub fn push(&mut self, seq: u64) {
        self.inflight.add_message(seq, 1);
        self.pending.push_back(seq);
    }

    /// The error that broke the connection, if any.
    pub fn fatal(&self) -> Option<&str> {
        self.fatal.as_deref()
    }

    /// Entries not yet acknowledged (written or not).
    pub fn unfinished(&self) -> usize {
        self.inflight.messages()
    }

    /// Work to post at `now`.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<RecvAction>) {
        if self.fatal.is_some() {
            return;
        }
        let mut ra = Vec::new();
        self.rails.poll(now, &mut ra);
        for a in ra {
            if let RailAction::Probe { rail } = a {
                self.credits[rail] = self.credits[rail].saturating_sub(1);
            }
            out.push(RecvAction::Rail(a));
        }
        if !self.rails.alive() {
            self.fatal = Some("every rail to the peer failed".into());
            return;
        }
        while let Some(&seq) = self.pending.front() {
            let Some(rail) = self.rails.active() else {
                break;
            };
            if self.credits[rail] <= 1 {
                break;
            }
            self.credits[rail] -= 1;
            self.pending.pop_front();
            self.inflight.sent(ChunkId { msg: seq, index: 0 }, rail);
            out.push(RecvAction::Fifo { rail, seq });
        }
    }

    /// A work request posted on `rail` outside the writer (its completion comes back
    /// through [`on_completion`](Self::on_completion)): take its send-queue slot.
    pub fn reserve(&mut self, rail: usize) {
        self.credits[rail] = self.credits[rail].saturating_sub(1);
    }

    /// `rail`'s QP was reset at the peer's request: FIFO writes still on it vanished
    /// without completions; write them again and give the send queue its slots back.
    pub fn rail_reset(&mut self, rail: usize, sq_depth: usize) {
        self.requeue(rail);
        self.credits[rail] = sq_depth;
    }

    fn requeue(&mut self, rail: usize) {
        let mut lost: Vec<u64> = self
            .inflight
            .fail_rail(rail)
            .into_iter()
            .map(|c| c.msg)
            .collect();
        lost.reverse();
        for seq in lost {
            if !self.pending.contains(&seq) {
                self.pending.push_front(seq);
            }
        }
    }

    /// A send-queue completion on `rail`.
    pub fn on_completion(&mut self, rail: usize, wr: WrId, status: u32, now: Instant) {
        if let Some(c) = self.credits.get_mut(rail) {
            *c += 1;
        }
        match classify(status) {
            Outcome::Ok => match wr.kind {
                WrKind::Fifo => {
                    self.inflight.acked(ChunkId {
                        msg: wr.msg,
                        index: 0,
                    });
                }
                WrKind::Probe => self.rails.probe_done(rail, true, now),
                _ => {}
            },
            Outcome::PathFailure => {
                if wr.kind == WrKind::Probe {
                    self.rails.probe_done(rail, false, now);
                } else {
                    self.rails.failed(rail, status, now);
                }
                self.requeue(rail);
            }
            Outcome::Fatal => {
                self.fatal = Some(format!(
                    "{:?} work request on rail {rail} completed with {} ({status})",
                    wr.kind,
                    status_name(status)
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;
