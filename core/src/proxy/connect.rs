//! The connection phases the proxy service thread runs: how the connections
//! a call needs are established (setup → blob exchange over the bootstrap →
//! connect until done).
//!
//! The sender chooses the transport (`plugin::select`) and tells the receiver
//! which one in its request, so both ends always run the same plugin:
//! 1. [`Connecting::begin`]: every needed send side chooses, `setup`s and
//!    sends REQ(name, blob);
//! 2. [`Connecting::step`], taking the peers' messages in the order they
//!    come, whichever call they are for: a receive side takes its REQ,
//!    `setup`s with that plugin, sends ACK(blob) and `connect`s; a send side
//!    takes its ACK and `connect`s; `connect`s in progress are repeated until
//!    done (bounded by the timeout).
//!
//! No step waits for one peer while another's message is pending, each
//! connection is handed over as soon as it is made, and a call need not wait
//! for its connections at all (docs/ARCHITECTURE.md, Connections).

use crate::error::{Error, Result};
use crate::plugin::{Connection, Dir, PluginInstance};
use crate::shared::CommShared;
use ferrocx_sdk::abi::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TAG_CONN: u64 = 0x4658_0000_0000_0000; // "FX" connection-setup tag space
fn tag(phase: u64, channel: u32) -> u64 {
    TAG_CONN | (phase << 32) | channel as u64
}

