//! The carrier to peers reached over TCP: per peer two connections, the
//! primary and the backup path. Both ends of a connection send requests and
//! acknowledgements on it; the proxy thread of each rank drives both sides
//! (nothing blocks: sockets are non-blocking, copies are polled).
//!
//! * **Sending a put**: its bytes are read out of this rank's window (a copy
//!   queue per path, into a buffer of the carrier) and, once read, sent with
//!   the request header (`wire`) on the path's connection.
//! * **Receiving a put**: the window and range are checked against this
//!   rank's registration, the bytes are written into the window (a copy queue
//!   per path), and once there the signal is applied through this rank's
//!   [`Receiver`] (once per (sender, sequence number): a put sent again on
//!   the other path lands its bytes again, the same bytes, but its signal is
//!   applied once); then the acknowledgement goes back on the connection it
//!   came on.
//! * **Fetch-adds** go to this rank's signal words through the same
//!   `Receiver` (a duplicate gets the first fetched value) and the
//!   acknowledgement carries the fetched value.
//! * **Completions**: an acknowledgement is the request's completion on that
//!   path; an error acknowledgement is an error completion (the path fails
//!   over). Injected faults (`FERROCX_IBGDA_FAULT`) drop or delay the
//!   acknowledgement when it arrives: the data landed, as with a lost ACK.
//! * **Failures**: when a connection breaks (reset, end of stream, bytes
//!   that are not messages) every request waiting on it gets an error
//!   completion at once, and posts on it are refused until it is replaced,
//!   so the peer is carried on the other path, and a peer whose process
//!   died (both connections closed by its kernel) is unreachable at once. A
//!   connection that just goes silent (a host gone without closing) is left
//!   to the health machine's timeout: unreachable within two timeouts.
//! * **Reconnecting** ([`relink`](super::relink)): the rank that dialed the
//!   path at setup dials it again from the break on, the other accepts; the
//!   new connection replaces the broken one (fresh buffers and decoder) and
//!   sequence numbers go on (the `Receiver` drops duplicates). Each
//!   replacement is a new *generation* of that (peer, path): a put read or
//!   landed for an older generation is not sent or acknowledged on the new
//!   connection, so an acknowledgement on a connection always answers a
//!   request sent on that same connection, and can only match an attempt
//!   made on it (the older generation's attempts were failed at its break).

use super::conn::Conn;
use super::relink::{Fresh, Relink};
use super::setup::Links;
use super::stage::{Copies, Done};
use super::wire::{Ack, AckStatus, Msg, Op, WireRequest};
use crate::carrier::{check_record, HostCarrier, Outcome, Windows, REFUSED_COPY};
use ferrocx_ibgda::fault::{Fault, FaultInjector};
use ferrocx_ibgda::health::{
    self, Completion, Memory, Nanos, Path, PeerId, Receiver, Request, Seq,
};
use ferrocx_ibgda::proxy::{Carrier, CarrierRequest, Refused};
use ferrocx_ibgda::queue::{SignalOp, WorkRecord};
use ferrocx_sdk::device::Queue;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Status of a refused post or an error completion: the path's connection
/// is broken (or there is none to that peer).
pub const STATUS_CONN_BROKEN: u32 = 0x10;
/// Error completions for an error acknowledgement: this plus its status.
pub const STATUS_REMOTE: u32 = 0x100;

/// Bytes read from a socket at a time.
const READ_CHUNK: usize = 256 << 10;

/// A rank's signal words, as the receiving side updates them.
pub trait SignalWords: Send + Sync {
    /// Bytes.
    fn len(&self) -> usize;
    /// The word at byte `at` (aligned and in bounds: the caller checked).
    fn word(&self, at: u64) -> &AtomicU64;
}

impl SignalWords for crate::mapped::Signals {
    fn len(&self) -> usize {
        crate::mapped::Signals::len(self)
    }
    fn word(&self, at: u64) -> &AtomicU64 {
        crate::mapped::Signals::word(self, at)
    }
}

fn path_index(p: Path) -> usize {
    match p {
        Path::Primary => 0,
        Path::Backup => 1,
    }
}

