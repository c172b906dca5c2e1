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
use ferrocx_sdk::failover::{ChunkId, RailSet, RailState};
use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::collections::HashMap;
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

/// The sending end's data path: the sockets, and the [`RailSet`] that decides what
/// goes where (message tags are buffer addresses, kept as integers so the state is
/// `Send`; the poster guarantees validity until completion).
pub(crate) struct Sender {
    who: Who,
    p: Params,
    token: u64,
    rails: Vec<Rail>,
    /// When each rail's last probe started (stranded connections probe at once, but
    /// not more often than [`STRANDED_PROBE_EVERY`]).
    last_probe: Vec<Option<Instant>>,
    streams: Vec<TxStream>,
    set: RailSet,
    rr: usize,
    health: Arc<Health>,
    health_gen: u64,
    done: HashMap<u64, PluginResult<usize>>,
}

/// Shortest interval between probes of one rail while no rail is up.
const STRANDED_PROBE_EVERY: Duration = Duration::from_millis(100);

impl Sender {
    /// Start connecting every socket of every rail.
    pub fn dial(
        who: Who,
        p: Params,
        token: u64,
        rails: Vec<Rail>,
        health: Arc<Health>,
    ) -> PluginResult<Self> {
        let now = Instant::now();
        let nrails = rails.len();
        let mut s = Sender {
            who,
            p,
            token,
            last_probe: vec![None; nrails],
            streams: Vec::new(),
            // A stranded connection gets one full round of probes before it gives up.
            set: RailSet::new(nrails, p.chunk, p.window, p.reliable, p.rail_timeout * 2),
            rails,
            rr: 0,
            health_gen: health.generation(),
            health,
            done: HashMap::new(),
        };
        for r in 0..nrails {
            // With several rails, a path already known to be down (or one that cannot
            // even start connecting) is left to the probes: the connection comes up
            // on the others.
            let mut failure = (p.reliable && !s.health.is_up(&s.rails[r].key()))
                .then(|| "path marked down by another connection".to_string());
            for j in 0..p.nsocks {
                let index = (r * p.nsocks + j) as u32;
                let sock = match &failure {
                    Some(_) => Sock::Dead,
                    None => match Dial::start(s.rails[r].remote, s.rails[r].local, token, index) {
                        Ok(d) => Sock::Dialing(d),
                        Err(e) if p.reliable => {
                            failure = Some(e.to_string());
                            Sock::Dead
                        }
                        Err(e) => {
                            return Err(PluginError::remote(format!(
                                "{}: cannot connect {} to rank {}: {e}",
                                s.who.what,
                                s.rails[r].describe(r),
                                s.who.peer
                            )))
                        }
                    },
                };
                s.streams.push(TxStream {
                    rail: r,
                    sock,
                    cur: None,
                    ack: [0; FRAME_BYTES],
                    ack_got: 0,
                    last_write: now,
                });
            }
            if let Some(why) = failure {
                s.down_at_connect(r, &why, now);
            }
        }
        if s.set.up_count() == 0 {
            return Err(s.no_rail_at_connect());
        }
        Ok(s)
    }

    /// Rail `r` cannot be connected now: it starts down, and is probed like a rail
    /// that failed.
    fn down_at_connect(&mut self, r: usize, why: &str, now: Instant) {
        self.close_rail(r);
        self.set.rail_failed(r, now);
        self.health.fail(&self.rails[r].key(), now);
        self.who.host.warn(format!(
            "net-socket: {} to rank {} is down at connect ({why}); {} uses the other rail(s)",
            self.rails[r].describe(r),
            self.who.peer,
            self.who.what
        ));
    }

    fn no_rail_at_connect(&self) -> PluginError {
        PluginError::remote(format!(
            "{}: cannot connect to rank {}: every rail is down",
            self.who.what, self.who.peer
        ))
    }