fn conn_id(shared: &CommShared, sender: usize, receiver: usize, channel: u32) -> u64 {
    let mut h = shared.comm_hash ^ 0x9e37_79b9_7f4a_7c15;
    for v in [sender as u64, receiver as u64, channel as u64] {
        h = (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(17);
    }
    h
}

fn req(shared: &CommShared, peer: usize, dir: Dir, channel: u32) -> FxConnReq {
    let (s, r) = if dir == Dir::Send {
        (shared.rank, peer)
    } else {
        (peer, shared.rank)
    };
    FxConnReq {
        me: shared.peer_info[shared.rank],
        peer: shared.peer_info[peer],
        direction: if dir == Dir::Send {
            FX_DIR_SEND
        } else {
            FX_DIR_RECV
        },
        channel: channel as i32,
        conn_id: conn_id(shared, s, r, channel),
    }
}

fn encode(name: &str, blob: &FxBlob, status: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(FX_NAME_BYTES + 4 + blob.len as usize + status.len());
    let mut n = [0u8; FX_NAME_BYTES];
    let k = name.len().min(FX_NAME_BYTES - 1);
    n[..k].copy_from_slice(&name.as_bytes()[..k]);
    out.extend_from_slice(&n);
    out.extend_from_slice(&blob.len.to_le_bytes());
    out.extend_from_slice(blob.as_bytes());
    out.extend_from_slice(status.as_bytes());
    out
}

fn decode(peer: usize, msg: &[u8]) -> Result<(String, FxBlob, String)> {
    let bad = || {
        Error::Bootstrap(format!(
            "malformed connection message from rank {peer} ({} bytes)",
            msg.len()
        ))
    };
    if msg.len() < FX_NAME_BYTES + 4 {
        return Err(bad());
    }
    let name: String = String::from_utf8_lossy(&msg[..FX_NAME_BYTES])
        .trim_end_matches('\0')
        .to_string();
    let len = u32::from_le_bytes(
        msg[FX_NAME_BYTES..FX_NAME_BYTES + 4]
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let body = &msg[FX_NAME_BYTES + 4..];
    if len > FX_BLOB_BYTES || body.len() < len {
        return Err(bad());
    }
    let mut blob = FxBlob::new();
    blob.bytes[..len].copy_from_slice(&body[..len]);
    blob.len = len as u32;
    Ok((
        name,
        blob,
        String::from_utf8_lossy(&body[len..]).into_owned(),
    ))
}

/// Say what connection setup was waiting for instead of naming a bootstrap tag.
fn setup_wait_error(e: Error, waiting_for: &str) -> Error {
    match e {
        Error::Timeout { peer, after, .. } => {
            let what = format!(
                "connection setup, waiting for {}",
                waiting_for.replace("{peer}", &peer.map_or("?".into(), |p| p.to_string()))
            );
            Error::Timeout { what, peer, after }
        }
        Error::PeerFailed { rank, detail } => {
            let detail = detail
                .split_once(" before bootstrap message")
                .map_or(detail.clone(), |(head, _)| head.to_string());
            let detail = format!(
                "{detail}, while this rank waited for {}",
                waiting_for.replace("{peer}", &rank.to_string())
            );
            Error::PeerFailed { rank, detail }
        }
        other => other,
    }
}

/// `setup` one end with `plugin` and run its optional `proxy_setup`.
fn open_end(
    shared: &CommShared,
    plugin: &Arc<PluginInstance>,
    peer: usize,
    dir: Dir,
    channel: u32,
) -> Result<(Connection, FxBlob)> {
    let (raw, blob) = plugin.setup(&req(shared, peer, dir, channel))?;
    let conn = Connection {
        plugin: plugin.clone(),
        raw,
        peer,
        dir,
        channel,
    };
    plugin.proxy_hook("proxy_setup", raw, peer)?;
    Ok((conn, blob))
}

/// What a refusal tells the peer of `err`.
fn refusal(err: &Error) -> String {
    match err {
        Error::NoTransport { detail, .. } => detail.clone(),
        other => other.to_string(),
    }
}

/// Tell `peer` (in setup phase `phase`) that this end failed, then return the error.
fn refuse(shared: &CommShared, peer: usize, phase: u64, channel: u32, err: Error) -> Error {
    let why = refusal(&err);
    let _ = shared
        .bootstrap
        .send(peer, tag(phase, channel), &encode("", &FxBlob::new(), &why));
    err
}

/// A send side waiting for the receiver's answer, or a connection whose
/// `connect` is still in progress.
struct Pending {
    conn: Connection,
    peer_blob: Option<FxBlob>,
}

/// Phase 1 for the given (channel, peer, dir) connections: every send side
/// chooses its transport and sets up its end; then each receiver gets its
/// request. Local only (no waiting). Every end is set up before any request
/// leaves: when one fails, every receiver is told why instead (an empty name
/// and the reason), so none waits for the timeout and none keeps a request
/// or answer that a later attempt would take for its own. Returns the send
/// sides, each waiting for its receiver's answer.
fn announce(shared: &CommShared, needs: &[Need]) -> Result<Vec<Pending>> {
    let sends: Vec<(u32, usize)> = needs
        .iter()
        .filter(|(_, _, d)| *d == Dir::Send)
        .map(|&(channel, peer, _)| (channel as u32, peer))
        .collect();
    let mut opened = Vec::with_capacity(sends.len());
    for &(channel, peer) in &sends {
        let end = shared
            .candidates()
            .choose_for(peer, shared.host_channel(channel as usize))
            .and_then(|p| open_end(shared, &p, peer, Dir::Send, channel).map(|(c, b)| (p, c, b)));
        match end {
            Ok(x) => opened.push(x),
            Err(e) => {
                for &(channel, peer) in &sends {
                    refuse(shared, peer, 0, channel, e.clone());
                }
                return Err(e);
            }
        }
    }
    let mut answers = Vec::with_capacity(opened.len());
    for (plugin, conn, blob) in opened {
        shared.bootstrap.send(
            conn.peer,
            tag(0, conn.channel),
            &encode(plugin.name(), &blob, ""),
        )?;
        answers.push(Pending {
            conn,
            peer_blob: None,
        });
    }
    Ok(answers)
}

/// A connection as the engine names it: (channel, peer, direction).
pub(crate) type Need = (usize, usize, Dir);

/// Where a caller waiting for connections gets its answer.
pub(crate) type Reply = Box<dyn FnOnce(Result<()>) + Send>;

/// What the connections being made need from the communicator's engine.
pub(crate) struct Hooks {
    /// Takes a connection the moment it is made (its queued operations start).
    pub install: Box<dyn FnMut(Connection) + Send>,
    /// The engine's failure, if it failed or shut down: the setup ends with it.
    pub stopped: Box<dyn Fn() -> Option<Error> + Send>,
    /// Breaks the communicator: a setup failed while operations waited on it.
    pub broke: Box<dyn Fn(Error) + Send>,
}

/// The message key that wakes the service thread's wait for setup messages
/// when a caller hands it work ([`Connecting::step`]): a message to itself.
pub(crate) fn wake_key(rank: usize) -> (usize, u64) {
    (rank, tag(2, 0))
}

/// Every connection the service thread is making, whichever call asked for
/// it. A call announces its send sides ([`begin`](Self::begin)) and may go
/// on at once: the rest (phases 2–4) happens here, in the order the peers'
/// messages come, a step at a time between the thread's other jobs. So no
/// call waits for its connections unless it asks to
/// ([`when_made`](Self::when_made)), and a peer that posts its side of one
/// connection late holds back no other: a receive started on one
/// communicator may be met only after this rank's send on another.
///
/// In a step: a receive side takes its sender's request (sets up with the
/// sender's transport, answers, connects); a send side takes its receiver's
/// answer and connects; connections still in progress are driven. Each
/// connection goes to [`Hooks::install`] as soon as it is made, so operations
/// queued on it start while the others are still being made: a peer may
/// post its side of one connection only after an operation on another has
/// completed. Each call's connections are bounded by `FERROCX_TIMEOUT` from
/// its `begin`. Any failure fails every connection being made and breaks the
/// communicator ([`Hooks::broke`]): operations are queued on them and cannot
/// be taken back.
#[derive(Default)]
pub(crate) struct Connecting {
    /// Receive sides waiting for their sender's request: (channel, peer, deadline).
    requests: Vec<(u32, usize, Instant)>,
    /// Send sides waiting for their receiver's answer, with their deadline.
    answers: Vec<(Pending, Instant)>,
    /// Connections whose `connect` is still in progress, with their deadline.
    connecting: Vec<(Pending, Instant)>,
    /// Callers waiting until connections of theirs are made.
    waiters: Vec<(Vec<Need>, Reply)>,
    /// Empty polls of connections in progress (for the backoff).
    idle: u32,
    /// When this rank's own state and every peer's were last looked at.
    checked: Option<Instant>,
    /// The failure that ended the setup: every later wait and `begin` hears
    /// it (the communicator is broken), also a caller that asks only after
    /// the failure came.
    failed: Option<Error>,
}

/// Why a step ended the setup.
enum Stop {
    /// The engine failed or shut down: its error, nothing more to break.
    Engine(Error),
    /// The setup failed: the communicator must break.
    Setup(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Setup(e)
    }
}

impl Connecting {
    /// Announce the send sides of `needs` and make them, with their receive
    /// sides, from the next step on.
    pub fn begin(&mut self, shared: &CommShared, needs: &[Need]) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.is_idle() {
            self.checked = None; // the first look comes a slice after this
        }
        let answers = announce(shared, needs)?;
        let deadline = Instant::now() + shared.timeout;
        self.answers
            .extend(answers.into_iter().map(|p| (p, deadline)));
        self.requests.extend(
            needs
                .iter()
                .filter(|(_, _, d)| *d == Dir::Recv)
                .map(|&(channel, peer, _)| (channel as u32, peer, deadline)),
        );
        Ok(())
    }

    /// Answer `reply` once none of `needs` is being made any more: all made
    /// (Ok), or the setup failed (its error, also when it failed before).
    pub fn when_made(&mut self, needs: Vec<Need>, reply: Reply) {
        if let Some(e) = &self.failed {
            reply(Err(e.clone()));
        } else if needs.iter().any(|n| self.making(n)) {
            self.waiters.push((needs, reply));
        } else {
            reply(Ok(()));
        }
    }

    /// Nothing being made: the service thread may park.
    pub fn is_idle(&self) -> bool {
        self.requests.is_empty() && self.answers.is_empty() && self.connecting.is_empty()
    }

    fn making(&self, &(channel, peer, dir): &Need) -> bool {
        let same = |c: &Connection| c.channel as usize == channel && c.peer == peer && c.dir == dir;
        let awaited = match dir {
            Dir::Recv => self
                .requests
                .iter()
                .any(|&(c, p, _)| c as usize == channel && p == peer),
            Dir::Send => self.answers.iter().any(|(p, _)| same(&p.conn)),
        };
        awaited || self.connecting.iter().any(|(p, _)| same(&p.conn))
    }

    /// Fail every connection being made, and every caller waiting (now and
    /// later), with `err`.
    pub fn fail(&mut self, err: Error) {
        self.failed.get_or_insert_with(|| err.clone());
        self.requests.clear();
        self.answers.clear(); // dropping a Connection frees its end
        self.connecting.clear();
        for (_, reply) in self.waiters.drain(..) {
            reply(Err(err.clone()));
        }
    }

    /// One step: drive the connections in progress, then wait (until a
    /// message, a slice of [`CHECK_EVERY`] at most, or a message on `wake`)
    /// and take one peer's request or answer. A failure fails everything
    /// being made and breaks the communicator.
    pub fn step(&mut self, shared: &CommShared, hooks: &mut Hooks, wake: (usize, u64)) {
        let stop = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.try_step(shared, hooks, wake)
        }))
        .unwrap_or_else(|_| {
            Err(Stop::Setup(Error::Io(
                "connection setup panicked on the proxy service thread".into(),
            )))
        });
        match stop {
            Ok(()) => {}
            // A failed or closed engine needs no breaking: a communicator
            // being destroyed must not tell its peers it aborted.
            Err(Stop::Engine(e)) => self.fail(e),
            Err(Stop::Setup(e)) => {
                (hooks.broke)(e.clone());
                self.fail(e);
            }
        }
        // Answer the callers whose connections are all made now.
        let mut i = 0;
        while i < self.waiters.len() {
            if self.waiters[i].0.iter().any(|n| self.making(n)) {
                i += 1;
            } else {
                let (_, reply) = self.waiters.swap_remove(i);
                reply(Ok(()));
            }
        }
    }

    /// Every [`CHECK_EVERY`]: the engine, then every peer (not only those
    /// awaited). Messages already queued are taken first (a refusal before
    /// the abort notice its sender sent next).
    fn look(&mut self, shared: &CommShared, hooks: &Hooks) -> std::result::Result<(), Stop> {
        let now = Instant::now();
        match self.checked {
            Some(t) if now < t + CHECK_EVERY => return Ok(()),
            None => {
                self.checked = Some(now);
                return Ok(());
            }
            Some(_) => self.checked = Some(now),
        }
        if let Some(e) = (hooks.stopped)() {
            return Err(Stop::Engine(e));
        }
        shared
            .check_peers()
            .map_err(|e| Stop::Setup(self.explain(e)))
    }

    fn try_step(
        &mut self,
        shared: &CommShared,
        hooks: &mut Hooks,
        wake: (usize, u64),
    ) -> std::result::Result<(), Stop> {
        let made = |p: Pending, hooks: &mut Hooks| -> Result<()> {
            p.conn
                .plugin
                .proxy_hook("proxy_connect", p.conn.raw, p.conn.peer)?;
            (hooks.install)(p.conn);
            Ok(())
        };
        // Drive the connections in progress.
        let mut i = 0;
        while i < self.connecting.len() {
            let p = &self.connecting[i].0;
            let blob = p
                .peer_blob
                .as_ref()
                .expect("set when it started connecting");
            if p.conn.plugin.connect(p.conn.raw, blob, p.conn.peer)? {
                made(self.connecting.swap_remove(i).0, hooks)?;
                self.idle = 0;
            } else {
                i += 1;
            }
        }
        let earliest = self
            .requests
            .iter()
            .map(|r| r.2)
            .chain(self.answers.iter().map(|a| a.1))
            .chain(self.connecting.iter().map(|c| c.1))
            .min();
        let Some(earliest) = earliest else {
            return Ok(());
        };
        if Instant::now() > earliest {
            return Err(self.expired(shared.timeout).into());
        }
        if self.requests.is_empty() && self.answers.is_empty() {
            self.idle += 1;
            super::backoff(self.idle);
            return self.look(shared, hooks);
        }
        // Requests first, in the order asked; the wake key last.
        let keys: Vec<(usize, u64)> = self
            .requests
            .iter()
            .map(|&(channel, peer, _)| (peer, tag(0, channel)))
            .chain(
                self.answers
                    .iter()
                    .map(|(p, _)| (p.conn.peer, tag(1, p.conn.channel))),
            )
            .chain(std::iter::once(wake))
            .collect();
        // Connections in progress are looked at again soon.
        let slice = if self.connecting.is_empty() {
            CHECK_EVERY
        } else {
            Duration::from_micros(100)
        };
        let until = earliest.min(Instant::now() + slice);
        let (k, msg) = match shared.bootstrap.recv_any(&keys, until) {
            Ok(got) => got,
            // A slice or the deadline: the next step says which.
            Err(Error::Timeout { .. }) => return self.look(shared, hooks),
            Err(e) => return Err(self.explain(e).into()),
        };
        let nreq = self.requests.len();
        if k == keys.len() - 1 {
            // Woken: a caller has a job for this thread.
            return self.look(shared, hooks);
        }
        if k < nreq {
            let (channel, peer, deadline) = self.requests.remove(k);
            let p = accept(shared, peer, channel, &msg)?;
            if p.conn
                .plugin
                .connect(p.conn.raw, p.peer_blob.as_ref().expect("set"), peer)?
            {
                made(p, hooks)?;
            } else {
                self.connecting.push((p, deadline));
            }
        } else {
            let (mut p, deadline) = self.answers.remove(k - nreq);
            let peer = p.conn.peer;
            let (name, rblob, status) = decode(peer, &msg)?;
            if name.is_empty() {
                return Err(Stop::Setup(Error::NoTransport {
                    peer,
                    detail: format!("rank {peer} refused the connection: {status}"),
                }));
            }
            let done = p.conn.plugin.connect(p.conn.raw, &rblob, peer)?;
            p.peer_blob = Some(rblob);
            if done {
                made(p, hooks)?;
            } else {
                self.connecting.push((p, deadline));
            }
        }
        self.look(shared, hooks)
    }

    /// The timeout of the first connection whose deadline passed: a request
    /// before an answer (as asked), then a `connect` in progress.
    fn expired(&self, timeout: Duration) -> Error {
        let now = Instant::now();
        let timed_out = |peer| Error::Timeout {
            what: String::new(),
            peer: Some(peer),
            after: timeout,
        };
        if let Some(r) = self.requests.iter().find(|r| r.2 <= now) {
            return setup_wait_error(timed_out(r.1), REQUEST);
        }
        if let Some(a) = self.answers.iter().find(|a| a.1 <= now) {
            return setup_wait_error(timed_out(a.0.conn.peer), ANSWER);
        }
        Error::Timeout {
            what: "connection setup (connect still in progress)".into(),
            peer: self
                .connecting
                .iter()
                .find(|c| c.1 <= now)
                .map(|c| c.0.conn.peer),
            after: timeout,
        }
    }

    /// Say what was awaited of the peer an error is about.
    fn explain(&self, e: Error) -> Error {
        let waiting_for = match e.peer() {
            Some(r) if self.requests.iter().any(|&(_, p, _)| p == r) => REQUEST,
            Some(r) if self.answers.iter().any(|(p, _)| p.conn.peer == r) => ANSWER,
            Some(_) => OTHERS,
            None if self.requests.is_empty() => ANSWER,
            None => REQUEST,
        };
        setup_wait_error(e, waiting_for)
    }
}