const PATHS: [Path; 2] = [Path::Primary, Path::Backup];

/// A put whose bytes are being read out of this rank's window, for the
/// connection of generation `gen`.
struct Outgoing {
    peer: u32,
    gen: u64,
    req: WireRequest,
}

/// A received put whose bytes are being written into this rank's window;
/// it came on the connection of generation `gen`.
struct Incoming {
    gen: u64,
    req: WireRequest,
}

/// A request sent (on the connection of generation `gen`) and not
/// acknowledged yet.
struct Awaiting {
    fault: Option<Fault>,
    since: Nanos,
    gen: u64,
}

/// Applies a received request's signal or fetch-add to this rank's words.
struct Land<'a> {
    words: &'a dyn SignalWords,
    signal: Option<(u64, u64, SignalOp)>,
}

impl Memory for Land<'_> {
    fn write(&mut self, _from: PeerId, _seq: Seq, _dst: u64, _len: u32) {
        // The bytes are in the window already; what must happen once is the signal.
        if let Some((at, value, op)) = self.signal {
            let w = self.words.word(at);
            match op {
                SignalOp::Set => w.store(value, Ordering::Release),
                SignalOp::Add => {
                    w.fetch_add(value, Ordering::AcqRel);
                }
            }
        }
    }

    fn fetch_add(&mut self, _from: PeerId, _seq: Seq, dst: u64, add: u64) -> u64 {
        self.words.word(dst).fetch_add(add, Ordering::AcqRel)
    }
}

/// The TCP carrier of one rank.
pub struct NetCarrier {
    me: u32,
    /// Per rank, per path ([primary, backup]): the connection, where that
    /// rank is reached over the network.
    conns: Vec<[Option<Conn>; 2]>,
    /// Per rank, per path: a broken connection's requests were failed.
    swept: Vec<[bool; 2]>,
    /// Per rank, per path: connections replaced so far (the generation of
    /// the one in `conns`).
    gens: Vec<[u64; 2]>,
    /// Dials and accepts new connections for broken ones.
    relink: Relink,
    /// Connections `relink` made ready this round.
    fresh: Vec<Fresh>,
    /// Connections replaced, every peer and path together.
    reconnects: u64,
    /// Per path: reads out of this rank's window for puts being sent.
    reads: [Copies<Outgoing>; 2],
    /// Per path: writes into this rank's window of puts received.
    writes: [Copies<Incoming>; 2],
    windows: Windows,
    words: Arc<dyn SignalWords>,
    receiver: Receiver,
    faults: FaultInjector,
    /// (peer, path, seq) of requests posted and not acknowledged.
    awaiting: HashMap<(u32, usize, u64), Awaiting>,
    /// Acknowledgements held back by a delay fault.
    delayed: Vec<(Nanos, Completion)>,
    /// Forgotten unacknowledged after this long (the health machine has long
    /// failed them over): bounds the bookkeeping of a silent connection.
    stale: Duration,
    notes: VecDeque<String>,
    buf: Vec<u8>,
}

