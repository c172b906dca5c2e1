//! [`RailSet`]: the sending end of one connection striped over rails — which rails
//! may carry data, which chunk goes next on a rail, what the receiver acknowledged,
//! what must go again after a failure — as a state machine the transport drives with
//! its own I/O (sockets, queue pairs) and its own clock.
//!
//! A rail is [`Up`](RailState::Up) (carries chunks), [`Down`](RailState::Down)
//! (failed; carries nothing) or [`Probing`](RailState::Probing) (reconnecting; still
//! carries nothing). A failure hands the rail's unacknowledged chunks to the resend
//! queue, which every up rail drains before it takes new chunks. When the last up
//! rail fails the connection is **stranded**: the transport probes every down rail at
//! once instead of waiting out the recovery window, and gives up only when the
//! connection stayed stranded longer than the strand limit ([`RailSet::dead`]).
//!
//! In unacknowledged mode (one rail, nowhere to resend) a message is done once its
//! chunks are written; in acknowledged mode once each chunk was acknowledged.

use super::inflight::{ChunkId, InFlight};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What a rail may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RailState {
    /// Carries chunks.
    Up,
    /// Failed: carries nothing until a probe brings it back.
    Down,
    /// Being probed (reconnected): carries nothing until the probe succeeds.
    Probing,
}

/// A chunk to put on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Which chunk of which message.
    pub id: ChunkId,
    /// The message's tag, as given to [`RailSet::post`] (a buffer address, say).
    pub tag: usize,
    /// Byte offset in the message.
    pub offset: u64,
    /// Bytes of the chunk.
    pub len: usize,
    /// Bytes of the whole message.
    pub total: u64,
}

/// A message that is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Its sequence number.
    pub seq: u64,
    /// Its length.
    pub len: u64,
}

/// What happened to a connection's rails so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RailStats {
    /// Up rails that failed.
    pub failovers: u64,
    /// Probes that failed.
    pub probes_failed: u64,
    /// Probes that brought a rail back.
    pub recoveries: u64,
    /// Chunks handed to another rail after a failure.
    pub resent_chunks: u64,
    /// Their bytes.
    pub resent_bytes: u64,
}

struct Msg {
    seq: u64,
    tag: usize,
    len: u64,
    nchunks: u32,
    written: u32,
    done: bool,
}

/// The sending end of one connection over `nrails` rails (see the module docs).
pub struct RailSet {
    chunk: usize,
    window: usize,
    acknowledged: bool,
    strand_limit: Duration,
    rails: Vec<RailState>,
    msgs: VecDeque<Msg>,
    /// Messages of `msgs` not done (done ones stay until those before them are).
    undone: usize,
    next_seq: u64,
    /// Next chunk never sent: (message, chunk index).
    next_new: (u64, u32),
    resend: VecDeque<ChunkId>,
    inflight: InFlight,
    /// Bytes of new chunks sent and not yet acknowledged (acknowledged mode).
    unacked: usize,
    stranded_since: Option<Instant>,
    stats: RailStats,
}

/// Chunks of a message of `len` bytes (an empty message is one empty chunk).
pub fn nchunks(len: u64, chunk: usize) -> u32 {
    len.div_ceil(chunk as u64).max(1) as u32
}

/// Bytes of chunk `index` of a message of `len` bytes.
pub fn chunk_len(len: u64, chunk: usize, index: u32) -> usize {
    let start = u64::from(index) * chunk as u64;
    len.saturating_sub(start).min(chunk as u64) as usize
}

impl RailSet {
    /// `nrails` up rails cutting messages into `chunk`-byte chunks. In acknowledged
    /// mode at most `window` bytes of new chunks are unacknowledged at a time, and a
    /// connection stranded (no rail up) longer than `strand_limit` is [dead](Self::dead).
    pub fn new(
        nrails: usize,
        chunk: usize,
        window: usize,
        acknowledged: bool,
        strand_limit: Duration,
    ) -> Self {
        RailSet {
            chunk: chunk.max(1),
            window,
            acknowledged,
            strand_limit,
            rails: vec![RailState::Up; nrails],
            msgs: VecDeque::new(),
            undone: 0,
            next_seq: 0,
            next_new: (0, 0),
            resend: VecDeque::new(),
            inflight: InFlight::new(),
            unacked: 0,
            stranded_since: None,
            stats: RailStats::default(),
        }
    }

    /// Rails.
    pub fn nrails(&self) -> usize {
        self.rails.len()
    }