/// How often a wait for the peers' setup messages looks at this rank's own
/// state and at every peer (not only those it waits for).
const CHECK_EVERY: Duration = Duration::from_millis(20);

const OTHERS: &str = "connections with its peers";
const REQUEST: &str = "its connection request (rank {peer} has not posted a send to this rank)";
const ANSWER: &str = "its connection answer (rank {peer} has not posted a receive from this rank)";

/// A receive side follows the sender's request `msg` (or reports why it cannot):
/// sets up with the sender's transport and answers.
fn accept(shared: &CommShared, peer: usize, channel: u32, msg: &[u8]) -> Result<Pending> {
    let (name, sblob, status) = decode(peer, msg)?;
    if name.is_empty() {
        return Err(Error::PeerFailed {
            rank: peer,
            detail: format!("it could not set up its end of the connection: {status}"),
        });
    }
    let accepted = shared
        .candidates()
        .follow(peer, &name)
        .and_then(|p| open_end(shared, &p, peer, Dir::Recv, channel));
    let (conn, blob) = match accepted {
        Ok(x) => x,
        Err(e) => return Err(refuse(shared, peer, 1, channel, e)),
    };
    shared
        .bootstrap
        .send(peer, tag(1, channel), &encode(&name, &blob, ""))?;
    Ok(Pending {
        conn,
        peer_blob: Some(sblob),
    })
}
