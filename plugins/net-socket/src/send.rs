//! The sending end of a connection: messages cut into chunks, chunks pulled by
//! whichever socket (of any rail) can take bytes, and — with two rails or more —
//! acknowledgements, resends after a rail failure, and probing of failed rails.
//!
//! With one rail a send completes once its bytes are in the kernel (as plain TCP);
//! there is nowhere to resend, so a socket error fails the connection. With several
//! rails a send completes when the receiver has acknowledged every chunk, so a chunk
//! caught on a failing rail can be sent again on another one.

use crate::dial::Dial;
use crate::sock::{self, Io};
use crate::wire::{Frame, Kind, FRAME_BYTES};
use crate::Health;
use ferrocx_sdk::failover::{ChunkId, InFlight};
use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings both ends agree on, and the local knobs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    /// Bytes per chunk.
    pub chunk: usize,
    /// Sockets per rail.
    pub nsocks: usize,
    /// Acknowledged mode (two rails or more).
    pub reliable: bool,
    /// Unacknowledged bytes allowed (acknowledged mode).
    pub window: usize,
    /// `TCP_USER_TIMEOUT`, and the longest a probe may take.
    pub rail_timeout: Duration,
}

/// Chunks of a message of `len` bytes (an empty message is one empty chunk).
pub(crate) fn nchunks(len: u64, chunk: usize) -> u32 {
    (len.div_ceil(chunk as u64)).max(1) as u32
}

/// Bytes of chunk `index` of a message of `len` bytes.
pub(crate) fn chunk_len(len: u64, chunk: usize, index: u32) -> usize {
    let start = u64::from(index) * chunk as u64;
    len.saturating_sub(start).min(chunk as u64) as usize
}

/// Who this end is, for messages.
#[derive(Clone)]
pub(crate) struct Who {
    pub host: Host,
    pub what: String,
    pub peer: i32,
}

/// One rail: my local address and the peer's listening address.
pub(crate) struct Rail {
    pub local: Option<SocketAddr>,
    pub remote: SocketAddr,
    pub up: bool,
}

impl Rail {
    fn key(&self) -> (IpAddr, IpAddr) {
        (
            self.local.map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip()),
            self.remote.ip(),
        )
    }

    fn describe(&self, index: usize) -> String {
        match self.local {
            Some(l) => format!("rail {index} ({} → {})", l.ip(), self.remote),
            None => format!("rail {index} (→ {})", self.remote),
        }
    }
}

enum Sock {
    Dialing(Dial),
    Live(TcpStream),
    Dead,
}

/// What a socket is writing: a data chunk (header, then payload) or a ping.
struct TxChunk {
    id: Option<ChunkId>,
    header: [u8; FRAME_BYTES],
    addr: usize,
    len: usize,
    done: usize,
}

struct TxStream {
    rail: usize,
    sock: Sock,
    cur: Option<TxChunk>,
    ack: [u8; FRAME_BYTES],
    ack_got: usize,
    last_write: Instant,
}

/// A posted send. The buffer address is kept as an integer so the state is `Send`;
/// the poster guarantees validity until completion.
struct SendMsg {
    seq: u64,
    addr: usize,
    len: u64,
    nchunks: u32,
    written: u32,
    done: bool,
}

/// The sending end's data path.
pub(crate) struct Sender {
    who: Who,
    p: Params,
    token: u64,
    rails: Vec<Rail>,
    streams: Vec<TxStream>,
    msgs: VecDeque<SendMsg>,
    /// Next chunk never sent: (message sequence number, chunk index).
    next_new: (u64, u32),
    next_seq: u64,
    resend: VecDeque<ChunkId>,
    inflight: InFlight,
    unacked: usize,
    rr: usize,
    health: Arc<Health>,
    health_gen: u64,
    done: HashMap<u64, PluginResult<usize>>,
}