    /// What rail `r` may do.
    pub fn state(&self, r: usize) -> RailState {
        self.rails[r]
    }

    /// The rails that carry chunks.
    pub fn up_rails(&self) -> Vec<usize> {
        (0..self.rails.len())
            .filter(|&r| self.rails[r] == RailState::Up)
            .collect()
    }

    /// How many rails carry chunks (no allocation: the transport asks on every turn).
    pub fn up_count(&self) -> usize {
        self.rails.iter().filter(|&&r| r == RailState::Up).count()
    }

    /// Whether no rail is up (the transport then probes every down rail at once).
    pub fn stranded(&self) -> bool {
        self.stranded_since.is_some()
    }

    /// Whether the connection has been stranded longer than the strand limit.
    pub fn dead(&self, now: Instant) -> bool {
        self.stranded_since
            .is_some_and(|t| now.saturating_duration_since(t) > self.strand_limit)
    }

    /// Counters so far.
    pub fn stats(&self) -> RailStats {
        self.stats
    }

    /// Post a message of `len` bytes; `tag` comes back with each of its chunks.
    pub fn post(&mut self, tag: usize, len: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let n = nchunks(len, self.chunk);
        if self.acknowledged {
            self.inflight.add_message(seq, n);
        }
        self.undone += 1;
        self.msgs.push_back(Msg {
            seq,
            tag,
            len,
            nchunks: n,
            written: 0,
            done: false,
        });
        seq
    }

    /// Messages posted and not done.
    pub fn messages(&self) -> usize {
        self.undone
    }

    /// Whether message `seq` is posted and not done.
    pub fn pending(&self, seq: u64) -> bool {
        self.msg(seq).is_some_and(|m| !m.done)
    }

    fn msg(&self, seq: u64) -> Option<&Msg> {
        let front = self.msgs.front()?.seq;
        self.msgs
            .get(usize::try_from(seq.checked_sub(front)?).ok()?)
    }

    fn msg_mut(&mut self, seq: u64) -> Option<&mut Msg> {
        let front = self.msgs.front()?.seq;
        self.msgs
            .get_mut(usize::try_from(seq.checked_sub(front)?).ok()?)
    }

    fn complete(&mut self, seq: u64) -> Option<Done> {
        let m = self.msg_mut(seq)?;
        if m.done {
            return None;
        }
        m.done = true;
        let done = Done { seq, len: m.len };
        self.undone -= 1;
        while self.msgs.front().is_some_and(|m| m.done) {
            self.msgs.pop_front();
        }
        Some(done)
    }

    /// The next chunk for rail `r`: resends first, then new chunks (within the window
    /// in acknowledged mode). `None` when the rail is not up or nothing may go now.
    pub fn next_chunk(&mut self, r: usize) -> Option<Chunk> {
        if self.rails[r] != RailState::Up {
            return None;
        }
        let id = loop {
            match self.resend.pop_front() {
                // Acknowledged meanwhile (its first copy got through after all).
                Some(id) if self.inflight.is_acked(id) => continue,
                Some(id) => break id,
                None => {
                    let (seq, index) = self.next_new;
                    let m = self.msg(seq)?;
                    let len = chunk_len(m.len, self.chunk, index);
                    if self.acknowledged && self.unacked > 0 && self.unacked + len > self.window {
                        return None;
                    }
                    self.next_new = if index + 1 == m.nchunks {
                        (seq + 1, 0)
                    } else {
                        (seq, index + 1)
                    };
                    if self.acknowledged {
                        self.unacked += len;
                    }
                    break ChunkId { msg: seq, index };
                }
            }
        };
        let m = self.msg(id.msg)?;
        let chunk = Chunk {
            id,
            tag: m.tag,
            offset: u64::from(id.index) * self.chunk as u64,
            len: chunk_len(m.len, self.chunk, id.index),
            total: m.len,
        };
        if self.acknowledged {
            self.inflight.sent(id, r);
        }
        Some(chunk)
    }

    /// Unacknowledged mode: chunk `id` is written; the message when it was its last.
    pub fn written(&mut self, id: ChunkId) -> Option<Done> {
        let m = self.msg_mut(id.msg)?;
        m.written += 1;
        if m.written == m.nchunks {
            self.complete(id.msg)
        } else {
            None
        }
    }