impl NetCarrier {
    /// The carrier of rank `me` over what setup connected (`links`: per
    /// rank [primary, backup] connections, `None` for ranks not reached over
    /// the network; the listeners and addresses reconnects use), with two
    /// copy queues per path of this rank's device ([reads, writes] for each
    /// path). Requests unacknowledged for `stale` are forgotten.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        me: usize,
        links: Links,
        queues: [[Box<dyn Queue>; 2]; 2],
        windows: Windows,
        words: Arc<dyn SignalWords>,
        faults: FaultInjector,
        stale: Duration,
    ) -> NetCarrier {
        let Links {
            conns,
            listeners,
            addrs,
            token,
            ..
        } = links;
        let n = conns.len();
        let [[r0, w0], [r1, w1]] = queues;
        NetCarrier {
            me: me as u32,
            conns,
            swept: vec![[false; 2]; n],
            gens: vec![[0; 2]; n],
            relink: Relink::new(me, token, listeners, addrs),
            fresh: Vec::new(),
            reconnects: 0,
            reads: [Copies::new(r0), Copies::new(r1)],
            writes: [Copies::new(w0), Copies::new(w1)],
            windows,
            words,
            receiver: Receiver::new(PeerId(me as u32)),
            faults,
            awaiting: HashMap::new(),
            delayed: Vec::new(),
            stale,
            notes: VecDeque::new(),
            buf: vec![0; READ_CHUNK],
        }
    }

    /// Whether rank `r` is reached through this carrier.
    pub fn serves(&self, r: usize) -> bool {
        self.conns
            .get(r)
            .is_some_and(|c| c.iter().any(Option::is_some))
    }

    fn conn(&mut self, peer: u32, p: usize) -> Option<&mut Conn> {
        self.conns.get_mut(peer as usize)?[p].as_mut()
    }

    /// A request from `from` on path `p`: checked, then landed (a put: its
    /// bytes are written first) or answered with an error.
    fn on_request(&mut self, from: u32, p: usize, mut req: WireRequest) {
        let seq = req.seq;
        let reply = |s: &mut Self, status: AckStatus, fetched: Option<u64>| {
            let me = s.me;
            if let Some(c) = s.conn(from, p) {
                c.send(&Msg::Ack(Ack {
                    from: me,
                    seq,
                    status,
                    fetched,
                }));
            }
        };
        let words = self.words.len() as u64;
        let word_ok =
            |at: u64| at.is_multiple_of(8) && at.checked_add(8).is_some_and(|e| e <= words);
        match req.op {
            Op::Put {
                window,
                dst,
                signal,
            } => {
                if signal.is_some_and(|(at, _, _)| !word_ok(at)) {
                    return reply(self, AckStatus::BadWord, None);
                }
                let w = self.windows.read().get(window as usize).cloned().flatten();
                let Some(w) = w else {
                    return reply(self, AckStatus::NoWindow, None);
                };
                if dst
                    .checked_add(req.payload.len() as u64)
                    .is_none_or(|e| e > w.bytes)
                {
                    return reply(self, AckStatus::OutOfBounds, None);
                }
                // A copy of a put applied before brings the same bytes; one the
                // sender completed already must not land over newer data.
                let fresh =
                    self.receiver
                        .needs_data(PeerId(req.from), Seq(seq), Seq(req.completed_below));
                let gen = self.gens[from as usize][p];
                if !fresh {
                    return self.land(p, gen, &req);
                }
                let data = std::mem::take(&mut req.payload);
                if self.writes[p]
                    .write(&w, dst, data, Incoming { gen, req })
                    .is_err()
                {
                    reply(self, AckStatus::CopyFailed, None);
                }
            }
            Op::FetchAdd { dst, .. } if !word_ok(dst) => reply(self, AckStatus::BadWord, None),
            Op::FetchAdd { .. } => {
                let gen = self.gens[from as usize][p];
                self.land(p, gen, &req)
            }
        }
    }

    /// A received request's data is in place: apply what must happen once
    /// (through the `Receiver`) and acknowledge, unless the sender completed
    /// it already or the connection it came on (generation `gen`) was
    /// replaced since (the sender failed that attempt at the break).
    fn land(&mut self, p: usize, gen: u64, r: &WireRequest) {
        let (op, signal) = match r.op {
            Op::Put { dst, signal, .. } => (
                health::Op::Write {
                    dst,
                    len: r.payload.len() as u32,
                },
                signal,
            ),
            Op::FetchAdd { dst, add } => (health::Op::FetchAdd { dst, add }, None),
        };
        let req = Request {
            from: PeerId(r.from),
            seq: Seq(r.seq),
            op,
            completed_below: Seq(r.completed_below),
        };
        let mut land = Land {
            words: &*self.words,
            signal,
        };
        let Some(c) = self.receiver.on_request(PATHS[p], &req, &mut land) else {
            return;
        };
        let me = self.me;
        if self.gens[r.from as usize][p] != gen {
            return;
        }
        if let Some(conn) = self.conn(r.from, p) {
            conn.send(&Msg::Ack(Ack {
                from: me,
                seq: r.seq,
                status: AckStatus::Ok,
                fetched: c.fetched,
            }));
        }
    }

    /// An acknowledgement from `peer` on path `p`: the request's completion,
    /// as the injected faults let it through.
    fn on_ack(&mut self, peer: u32, p: usize, a: Ack, now: Nanos, out: &mut Vec<Outcome>) {
        let fault = self
            .awaiting
            .remove(&(peer, p, a.seq))
            .and_then(|w| w.fault);
        if a.status != AckStatus::Ok {
            self.notes.push_back(format!(
                "rank {peer} refused request #{} on the {}: {} (status {:#x})",
                a.seq,
                PATHS[p],
                a.status,
                STATUS_REMOTE + a.status as u32
            ));
            out.push(Outcome::Failed {
                peer: PeerId(peer),
                path: PATHS[p],
                seq: Seq(a.seq),
                status: STATUS_REMOTE + a.status as u32,
            });
            return;
        }
        let c = Completion {
            peer: PeerId(peer),
            path: PATHS[p],
            seq: Seq(a.seq),
            fetched: a.fetched,
        };
        match fault {
            Some(Fault::Drop) => {}
            Some(Fault::Delay(d)) => self.delayed.push((now.after(d), c)),
            None => out.push(Outcome::Done(c)),
        }
    }

    /// Forgets the attempt of `seq` to `peer` on path `p` made on the
    /// connection of generation `gen`; whether it was still waiting.
    fn take_awaiting(&mut self, peer: u32, p: usize, seq: u64, gen: u64) -> bool {
        let key = (peer, p, seq);
        let ours = self.awaiting.get(&key).is_some_and(|w| w.gen == gen);
        if ours {
            self.awaiting.remove(&key);
        }
        ours
    }

    /// Fails what waits on connections that broke since the last sweep.
    fn sweep(&mut self, now: Nanos, out: &mut Vec<Outcome>) {
        for r in 0..self.conns.len() {
            for p in 0..2 {
                self.sweep_one(r, p, now, out);
            }
        }
    }

    /// If rank `r`'s connection on path `p` broke and was not swept yet:
    /// logs it, fails every request waiting on it and starts dialing it
    /// again (on the rank that dials).
    fn sweep_one(&mut self, r: usize, p: usize, now: Nanos, out: &mut Vec<Outcome>) {
        let path = PATHS[p];
        let Some(why) = self.conns[r][p]
            .as_ref()
            .and_then(|c| c.broken().map(str::to_owned))
        else {
            return;
        };
        if self.swept[r][p] {
            return;
        }
        self.swept[r][p] = true;
        self.notes
            .push_back(format!("the net carrier's {path} to rank {r} broke: {why}"));
        self.relink.broke(r, p, now);
        let r = r as u32;
        let keys: Vec<_> = self
            .awaiting
            .keys()
            .filter(|k| k.0 == r && k.1 == p)
            .copied()
            .collect();
        for k in keys {
            self.awaiting.remove(&k);
            out.push(Outcome::Failed {
                peer: PeerId(r),
                path,
                seq: Seq(k.2),
                status: STATUS_CONN_BROKEN,
            });
        }
    }

    /// Writes and reads rank `r`'s connection on path `p` (if it is live)
    /// and handles what came; the messages handled.
    fn service(&mut self, r: usize, p: usize, now: Nanos, out: &mut Vec<Outcome>) -> usize {
        let Some(c) = self.conns[r][p].as_mut() else {
            return 0;
        };
        if c.broken().is_some() {
            return 0;
        }
        let mut msgs = Vec::new();
        c.flush();
        c.receive(&mut self.buf, &mut msgs);
        self.handle(r, p, msgs, now, out)
    }

    /// Messages that came from rank `r` on path `p`; how many.
    fn handle(
        &mut self,
        r: usize,
        p: usize,
        msgs: Vec<Msg>,
        now: Nanos,
        out: &mut Vec<Outcome>,
    ) -> usize {
        let n = msgs.len();
        let from = r as u32;
        for m in msgs {
            match m {
                Msg::Request(q) if q.from == from => self.on_request(from, p, q),
                Msg::Ack(a) if a.from == from => self.on_ack(from, p, a, now, out),
                other => {
                    let why = format!("rank {r} sent an unexpected message: {other:?}");
                    if let Some(c) = self.conn(from, p) {
                        c.fail(why);
                    }
                }
            }
        }
        n
    }

    /// Puts `f.conn` in place of its peer's connection on its path: an
    /// accepted one only where the old one is broken (refused otherwise,
    /// logged), after the old one's requests were failed. Returns whether it
    /// was put in place.
    fn install(&mut self, f: Fresh, now: Nanos, out: &mut Vec<Outcome>) -> bool {
        let (r, p, path) = (f.peer as usize, f.path, PATHS[f.path]);
        let mut conn = f.conn;
        if f.accepted {
            // The old connection's end may be on its way behind the new
            // one's hello (the dialing side closed it first): read it now.
            self.service(r, p, now, out);
            if self.conns[r][p]
                .as_ref()
                .is_some_and(|c| c.broken().is_none())
            {
                self.notes.push_back(format!(
                    "refused rank {r}'s new connection on the net carrier's {path}: the one it would replace is not broken"
                ));
                return false;
            }
            conn.send(&Msg::Hello(self.relink.hello(p)));
            conn.flush();
        } else if let Some(old) = self.conns[r][p].as_mut() {
            // Dialed only after a break; should the old one be live, its
            // requests must still be failed, not forgotten.
            old.fail("replaced by a new connection".into());
        }
        self.sweep_one(r, p, now, out);
        self.relink.replaced(r, p);
        self.conns[r][p] = Some(conn);
        self.swept[r][p] = false;
        self.gens[r][p] += 1;
        self.reconnects += 1;
        let how = if f.accepted {
            "accepted its new connection".to_string()
        } else {
            format!("dialed, attempt {}", f.attempt)
        };
        self.notes.push_back(format!(
            "the net carrier's {path} to rank {r} is connected again ({how})"
        ));
        self.handle(r, p, f.msgs, now, out);
        true
    }
}