impl Sender {
    /// Start connecting every socket of every rail.
    pub fn dial(
        who: Who,
        p: Params,
        token: u64,
        rails: Vec<Rail>,
        health: Arc<Health>,
    ) -> PluginResult<Self> {
        let mut streams = Vec::new();
        for (r, rail) in rails.iter().enumerate() {
            for j in 0..p.nsocks {
                let index = (r * p.nsocks + j) as u32;
                let d = Dial::start(rail.remote, rail.local, token, index).map_err(|e| {
                    PluginError::remote(format!(
                        "{}: cannot connect {} to rank {}: {e}",
                        who.what,
                        rail.describe(r),
                        who.peer
                    ))
                })?;
                streams.push(TxStream {
                    rail: r,
                    sock: Sock::Dialing(d),
                    cur: None,
                    ack: [0; FRAME_BYTES],
                    ack_got: 0,
                    last_write: Instant::now(),
                });
            }
        }
        let health_gen = health.generation();
        Ok(Sender {
            who,
            p,
            token,
            rails,
            streams,
            msgs: VecDeque::new(),
            next_new: (0, 0),
            next_seq: 0,
            resend: VecDeque::new(),
            inflight: InFlight::new(),
            unacked: 0,
            rr: 0,
            health,
            health_gen,
            done: HashMap::new(),
        })
    }

    /// Drive the initial connects: `Ok(true)` once every socket is connected.
    pub fn connect_step(&mut self) -> PluginResult<bool> {
        let mut all = true;
        for s in &mut self.streams {
            if let Sock::Dialing(d) = &mut s.sock {
                match d.poll() {
                    Ok(true) => {
                        let Sock::Dialing(d) = std::mem::replace(&mut s.sock, Sock::Dead) else {
                            unreachable!("matched above")
                        };
                        s.sock = Sock::Live(live(d.into_stream(), &self.p)?);
                    }
                    Ok(false) => all = false,
                    Err(e) => {
                        return Err(PluginError::remote(format!(
                            "{}: cannot connect {} to rank {}: {e}",
                            self.who.what,
                            self.rails[s.rail].describe(s.rail),
                            self.who.peer
                        )))
                    }
                }
            }
        }
        Ok(all)
    }

    /// Where each socket is still connecting to (for the connect timeout's message).
    pub fn dialing(&self) -> Vec<String> {
        self.streams
            .iter()
            .filter_map(|s| match &s.sock {
                Sock::Dialing(d) => Some(d.to.to_string()),
                _ => None,
            })
            .collect()
    }