    /// Drive the initial connects: `Ok(true)` once every socket of every usable rail
    /// is connected. With several rails, a rail whose sockets fail or do not connect
    /// within the rail timeout starts down (probed later), as long as one remains.
    pub fn connect_step(&mut self) -> PluginResult<bool> {
        let now = Instant::now();
        let mut all = true;
        let mut failed = Vec::new();
        for s in &mut self.streams {
            let Sock::Dialing(d) = &mut s.sock else {
                continue;
            };
            let err = match d.poll() {
                Ok(true) => {
                    let Sock::Dialing(d) = std::mem::replace(&mut s.sock, Sock::Dead) else {
                        unreachable!("matched above")
                    };
                    s.sock = Sock::Live(live(d.into_stream(), &self.p)?);
                    continue;
                }
                Ok(false)
                    if self.p.reliable && now.duration_since(d.started) > self.p.rail_timeout =>
                {
                    "no answer within FERROCX_SOCKET_RAIL_TIMEOUT".to_string()
                }
                Ok(false) => {
                    all = false;
                    continue;
                }
                Err(e) => e.to_string(),
            };
            if !self.p.reliable {
                return Err(PluginError::remote(format!(
                    "{}: cannot connect {} to rank {}: {err}",
                    self.who.what,
                    self.rails[s.rail].describe(s.rail),
                    self.who.peer
                )));
            }
            failed.push((s.rail, err));
        }
        for (r, why) in failed {
            if self.set.state(r) == RailState::Up {
                self.down_at_connect(r, &why, now);
            }
        }
        if self.set.up_count() == 0 {
            return Err(self.no_rail_at_connect());
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
        if self.set.messages() >= max {
            return None;
        }
        Some(self.set.post(addr, len as u64))
    }

    /// Whether send `seq` is still in progress.
    pub fn pending(&self, seq: u64) -> bool {
        self.set.pending(seq)
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
        for seq in self.set.clear() {
            self.done.insert(seq, Err(e.clone()));
        }
        for r in 0..self.rails.len() {
            self.close_rail(r);
        }
    }

    /// Close rail `r`'s sockets (with a reset) and drop what they were writing.
    fn close_rail(&mut self, r: usize) {
        for st in self.streams.iter_mut().filter(|s| s.rail == r) {
            // Sockets still connecting are dropped too: a probe dials them all again.
            if let Sock::Live(t) = std::mem::replace(&mut st.sock, Sock::Dead) {
                sock::abort(t);
            }
            st.cur = None;
            st.ack_got = 0;
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

    /// The next chunk for a socket of rail `r`, as a frame to write.
    fn next_chunk(&mut self, r: usize) -> Option<TxChunk> {
        let c = self.set.next_chunk(r)?;
        let header = Frame {
            kind: Kind::Data,
            seq: c.id.msg,
            total: c.total,
            offset: c.offset,
        }
        .encode();
        Some(TxChunk {
            id: Some(c.id),
            header,
            addr: c.tag + c.offset as usize,
            len: c.len,
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
                    || self.set.state(self.streams[s].rail) != RailState::Up
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
                        // Unacknowledged mode: a send is done once its chunks are written.
                        if let Some(d) = self.set.written(id) {
                            self.done.insert(d.seq, Ok(d.len as usize));
                        }
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

    fn read_acks(&mut self, now: Instant) -> PluginResult<()> {
        let mut frames = Vec::new();
        let mut failed = Vec::new();
        let mut ended = Vec::new();
        for st in &mut self.streams {
            let Sock::Live(t) = &st.sock else {
                continue;
            };
            loop {
                let want = FRAME_BYTES - st.ack_got;
                // SAFETY: writable bytes of our own acknowledgement buffer.
                match unsafe { sock::recv(t, st.ack[st.ack_got..].as_mut_ptr(), want) } {
                    Ok(Io::Moved(0)) => {
                        ended.push(st.rail);
                        break;
                    }
                    Ok(Io::Moved(k)) => {
                        st.ack_got += k;
                        if st.ack_got == FRAME_BYTES {
                            st.ack_got = 0;
                            frames.push(Frame::decode(&st.ack)?);
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
        for f in frames {
            if f.kind == Kind::Bye {
                for d in self.set.peer_done_below(f.seq) {
                    self.done.insert(d.seq, Ok(d.len as usize));
                }
                continue;
            }
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
            if let Some(d) = self.set.acked(id) {
                self.done.insert(d.seq, Ok(d.len as usize));
            }
        }
        if !ended.is_empty() && self.set.messages() == 0 {
            // Nothing outstanding: the receiver closed its end (freed).
            return Err(PluginError::remote(format!(
                "peer rank {} closed {}",
                self.who.peer, self.who.what
            )));
        }
        failed.extend(
            ended
                .into_iter()
                .map(|r| (r, "the peer closed the socket".to_string())),
        );
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
                || self.set.unacked_on(st.rail) == 0
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
    /// resending, mark the path down. With one rail the connection fails; with none
    /// up, every down rail is probed at once ([`tend_rails`](Self::tend_rails)).
    fn rail_failed(&mut self, r: usize, why: &str, now: Instant) -> PluginResult<()> {
        if self.set.state(r) != RailState::Up {
            return Ok(());
        }
        self.close_rail(r);
        let desc = self.rails[r].describe(r);
        if !self.p.reliable {
            return Err(PluginError::remote(format!(
                "peer rank {} is unreachable: {desc} failed ({why}) with sends pending on {}",
                self.who.peer, self.who.what
            )));
        }
        let lost = self.set.rail_failed(r, now).unwrap_or(0);
        let newly = self.health.fail(&self.rails[r].key(), now);
        let survivors = self.set.up_rails();
        let msg = if survivors.is_empty() {
            format!(
                "net-socket: {desc} to rank {} failed ({why}); no rail is up: {lost} chunk(s) wait while every rail is probed",
                self.who.peer
            )
        } else {
            format!(
                "net-socket: {desc} to rank {} failed ({why}); {lost} chunk(s) resent on rail(s) {survivors:?}",
                self.who.peer
            )
        };
        if newly || survivors.is_empty() {
            self.who.host.warn(msg);
        } else {
            self.who.host.debug(msg);
        }
        Ok(())
    }

    /// Acknowledged mode: follow failures other connections saw, probe failed rails
    /// once their quiet window has passed (at once when no rail is up), and give up
    /// when no rail came back within the strand limit.
    fn tend_rails(&mut self, now: Instant) -> PluginResult<()> {
        if self.set.dead(now) {
            return Err(PluginError::remote(format!(
                "peer rank {} is unreachable: every rail of {} failed, and none came back within {:?} of probing",
                self.who.peer,
                self.who.what,
                self.p.rail_timeout * 2
            )));
        }
        let g = self.health.generation();
        let seen_change = g != self.health_gen;
        self.health_gen = g;
        for r in 0..self.rails.len() {
            let key = self.rails[r].key();
            match self.set.state(r) {
                RailState::Up => {
                    let others = self.set.up_count() > 1;
                    if seen_change && others && !self.health.is_up(&key) {
                        self.rail_failed(r, "path marked down by another connection", now)?;
                    }
                }
                RailState::Down => {
                    let due = if self.set.stranded() {
                        self.last_probe[r]
                            .is_none_or(|t| now.duration_since(t) >= STRANDED_PROBE_EVERY)
                    } else {
                        self.health.is_up(&key) || self.health.probe_due(&key, now)
                    };
                    if due {
                        self.start_probe(r, now);
                    }
                }
                RailState::Probing => self.poll_probe(r, now),
            }
        }
        Ok(())
    }

    /// Dial every socket of down rail `r` again.
    fn start_probe(&mut self, r: usize, now: Instant) {
        self.set.probe_started(r);
        self.last_probe[r] = Some(now);
        for s in 0..self.streams.len() {
            if self.streams[s].rail != r {
                continue;
            }
            let rail = &self.rails[r];
            match Dial::start(rail.remote, rail.local, self.token, s as u32) {
                Ok(d) => self.streams[s].sock = Sock::Dialing(d),
                Err(e) => {
                    self.probe_failed(r, &e.to_string(), now);
                    return;
                }
            }
        }
    }

    /// Probing rail `r`: every socket must connect within the rail timeout.
    fn poll_probe(&mut self, r: usize, now: Instant) {
        let mut failure = None;
        for st in self.streams.iter_mut().filter(|s| s.rail == r) {
            let Sock::Dialing(d) = &mut st.sock else {
                continue;
            };
            match d.poll() {
                Ok(true) => {
                    let Sock::Dialing(d) = std::mem::replace(&mut st.sock, Sock::Dead) else {
                        unreachable!("matched above")
                    };
                    match live(d.into_stream(), &self.p) {
                        Ok(t) => st.sock = Sock::Live(t),
                        Err(e) => failure = Some(e.message().to_string()),
                    }
                    st.last_write = now;
                }
                Ok(false) if now.duration_since(d.started) > self.p.rail_timeout => {
                    failure = Some("no answer within FERROCX_SOCKET_RAIL_TIMEOUT".to_string());
                }
                Ok(false) => {}
                Err(e) => failure = Some(e.to_string()),
            }
            if failure.is_some() {
                break;
            }
        }
        if let Some(why) = failure {
            self.probe_failed(r, &why, now);
            return;
        }
        if self
            .streams
            .iter()
            .filter(|s| s.rail == r)
            .all(|s| matches!(s.sock, Sock::Live(_)))
        {
            self.set.probe_succeeded(r);
            let desc = self.rails[r].describe(r);
            match self.health.recovered(&self.rails[r].key(), now) {
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

    fn probe_failed(&mut self, r: usize, why: &str, now: Instant) {
        self.close_rail(r);
        self.set.rail_failed(r, now);
        self.health.probe_failed(&self.rails[r].key(), now);
        self.who.host.debug(format!(
            "net-socket: probe of {} to rank {} failed ({why}); next try after the recovery window",
            self.rails[r].describe(r),
            self.who.peer
        ));
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let st = self.set.stats();
        if st.failovers > 0 || st.probes_failed > 0 {
            self.who.host.info(format!(
                "net-socket: {} closed after {} failover(s), {} recovery(ies), {} failed probe(s); {} chunk(s) ({} bytes) resent",
                self.who.what, st.failovers, st.recoveries, st.probes_failed, st.resent_chunks, st.resent_bytes
            ));
        }
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