impl HostCarrier for NetCarrier {
    fn progress(&mut self, now: Nanos, out: &mut Vec<Outcome>) -> usize {
        let mut n = 0;
        // Puts whose bytes were read: send them.
        for (p, path) in PATHS.into_iter().enumerate() {
            let mut done: Vec<Done<Outgoing>> = Vec::new();
            n += self.reads[p].progress(&mut done);
            for (o, r) in done {
                match r {
                    Ok(bytes) => {
                        let mut req = o.req;
                        req.payload = bytes;
                        let seq = req.seq;
                        let gen = self.gens[o.peer as usize][p];
                        match self.conn(o.peer, p) {
                            Some(c) if c.broken().is_none() && gen == o.gen => {
                                c.send(&Msg::Request(req))
                            }
                            // The connection broke while the bytes were read (and
                            // its sweep may have passed): fail it now, not at the
                            // health timeout. One that replaced it since is not
                            // this attempt's.
                            _ => {
                                if self.take_awaiting(o.peer, p, seq, o.gen) {
                                    out.push(Outcome::Failed {
                                        peer: PeerId(o.peer),
                                        path,
                                        seq: Seq(seq),
                                        status: STATUS_CONN_BROKEN,
                                    });
                                }
                            }
                        }
                    }
                    Err(_) => {
                        if self.take_awaiting(o.peer, p, o.req.seq, o.gen) {
                            out.push(Outcome::Failed {
                                peer: PeerId(o.peer),
                                path,
                                seq: Seq(o.req.seq),
                                status: REFUSED_COPY,
                            });
                        }
                    }
                }
            }
        }
        // Every connection: write, read, handle what came.
        for r in 0..self.conns.len() {
            for p in 0..2 {
                n += self.service(r, p, now, out);
            }
        }
        // Received puts whose bytes landed: apply once, acknowledge.
        for p in 0..2 {
            let mut done: Vec<Done<Incoming>> = Vec::new();
            n += self.writes[p].progress(&mut done);
            for (i, r) in done {
                match r {
                    Ok(bytes) => {
                        let mut req = i.req;
                        req.payload = bytes;
                        self.land(p, i.gen, &req);
                    }
                    Err(_) => {
                        let me = self.me;
                        if self.gens[i.req.from as usize][p] != i.gen {
                            continue;
                        }
                        if let Some(c) = self.conn(i.req.from, p) {
                            c.send(&Msg::Ack(Ack {
                                from: me,
                                seq: i.req.seq,
                                status: AckStatus::CopyFailed,
                                fetched: None,
                            }));
                        }
                    }
                }
            }
        }
        for c in self.conns.iter_mut().flatten().flatten() {
            n += usize::from(c.flush() > 0);
        }
        self.sweep(now, out);
        // Broken paths: new connections in their place.
        let mut fresh = std::mem::take(&mut self.fresh);
        n += self
            .relink
            .poll(now, &mut self.buf, &mut fresh, &mut self.notes);
        for f in fresh.drain(..) {
            self.install(f, now, out);
        }
        self.fresh = fresh;
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                out.push(Outcome::Done(self.delayed.swap_remove(i).1));
                n += 1;
            } else {
                i += 1;
            }
        }
        let stale = self.stale;
        self.awaiting.retain(|_, w| now.since(w.since) < stale);
        n
    }

    fn in_flight(&self) -> usize {
        let backlog = self
            .conns
            .iter()
            .flatten()
            .flatten()
            .filter(|c| c.broken().is_none() && c.backlog() > 0)
            .count();
        self.reads.iter().map(Copies::in_flight).sum::<usize>()
            + self.writes.iter().map(Copies::in_flight).sum::<usize>()
            + self.awaiting.len()
            + self.delayed.len()
            + backlog
    }

    fn next_due(&self) -> Option<Nanos> {
        self.delayed.iter().map(|d| d.0).min()
    }

    fn take_note(&mut self) -> Option<String> {
        self.notes.pop_front()
    }
}