    /// Acknowledged mode: the receiver has chunk `id` in place; the message when it
    /// was its last. Repeated and unknown acknowledgements change nothing.
    pub fn acked(&mut self, id: ChunkId) -> Option<Done> {
        if self.inflight.is_acked(id) {
            return None;
        }
        if let Some(m) = self.msg(id.msg) {
            self.unacked -= chunk_len(m.len, self.chunk, id.index).min(self.unacked);
        }
        let seq = self.inflight.acked(id)?;
        self.complete(seq)
    }

    /// The receiver says every message below `seq` is in place (it is closing, and
    /// will acknowledge nothing more): complete them, acknowledged or not.
    pub fn peer_done_below(&mut self, seq: u64) -> Vec<Done> {
        let seq = seq.min(self.next_seq);
        for (m, missing) in self.inflight.complete_below(seq) {
            // Only chunks already sent count against the window.
            for i in missing {
                if (m, i) < self.next_new {
                    if let Some(msg) = self.msg(m) {
                        self.unacked -= chunk_len(msg.len, self.chunk, i).min(self.unacked);
                    }
                }
            }
        }
        if self.next_new.0 < seq {
            self.next_new = (seq, 0);
        }
        let pending: Vec<u64> = self
            .msgs
            .iter()
            .filter(|m| !m.done && m.seq < seq)
            .map(|m| m.seq)
            .collect();
        pending
            .into_iter()
            .filter_map(|m| self.complete(m))
            .collect()
    }

    /// Whether `id` needs no more sending (acknowledged, or its message is done).
    pub fn is_acked(&self, id: ChunkId) -> bool {
        self.inflight.is_acked(id)
    }

    /// Unacknowledged chunks on rail `r` (an idle rail with some should be pinged, so
    /// a dead path shows).
    pub fn unacked_on(&self, r: usize) -> usize {
        self.inflight.on_rail(r)
    }

    /// Rail `r` failed at `now` (a socket error, a failed probe, or a path another
    /// connection saw fail). Its unacknowledged chunks go to the front of the resend
    /// queue. Returns how many, when the rail was up until now (a failover to
    /// report); `None` when it was probing (the probe failed) or already down.
    pub fn rail_failed(&mut self, r: usize, now: Instant) -> Option<usize> {
        let was = self.rails[r];
        if was == RailState::Down {
            return None;
        }
        self.rails[r] = RailState::Down;
        let lost = self.inflight.fail_rail(r);
        for &id in lost.iter().rev() {
            self.resend.push_front(id);
        }
        self.stats.resent_chunks += lost.len() as u64;
        for id in &lost {
            if let Some(m) = self.msg(id.msg) {
                self.stats.resent_bytes += chunk_len(m.len, self.chunk, id.index) as u64;
            }
        }
        if !self.rails.contains(&RailState::Up) && self.stranded_since.is_none() {
            self.stranded_since = Some(now);
        }
        if was == RailState::Up {
            self.stats.failovers += 1;
            Some(lost.len())
        } else {
            self.stats.probes_failed += 1;
            None
        }
    }

    /// A probe of down rail `r` starts (it carries nothing until it succeeds).
    pub fn probe_started(&mut self, r: usize) {
        if self.rails[r] == RailState::Down {
            self.rails[r] = RailState::Probing;
        }
    }

    /// The probe of rail `r` succeeded: it carries chunks again.
    pub fn probe_succeeded(&mut self, r: usize) {
        if self.rails[r] == RailState::Probing {
            self.rails[r] = RailState::Up;
            self.stats.recoveries += 1;
            self.stranded_since = None;
        }
    }