    /// Post a send; `None` when too many are outstanding.
    pub fn post(&mut self, addr: usize, len: usize, max: usize) -> Option<u64> {
        if self.msgs.len() >= max {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let len = len as u64;
        let n = nchunks(len, self.p.chunk);
        if self.p.reliable {
            self.inflight.add_message(seq, n);
        }
        self.msgs.push_back(SendMsg {
            seq,
            addr,
            len,
            nchunks: n,
            written: 0,
            done: false,
        });
        Some(seq)
    }

    /// Whether send `seq` is still in progress.
    pub fn pending(&self, seq: u64) -> bool {
        self.msg(seq).is_some_and(|m| !m.done)
    }

    /// The result of send `seq`, once.
    pub fn take(&mut self, seq: u64) -> Option<PluginResult<usize>> {
        self.done.remove(&seq)
    }

    /// Forget a result nobody will collect.
    pub fn forget(&mut self, seq: u64) -> bool {
        self.done.remove(&seq).is_some()
    }

    /// Fail every outstanding send with `e` and close the sockets.
    pub fn fail_all(&mut self, e: &PluginError) {
        for m in self.msgs.drain(..) {
            if !m.done {
                self.done.insert(m.seq, Err(e.clone()));
            }
        }
        for s in &mut self.streams {
            if let Sock::Live(t) = std::mem::replace(&mut s.sock, Sock::Dead) {
                sock::abort(t);
            }
            s.cur = None;
        }
        self.inflight.clear();
        self.resend.clear();
    }

    fn msg(&self, seq: u64) -> Option<&SendMsg> {
        let front = self.msgs.front()?.seq;
        self.msgs.get(seq.checked_sub(front)? as usize)
    }

    fn msg_mut(&mut self, seq: u64) -> Option<&mut SendMsg> {
        let front = self.msgs.front()?.seq;
        self.msgs.get_mut(seq.checked_sub(front)? as usize)
    }

    fn complete(&mut self, seq: u64) {
        if let Some(m) = self.msg_mut(seq) {
            if !m.done {
                m.done = true;
                let len = m.len as usize;
                self.done.insert(seq, Ok(len));
            }
        }
        while self.msgs.front().is_some_and(|m| m.done) {
            self.msgs.pop_front();
        }
    }

    /// One round of non-blocking progress. An error means the connection is gone.
    pub fn progress(&mut self, now: Instant) -> PluginResult<()> {
        if self.p.reliable {
            self.tend_rails(now)?;
            self.read_acks(now)?;
        }
        self.write(now)?;
        if self.p.reliable {
            self.ping_idle(now)?;
        }
        Ok(())
    }

    /// Next chunk for a socket of `rail`: resends first, then new chunks within the window.
    fn next_chunk(&mut self, rail: usize) -> Option<TxChunk> {
        let id = if let Some(id) = self.resend.pop_front() {
            id
        } else {
            let (seq, index) = self.next_new;
            let m = self.msg(seq)?;
            let clen = chunk_len(m.len, self.p.chunk, index);
            if self.p.reliable && self.unacked > 0 && self.unacked + clen > self.p.window {
                return None;
            }
            let last = index + 1 == m.nchunks;
            self.next_new = if last { (seq + 1, 0) } else { (seq, index + 1) };
            if self.p.reliable {
                self.unacked += clen;
            }
            ChunkId { msg: seq, index }
        };
        let m = self.msg(id.msg)?;
        let offset = u64::from(id.index) * self.p.chunk as u64;
        let (addr, len, total) = (
            m.addr + offset as usize,
            chunk_len(m.len, self.p.chunk, id.index),
            m.len,
        );
        if self.p.reliable {
            self.inflight.sent(id, rail);
        }
        let header = Frame {
            kind: Kind::Data,
            seq: id.msg,
            total,
            offset,
        }
        .encode();
        Some(TxChunk {
            id: Some(id),
            header,
            addr,
            len,
            done: 0,
        })
    }

    fn write(&mut self, now: Instant) -> PluginResult<()> {
        let n = self.streams.len();
        loop {
            let mut moved = false;
            let mut failed = Vec::new();
            for k in 0..n {
                let s = (self.rr + k) % n;
                // A probing rail's sockets carry nothing until the whole rail is back.
                if !matches!(self.streams[s].sock, Sock::Live(_))
                    || !self.rails[self.streams[s].rail].up
                {
                    continue;
                }
                if self.streams[s].cur.is_none() {
                    let rail = self.streams[s].rail;
                    match self.next_chunk(rail) {
                        Some(c) => self.streams[s].cur = Some(c),
                        None => continue,
                    }
                }
                let st = &mut self.streams[s];
                let (Sock::Live(t), Some(c)) = (&st.sock, &mut st.cur) else {
                    continue;
                };
                let total = FRAME_BYTES + c.len;
                let mut err = None;
                while c.done < total {
                    let (a, b) = if c.done < FRAME_BYTES {
                        (
                            (c.header[c.done..].as_ptr(), FRAME_BYTES - c.done),
                            (c.addr as *const u8, c.len),
                        )
                    } else {
                        let off = c.done - FRAME_BYTES;
                        (
                            ((c.addr + off) as *const u8, c.len - off),
                            (std::ptr::null(), 0),
                        )
                    };
                    // SAFETY: the header is ours; the payload lies inside the poster's
                    // buffer, valid and unmodified until the send completes (isend's contract).
                    match unsafe { sock::send2(t, a, b) } {
                        Ok(Io::Moved(k)) => {
                            c.done += k;
                            moved = true;
                            st.last_write = now;
                        }
                        Ok(Io::Again) => break,
                        Err(e) => {
                            err = Some(e);
                            break;
                        }
                    }
                }
                if let Some(e) = err {
                    failed.push((st.rail, e.to_string()));
                    continue;
                }
                if c.done == total {
                    let id = st.cur.take().and_then(|c| c.id);
                    if let (Some(id), false) = (id, self.p.reliable) {
                        self.chunk_written(id);
                    }
                }
            }
            for (rail, why) in failed {
                self.rail_failed(rail, &why, now)?;
            }
            if !moved {
                break;
            }
        }
        self.rr = (self.rr + 1) % n.max(1);
        Ok(())
    }

    /// Unacknowledged mode: a send is done once all its chunks are written.
    fn chunk_written(&mut self, id: ChunkId) {
        let Some(m) = self.msg_mut(id.msg) else {
            return;
        };
        m.written += 1;
        if m.written == m.nchunks {
            self.complete(id.msg);
        }
    }

    fn read_acks(&mut self, now: Instant) -> PluginResult<()> {
        let mut acks = Vec::new();
        let mut failed = Vec::new();
        for st in &mut self.streams {
            let Sock::Live(t) = &st.sock else {
                continue;
            };
            loop {
                let want = FRAME_BYTES - st.ack_got;
                // SAFETY: writable bytes of our own acknowledgement buffer.
                match unsafe { sock::recv(t, st.ack[st.ack_got..].as_mut_ptr(), want) } {
                    Ok(Io::Moved(0)) if self.msgs.is_empty() => {
                        // Nothing outstanding: the receiver closed its end (freed).
                        return Err(PluginError::remote(format!(
                            "peer rank {} closed {}",
                            self.who.peer, self.who.what
                        )));
                    }
                    Ok(Io::Moved(0)) => {
                        failed.push((st.rail, "the peer closed the socket".to_string()));
                        break;
                    }
                    Ok(Io::Moved(k)) => {
                        st.ack_got += k;
                        if st.ack_got == FRAME_BYTES {
                            st.ack_got = 0;
                            acks.push(Frame::decode(&st.ack)?);
                        }
                    }
                    Ok(Io::Again) => break,
                    Err(e) => {
                        failed.push((st.rail, e.to_string()));
                        break;
                    }
                }
            }
        }
        for f in acks {
            if f.kind != Kind::Ack || !f.offset.is_multiple_of(self.p.chunk as u64) {
                return Err(PluginError::internal(format!(
                    "net-socket protocol error on {}: {f:?} where an acknowledgement was expected",
                    self.who.what
                )));
            }
            let id = ChunkId {
                msg: f.seq,
                index: (f.offset / self.p.chunk as u64) as u32,
            };
            if self.inflight.is_acked(id) {
                continue; // a duplicate (the chunk went out twice)
            }
            if let Some(m) = self.msg(id.msg) {
                self.unacked -= chunk_len(m.len, self.p.chunk, id.index);
            }
            if let Some(seq) = self.inflight.acked(id) {
                self.complete(seq);
            }
        }
        for (rail, why) in failed {
            self.rail_failed(rail, &why, now)?;
        }
        Ok(())
    }

    /// A socket with chunks awaiting acknowledgement but nothing to write sends a ping,
    /// so the kernel has data in flight and `TCP_USER_TIMEOUT` can notice a dead path.
    fn ping_idle(&mut self, now: Instant) -> PluginResult<()> {
        let quiet = self.p.rail_timeout / 2;
        for st in &mut self.streams {
            if st.cur.is_some()
                || !matches!(st.sock, Sock::Live(_))
                || now.duration_since(st.last_write) < quiet
                || self.inflight.on_rail(st.rail) == 0
            {
                continue;
            }
            st.cur = Some(TxChunk {
                id: None,
                header: Frame {
                    kind: Kind::Ping,
                    seq: 0,
                    total: 0,
                    offset: 0,
                }
                .encode(),
                addr: 0,
                len: 0,
                done: 0,
            });
        }
        self.write(now)
    }

    /// Rail `r` failed: close its sockets, put its unacknowledged chunks up for
    /// resending, mark the path down. An error when no rail is left.
    fn rail_failed(&mut self, r: usize, why: &str, now: Instant) -> PluginResult<()> {
        if !self.rails[r].up {
            return Ok(());
        }
        self.rails[r].up = false;
        for st in self.streams.iter_mut().filter(|s| s.rail == r) {
            if let Sock::Live(t) = std::mem::replace(&mut st.sock, Sock::Dead) {
                sock::abort(t);
            }
            st.cur = None;
            st.ack_got = 0;
        }
        let desc = self.rails[r].describe(r);
        if !self.p.reliable {
            return Err(PluginError::remote(format!(
                "peer rank {} is unreachable: {desc} failed ({why}) with sends pending on {}",
                self.who.peer, self.who.what
            )));
        }
        let lost = self.inflight.fail_rail(r);
        for &id in lost.iter().rev() {
            self.resend.push_front(id);
        }
        let newly = self.health.fail(&self.rails[r].key(), now);
        let survivors: Vec<usize> = (0..self.rails.len())
            .filter(|&i| self.rails[i].up)
            .collect();
        if survivors.is_empty() {
            return Err(PluginError::remote(format!(
                "peer rank {} is unreachable: every rail of {} failed (last: {desc}: {why})",
                self.who.peer, self.who.what
            )));
        }
        let msg = format!(
            "net-socket: {desc} to rank {} failed ({why}); {} chunk(s) resent on rail(s) {survivors:?}",
            self.who.peer,
            lost.len()
        );
        if newly {
            self.who.host.warn(msg);
        } else {
            self.who.host.debug(msg);
        }
        Ok(())
    }

    /// Acknowledged mode: follow failures other connections saw, and probe failed rails
    /// once their quiet window has passed.
    fn tend_rails(&mut self, now: Instant) -> PluginResult<()> {
        let g = self.health.generation();
        let seen_change = g != self.health_gen;
        self.health_gen = g;
        for r in 0..self.rails.len() {
            let key = self.rails[r].key();
            if self.rails[r].up {
                let others = (0..self.rails.len()).any(|i| i != r && self.rails[i].up);
                if seen_change && others && !self.health.is_up(&key) {
                    self.rail_failed(r, "path marked down by another connection", now)?;
                }
                continue;
            }
            let socks: Vec<usize> = (0..self.streams.len())
                .filter(|&s| self.streams[s].rail == r)
                .collect();
            let all_dead = socks
                .iter()
                .all(|&s| matches!(self.streams[s].sock, Sock::Dead));
            if all_dead {
                if !(self.health.is_up(&key) || self.health.probe_due(&key, now)) {
                    continue;
                }
                for &s in &socks {
                    let rail = &self.rails[r];
                    match Dial::start(rail.remote, rail.local, self.token, s as u32) {
                        Ok(d) => self.streams[s].sock = Sock::Dialing(d),
                        Err(e) => {
                            self.probe_failed(r, &e.to_string(), now);
                            break;
                        }
                    }
                }
                continue;
            }
            // Probing: all sockets must connect within the rail timeout.
            let mut ready = true;
            let mut failure = None;
            for &s in &socks {
                let st = &mut self.streams[s];
                let Sock::Dialing(d) = &mut st.sock else {
                    continue;
                };
                match d.poll() {
                    Ok(true) => {
                        let Sock::Dialing(d) = std::mem::replace(&mut st.sock, Sock::Dead) else {
                            unreachable!("matched above")
                        };
                        st.sock = Sock::Live(live(d.into_stream(), &self.p)?);
                        st.last_write = now;
                    }
                    Ok(false) if now.duration_since(d.started) > self.p.rail_timeout => {
                        failure = Some("no answer within FERROCX_SOCKET_RAIL_TIMEOUT".to_string());
                        break;
                    }
                    Ok(false) => ready = false,
                    Err(e) => {
                        failure = Some(e.to_string());
                        break;
                    }
                }
            }
            if let Some(why) = failure {
                self.probe_failed(r, &why, now);
                continue;
            }
            if ready
                && socks
                    .iter()
                    .all(|&s| matches!(self.streams[s].sock, Sock::Live(_)))
            {
                self.rails[r].up = true;
                let desc = self.rails[r].describe(r);
                match self.health.recovered(&key, now) {
                    Some(down) => self.who.host.info(format!(
                        "net-socket: {desc} to rank {} recovered after {down:.1?}; back in use",
                        self.who.peer
                    )),
                    None => self.who.host.debug(format!(
                        "net-socket: {desc} to rank {} reconnected",
                        self.who.peer
                    )),
                }
            }
        }
        Ok(())
    }

    fn probe_failed(&mut self, r: usize, why: &str, now: Instant) {
        for st in self.streams.iter_mut().filter(|s| s.rail == r) {
            if let Sock::Live(t) = std::mem::replace(&mut st.sock, Sock::Dead) {
                sock::abort(t);
            }
            st.cur = None;
        }
        // Nothing is sent on a probing rail, but stay safe: whatever it holds goes again.
        for id in self.inflight.fail_rail(r).into_iter().rev() {
            self.resend.push_front(id);
        }
        self.health.probe_failed(&self.rails[r].key(), now);
        self.who.host.debug(format!(
            "net-socket: probe of {} to rank {} failed ({why}); next try after the recovery window",
            self.rails[r].describe(r),
            self.who.peer
        ));
    }
}

/// Options of a data socket: non-blocking, no Nagle, and a `TCP_USER_TIMEOUT` so a
/// dead path fails the socket instead of leaving it waiting.
pub(crate) fn live(t: TcpStream, p: &Params) -> PluginResult<TcpStream> {
    t.set_nonblocking(true)
        .and_then(|_| t.set_nodelay(true))
        .and_then(|_| sock::set_user_timeout(&t, p.rail_timeout))
        .map_err(|e| PluginError::io("net-socket: socket options", e))?;
    Ok(t)
}