impl Carrier for NetCarrier {
    fn check(&self, peer: PeerId, work: &WorkRecord) -> Result<(), String> {
        if !self.serves(peer.0 as usize) {
            return Err(format!("rank {} is not reached by the net carrier", peer.0));
        }
        check_record(&self.windows, self.words.len() as u64, work)
    }

    fn post(&mut self, peer: PeerId, path: Path, req: &CarrierRequest) -> Result<(), Refused> {
        let p = path_index(path);
        let broken = Refused {
            status: STATUS_CONN_BROKEN,
        };
        match self.conn(peer.0, p) {
            Some(c) if c.broken().is_none() => {}
            _ => return Err(broken),
        }
        let op = match req.work {
            WorkRecord::Put { window, dst, .. } => Op::Put {
                window,
                dst,
                signal: None,
            },
            WorkRecord::PutSignal {
                window,
                dst,
                signal,
                value,
                op,
                ..
            } => Op::Put {
                window,
                dst,
                signal: Some((signal, value, op)),
            },
            WorkRecord::FetchAdd { dst, add, .. } => Op::FetchAdd { dst, add },
            // The proxy keeps quiets; one that reached a carrier would never
            // complete, so it is refused.
            WorkRecord::Quiet => {
                return Err(Refused {
                    status: REFUSED_COPY,
                })
            }
        };
        let wire = WireRequest {
            from: self.me,
            seq: req.req.seq.0,
            completed_below: req.req.completed_below.0,
            op,
            payload: Vec::new(),
        };
        let fault = self.faults.on_post(peer, path);
        let since = Nanos(crate::clock::now());
        let key = (peer.0, p, wire.seq);
        let gen = self.gens[peer.0 as usize][p];
        match req.work.transfer() {
            Some(t) => {
                let w = self
                    .windows
                    .read()
                    .get(t.window as usize)
                    .cloned()
                    .flatten();
                let Some(w) = w else {
                    return Err(Refused {
                        status: REFUSED_COPY,
                    });
                };
                let tag = Outgoing {
                    peer: peer.0,
                    gen,
                    req: wire,
                };
                self.reads[p]
                    .read(&w, t.src, t.bytes, tag)
                    .map_err(|_| Refused {
                        status: REFUSED_COPY,
                    })?;
            }
            None => {
                let c = self.conn(peer.0, p).expect("checked above");
                c.send(&Msg::Request(wire));
            }
        }
        self.awaiting.insert(key, Awaiting { fault, since, gen });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