    /// Forget every message (the connection failed for good); returns the sequence
    /// numbers of those that were not done.
    pub fn clear(&mut self) -> Vec<u64> {
        let abandoned = self
            .msgs
            .iter()
            .filter(|m| !m.done)
            .map(|m| m.seq)
            .collect();
        self.msgs.clear();
        self.undone = 0;
        self.resend.clear();
        self.inflight.clear();
        self.unacked = 0;
        self.next_new = (self.next_seq, 0);
        abandoned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    const CHUNK: usize = 4;

    fn set(nrails: usize, window: usize) -> RailSet {
        RailSet::new(
            nrails,
            CHUNK,
            window,
            nrails >= 2,
            Duration::from_secs(3600),
        )
    }

    #[test]
    fn chunks_are_cut_and_resent_after_a_failure() {
        let t = Instant::now();
        let mut s = set(2, 1 << 20);
        let a = s.post(100, 10); // chunks of 4, 4, 2
        let b = s.post(200, 0); // one empty chunk
        let c0 = s.next_chunk(0).unwrap();
        assert_eq!(
            (c0.id, c0.tag, c0.offset, c0.len, c0.total),
            (ChunkId { msg: a, index: 0 }, 100, 0, 4, 10)
        );
        let c1 = s.next_chunk(1).unwrap();
        let c2 = s.next_chunk(0).unwrap();
        assert_eq!((c2.offset, c2.len), (8, 2));
        let e = s.next_chunk(1).unwrap();
        assert_eq!((e.id.msg, e.len, e.tag), (b, 0, 200));
        assert_eq!(s.next_chunk(0), None);
        assert_eq!(
            s.acked(e.id),
            Some(Done { seq: b, len: 0 }),
            "b is done before a"
        );
        assert_eq!(s.acked(c1.id), None);
        // Rail 0 fails: its two unacknowledged chunks go first on rail 1, in order.
        assert_eq!(s.rail_failed(0, t), Some(2));
        assert_eq!(s.rail_failed(0, t), None, "once");
        assert_eq!(s.next_chunk(0), None, "a down rail carries nothing");
        assert_eq!(s.next_chunk(1).unwrap().id, c0.id);
        // The first copy of c2 got through after all: it is not sent again.
        assert_eq!(s.acked(c2.id), None);
        assert_eq!(s.next_chunk(1), None);
        assert_eq!(s.acked(c0.id), Some(Done { seq: a, len: 10 }));
        assert_eq!(s.acked(c0.id), None, "duplicate");
        assert_eq!(s.messages(), 0);
        let st = s.stats();
        assert_eq!((st.failovers, st.resent_chunks, st.resent_bytes), (1, 2, 6));
        // Probing: nothing until it succeeds.
        s.probe_started(0);
        assert_eq!(s.state(0), RailState::Probing);
        s.post(0, 4);
        assert_eq!(s.next_chunk(0), None);
        s.probe_succeeded(0);
        assert!(s.next_chunk(0).is_some());
        assert_eq!(s.stats().recoveries, 1);
    }

    #[test]
    fn the_window_bounds_new_chunks_but_not_resends() {
        let t = Instant::now();
        let mut s = set(2, 8);
        s.post(0, 16);
        let a = s.next_chunk(0).unwrap();
        let b = s.next_chunk(1).unwrap();
        assert_eq!(s.next_chunk(0), None, "8 bytes unacknowledged");
        s.rail_failed(1, t);
        assert_eq!(
            s.next_chunk(0).unwrap().id,
            b.id,
            "resends ignore the window"
        );
        s.acked(a.id);
        assert!(s.next_chunk(0).is_some());
    }

    #[test]
    fn a_goodbye_completes_what_the_receiver_has() {
        let t = Instant::now();
        let mut s = set(2, 12);
        let (a, b, c) = (s.post(0, 8), s.post(0, 4), s.post(0, 4));
        let ids: Vec<_> = (0..3).map(|_| s.next_chunk(0).unwrap().id).collect();
        assert_eq!(s.acked(ids[0]), None);
        // The ack of a's second chunk and of b's died with rail 0.
        s.rail_failed(0, t);
        let done = s.peer_done_below(2);
        assert_eq!(done, vec![Done { seq: a, len: 8 }, Done { seq: b, len: 4 }]);
        assert!(s.pending(c));
        assert_eq!(
            s.next_chunk(1).unwrap().id.msg,
            c,
            "a's and b's resends are dropped"
        );
        assert_eq!(s.unacked, 4, "only c's chunk is unacknowledged");
        assert_eq!(s.peer_done_below(9), vec![Done { seq: c, len: 4 }]);
        assert_eq!((s.messages(), s.unacked), (0, 0));
    }

    #[test]
    fn unacknowledged_mode_completes_on_write() {
        let mut s = RailSet::new(1, CHUNK, 0, false, Duration::ZERO);
        let m = s.post(0, 9);
        let ids: Vec<_> = (0..3).map(|_| s.next_chunk(0).unwrap().id).collect();
        assert_eq!(s.next_chunk(0), None);
        assert_eq!(s.written(ids[0]), None);
        assert_eq!(s.written(ids[1]), None);
        assert_eq!(s.written(ids[2]), Some(Done { seq: m, len: 9 }));
    }

    #[test]
    fn a_stranded_connection_dies_after_the_strand_limit() {
        let t = Instant::now();
        let mut s = RailSet::new(2, CHUNK, 64, true, Duration::from_secs(2));
        s.rail_failed(0, t);
        assert!(!s.stranded());
        s.rail_failed(1, t + Duration::from_secs(1));
        assert!(s.stranded() && !s.dead(t + Duration::from_secs(3)));
        // A failed probe does not restart the clock; a successful one ends it.
        s.probe_started(0);
        s.rail_failed(0, t + Duration::from_secs(2));
        assert!(s.dead(t + Duration::from_millis(3001)));
        s.probe_started(1);
        s.probe_succeeded(1);
        assert!(!s.stranded() && !s.dead(t + Duration::from_secs(9)));
    }

    /// One rail of the simulated network: a connection (socket, QP) at a time, each
    /// an ordered pipe both ways; a new connection replaces the old one at the
    /// receiver, whose unread data is then lost.
    #[derive(Default)]
    struct Wire {
        link_up: bool,
        /// The current connection died with the link (the sender has yet to notice).
        broken: bool,
        /// Chunks on their way to the receiver (of the current connection).
        data: VecDeque<ChunkId>,
        /// Acknowledgements on their way back.
        acks: VecDeque<ChunkId>,
        /// The probe in progress resolves at this step.
        probe_until: Option<u64>,
    }

    /// The receiver: which chunks of which messages are in place, how often each
    /// was placed, and the message lengths (from the posts, as the frames carry them).
    struct Receiver {
        placed: Vec<Vec<u32>>,
    }

    impl Receiver {
        /// Place `id` unless it is in place already; acknowledge it either way.
        fn arrive(&mut self, id: ChunkId) -> ChunkId {
            self.placed[id.msg as usize][id.index as usize] += 1;
            id
        }
        fn complete(&self, seq: u64) -> bool {
            self.placed[seq as usize].iter().all(|&n| n >= 1)
        }
    }

    /// Random schedules of link failures and recoveries, sender-side failure
    /// reports (also spurious ones: another connection's verdict), probes that fail
    /// or succeed, acknowledgements reordered across rails, duplicated, or lost with
    /// their connection — always with at least one link up.
    ///
    /// Properties: every chunk reaches the receiver (no message completes at the
    /// sender before all its chunks are in place at the receiver, and each is
    /// placed at most once — the receiver discards copies, as net-socket's does:
    /// counted here as arrivals, placements are the first); every message
    /// completes, exactly once (liveness while one link works); no chunk is ever
    /// taken for a rail that is not up; the window's books balance at the end.
    fn schedule(seed: u64) {
        let mut rng = Rng::new(seed);
        let nrails = 2 + rng.below(2) as usize;
        let window = CHUNK * (1 + rng.below(6) as usize);
        let nmsgs = 1 + rng.below(12) as usize;
        let t0 = Instant::now();
        let at = |step: u64| t0 + Duration::from_millis(step);
        let mut s = RailSet::new(nrails, CHUNK, window, true, Duration::from_secs(3600));
        let mut wires: Vec<Wire> = (0..nrails)
            .map(|_| Wire {
                link_up: true,
                ..Wire::default()
            })
            .collect();
        let lens: Vec<u64> = (0..nmsgs).map(|_| rng.below(6 * CHUNK as u64)).collect();
        let mut rx = Receiver {
            placed: lens
                .iter()
                .map(|&l| vec![0; nchunks(l, CHUNK) as usize])
                .collect(),
        };
        let mut posted = 0;
        let mut done = vec![false; nmsgs];
        let calm_from = 2000 + rng.below(3000);
        let mut step = 0u64;
        while done.iter().any(|d| !d) {
            step += 1;
            assert!(
                step < calm_from + 20_000,
                "seed {seed}: no progress; rails {:?}, done {done:?}, posted {posted}, resend {:?}, next {:?}, unacked {}, on rails {:?}, placed {:?}, wires {:?}",
                (0..nrails).map(|r| s.state(r)).collect::<Vec<_>>(),
                s.resend, s.next_new, s.unacked,
                (0..nrails).map(|r| s.unacked_on(r)).collect::<Vec<_>>(),
                rx.placed,
                wires.iter().map(|w| (w.link_up, w.data.len(), w.acks.len())).collect::<Vec<_>>()
            );
            let calm = step >= calm_from;
            let r = rng.below(nrails as u64) as usize;
            match rng.below(12) {
                // Post the next message.
                0 if posted < nmsgs => {
                    assert_eq!(s.post(posted, lens[posted]), posted as u64);
                    posted += 1;
                }
                // The sender puts chunks on rail r's connection.
                0..=2 => {
                    if s.state(r) != RailState::Up {
                        assert_eq!(
                            s.next_chunk(r),
                            None,
                            "seed {seed}: chunk for a rail that is not up"
                        );
                        continue;
                    }
                    for _ in 0..1 + rng.below(3) {
                        let Some(c) = s.next_chunk(r) else { break };
                        assert!(
                            !done[c.id.msg as usize],
                            "seed {seed}: chunk of a done message"
                        );
                        assert!(
                            s.unacked <= window.max(CHUNK),
                            "seed {seed}: window overrun"
                        );
                        wires[r].data.push_back(c.id);
                    }
                }
                // The receiver reads rail r and acknowledges on it.
                3 | 4 if wires[r].link_up && !wires[r].broken => {
                    for _ in 0..1 + rng.below(3) {
                        let Some(id) = wires[r].data.pop_front() else {
                            break;
                        };
                        let ack = rx.arrive(id);
                        wires[r].acks.push_back(ack);
                    }
                }
                // The sender reads acknowledgements of rail r (sometimes one twice).
                5 | 6 if wires[r].link_up && !wires[r].broken && s.state(r) == RailState::Up => {
                    if let Some(id) = wires[r].acks.pop_front() {
                        if let Some(d) = s.acked(id) {
                            assert!(
                                rx.complete(d.seq),
                                "seed {seed}: message {} done before all its chunks were placed",
                                d.seq
                            );
                            assert!(
                                !done[d.seq as usize],
                                "seed {seed}: message {} done twice",
                                d.seq
                            );
                            assert_eq!(d.len, lens[d.seq as usize]);
                            done[d.seq as usize] = true;
                        }
                        if rng.chance(10) {
                            assert_eq!(s.acked(id), None, "seed {seed}: a duplicate ack counted");
                        }
                    }
                }
                // Rail r's link goes down (if another stays up). Its connection either
                // breaks (what is on it is lost, and the sender's next write or ping
                // errors) or, down briefly, survives (TCP retransmits later).
                7 if !calm
                    && wires[r].link_up
                    && wires.iter().filter(|w| w.link_up).count() > 1 =>
                {
                    wires[r].link_up = false;
                    if rng.chance(70) {
                        wires[r].broken = true;
                        wires[r].data.clear();
                        wires[r].acks.clear();
                    }
                }
                7 if !wires[r].link_up && rng.chance(if calm { 100 } else { 40 }) => {
                    wires[r].link_up = true
                }
                // The sender notices a dead link (its connection errors out), or is told
                // by another connection that the path is down (only while another rail
                // is up, as net-socket does).
                8 => {
                    let others = s.up_rails().iter().any(|&o| o != r);
                    let spurious = !calm && others && rng.chance(15);
                    if s.state(r) == RailState::Up && (wires[r].broken || spurious) {
                        s.rail_failed(r, at(step));
                        // The sender aborts its connection: acknowledgements on it are
                        // gone; data already sent may still be read by the receiver.
                        wires[r].acks.clear();
                    }
                }
                // Probes: start one on a down rail (at once when stranded), resolve it.
                9 | 10 => match (s.state(r), wires[r].probe_until) {
                    (RailState::Down, _) if s.stranded() || rng.chance(30) => {
                        s.probe_started(r);
                        wires[r].probe_until = Some(step + rng.below(20));
                    }
                    (RailState::Probing, Some(until)) if step >= until => {
                        wires[r].probe_until = None;
                        if wires[r].link_up {
                            // A new connection: the receiver drops the old one.
                            wires[r].broken = false;
                            wires[r].data.clear();
                            wires[r].acks.clear();
                            s.probe_succeeded(r);
                        } else {
                            assert_eq!(s.rail_failed(r, at(step)), None);
                        }
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        assert_eq!(s.messages(), 0);
        assert_eq!(s.unacked, 0, "seed {seed}: window books unbalanced");
        for (m, p) in rx.placed.iter().enumerate() {
            assert!(
                p.iter().all(|&n| n >= 1),
                "seed {seed}: message {m} incomplete at the receiver"
            );
        }
    }

    #[test]
    fn random_failure_schedules_deliver_every_chunk_and_finish() {
        let runs: u64 = std::env::var("FXTEST_RAIL_SCHEDULES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5000);
        for seed in 0..runs {
            schedule(seed);
        }
    }
}
