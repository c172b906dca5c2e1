//! Reconnecting a path whose connection broke, with nothing blocking (the
//! proxy thread polls this every round, as it polls the connections):
//!
//! * **Who dials**: the side that dialed at setup, the higher rank of the
//!   pair; the lower rank accepts on the listener it kept from setup. The
//!   dialing side starts as soon as it finds the break, so the connection is
//!   usually back before the health machine takes the path back.
//! * **How often**: one attempt at a time per (peer, path); attempts start
//!   at least [`REDIAL_FIRST`] apart, the gap doubling per failure up to
//!   [`REDIAL_MAX`] (a peer that is gone costs one connect a second per
//!   path); each attempt (connect, hello, the answer) gets
//!   [`ATTEMPT_TIMEOUT`]. A failed attempt is logged once per break.
//! * **The handshake**: the dialing side sends setup's hello (rank, path,
//!   token, wire version); the accepting side checks it as setup does, and
//!   the carrier takes the connection only in place of a broken one,
//!   answering with its own hello. The dialing side uses the connection only
//!   once that answer came, so a refused connection never carries a request.
//!
//! This module yields checked connections ([`Fresh`]); the carrier replaces
//! the broken one (a new [`Conn`]: empty buffers, a new decoder).

use super::conn::Conn;
use super::wire::{Hello, Msg};
use ferrocx_ibgda::health::{Nanos, Path};
use ferrocx_sdk::tcp;
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// The least time between the starts of two attempts on one path.
pub const REDIAL_FIRST: Duration = Duration::from_millis(100);
/// The most time between the starts of two attempts on one path.
pub const REDIAL_MAX: Duration = Duration::from_secs(1);
/// How long an attempt may take, connect and hellos; also how long an
/// accepted connection may take to send its hello.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the listeners are polled (every round would cost two system
/// calls per round of a busy proxy thread).
const ACCEPT_EVERY: Duration = Duration::from_millis(1);
/// Accepted connections waiting for their hello at most; more are closed at
/// once (strays flooding the port must not grow this without bound).
const MAX_GREETINGS: usize = 16;

const PATHS: [Path; 2] = [Path::Primary, Path::Backup];

/// A connection to put in place of `peer`'s broken one on `path`.
pub struct Fresh {
    /// The peer.
    pub peer: u32,
    /// 0: primary, 1: backup.
    pub path: usize,
    /// The connection, past the hello.
    pub conn: Conn,
    /// Messages that arrived after the hello (to handle as on any
    /// connection).
    pub msgs: Vec<Msg>,
    /// Accepted (the carrier still has to check that the old one is broken,
    /// and answer the hello) or dialed (answered already).
    pub accepted: bool,
    /// The attempt that made it (dialed), counted from the break.
    pub attempt: u32,
}

/// Where a path this rank dials is.
enum Dial {
    /// Not broken (or not this rank's to dial).
    Idle,
    /// Broken: the next attempt starts at this time.
    Wait(Nanos),
    /// Connecting, until the deadline.
    Connecting(TcpStream, Nanos),
    /// Connected, the hello sent: waiting for the answer, until the deadline
    /// (boxed: a connection's buffers are large, the other states small).
    Greeting(Box<Conn>, Nanos),
}

struct Redial {
    state: Dial,
    /// Gap between the starts of attempts, for the next failure.
    delay: Duration,
    /// When the current (or last) attempt started.
    started: Nanos,
    /// Attempts since the break.
    attempts: u32,
    /// A failure of this break was logged.
    logged: bool,
}

/// An accepted connection waiting for its hello.
struct Greeting {
    conn: Conn,
    from: SocketAddr,
    path: usize,
    until: Nanos,
}

/// The reconnecting side of one rank's net carrier.
pub struct Relink {
    me: u32,
    token: u64,
    listeners: [TcpListener; 2],
    addrs: Vec<Option<[SocketAddr; 2]>>,
    dials: Vec<[Redial; 2]>,
    greetings: Vec<Greeting>,
    next_accept: Nanos,
    /// A listener's error was logged (until it accepts again).
    accept_failed: [bool; 2],
    /// Connections were closed for want of room (logged once, until one is
    /// taken again).
    flooded: bool,
    attempts: u64,
    msgs: Vec<Msg>,
}

impl Relink {
    /// Rank `me`'s, listening on `listeners` ([primary, backup], from
    /// setup), dialing the ranks below it at `addrs`, every hello carrying
    /// `token`.
    pub fn new(
        me: usize,
        token: u64,
        listeners: [TcpListener; 2],
        addrs: Vec<Option<[SocketAddr; 2]>>,
    ) -> Relink {
        let dials = addrs
            .iter()
            .map(|_| {
                [(); 2].map(|_| Redial {
                    state: Dial::Idle,
                    delay: REDIAL_FIRST,
                    started: Nanos(0),
                    attempts: 0,
                    logged: false,
                })
            })
            .collect();
        Relink {
            me: me as u32,
            token,
            listeners,
            addrs,
            dials,
            greetings: Vec::new(),
            next_accept: Nanos(0),
            accept_failed: [false; 2],
            flooded: false,
            attempts: 0,
            msgs: Vec::new(),
        }
    }

    /// This rank's hello on `path` (also the answer to an accepted one).
    pub fn hello(&self, path: usize) -> Hello {
        Hello {
            rank: self.me,
            path: path as u8,
            token: self.token,
        }
    }

    /// Where this rank's listener of `path` is.
    #[cfg(test)]
    pub fn local(&self, path: usize) -> std::io::Result<SocketAddr> {
        self.listeners[path].local_addr()
    }

    /// Connection attempts made so far, every path together.
    #[cfg(test)]
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// Whether this rank dials `peer` again when a connection breaks
    /// (setup's rule: the higher rank dials).
    pub fn dials(&self, peer: usize) -> bool {
        peer < self.me as usize && self.addrs.get(peer).is_some_and(Option::is_some)
    }

    /// `peer`'s connection on `path` was replaced: any attempt still under
    /// way for it is dropped.
    pub fn replaced(&mut self, peer: usize, path: usize) {
        if let Some(d) = self.dials.get_mut(peer) {
            d[path].state = Dial::Idle;
        }
    }

    /// `peer`'s connection on `path` broke (found at `now`): dial it again
    /// from now, if this rank is the one that dials.
    pub fn broke(&mut self, peer: usize, path: usize, now: Nanos) {
        if !self.dials(peer) {
            return;
        }
        let d = &mut self.dials[peer][path];
        if matches!(d.state, Dial::Idle) {
            *d = Redial {
                state: Dial::Wait(now),
                delay: REDIAL_FIRST,
                started: now,
                attempts: 0,
                logged: false,
            };
        }
    }

    /// Accepts, reads hellos and moves the dials on; connections ready to
    /// replace broken ones go to `fresh`, lines for the log to `notes`.
    /// Returns how many became ready.
    pub fn poll(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        fresh: &mut Vec<Fresh>,
        notes: &mut VecDeque<String>,
    ) -> usize {
        let before = fresh.len();
        if now >= self.next_accept {
            self.next_accept = now.after(ACCEPT_EVERY);
            self.accept(now, notes);
        }
        if !self.greetings.is_empty() {
            self.greet(now, buf, fresh, notes);
        }
        for r in 0..self.dials.len() {
            for p in 0..2 {
                if !matches!(self.dials[r][p].state, Dial::Idle) {
                    self.dial(r, p, now, buf, fresh, notes);
                }
            }
        }
        fresh.len() - before
    }

    fn accept(&mut self, now: Nanos, notes: &mut VecDeque<String>) {
        for (p, l) in self.listeners.iter().enumerate() {
            loop {
                let (s, from) = match l.accept() {
                    Ok(x) => x,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // Out of descriptors, say: logged once, tried again
                        // next round.
                        if !self.accept_failed[p] {
                            self.accept_failed[p] = true;
                            notes.push_back(format!(
                                "the net carrier's {} listener could not accept: {e}",
                                PATHS[p]
                            ));
                        }
                        break;
                    }
                };
                self.accept_failed[p] = false;
                if self.greetings.len() >= MAX_GREETINGS {
                    // Logged once per flood, not per connection.
                    if !self.flooded {
                        self.flooded = true;
                        notes.push_back(format!(
                            "closing connections on the net carrier's {} listener (from {from}, …): {MAX_GREETINGS} others wait for their hello",
                            PATHS[p]
                        ));
                    }
                    continue;
                }
                self.flooded = false;
                // No payload before the hello: a stray cannot make it buffer
                // a put's worth of bytes.
                match Conn::new(s, 0) {
                    Ok(conn) => self.greetings.push(Greeting {
                        conn,
                        from,
                        path: p,
                        until: now.after(ATTEMPT_TIMEOUT),
                    }),
                    Err(e) => notes.push_back(format!(
                        "a connection on the net carrier's {} listener from {from}: {e}",
                        PATHS[p]
                    )),
                }
            }
        }
    }

    /// Whether `h`, arriving on the listener of `path`, is a rank that
    /// dials this one on it, for this communicator; why not otherwise.
    fn check(&self, h: &Hello, path: usize) -> Result<(), String> {
        if h.token != self.token {
            return Err(format!(
                "rank {}'s hello carries token {:#x}, not this communicator's {:#x}",
                h.rank, h.token, self.token
            ));
        }
        if usize::from(h.path) != path {
            return Err(format!(
                "rank {}'s hello names path {} on the {} listener",
                h.rank, h.path, PATHS[path]
            ));
        }
        let r = h.rank as usize;
        if r <= self.me as usize || !self.addrs.get(r).is_some_and(Option::is_some) {
            return Err(format!(
                "rank {} does not dial rank {} over the net carrier",
                h.rank, self.me
            ));
        }
        Ok(())
    }

    fn greet(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        fresh: &mut Vec<Fresh>,
        notes: &mut VecDeque<String>,
    ) {
        let mut i = 0;
        while i < self.greetings.len() {
            let g = &mut self.greetings[i];
            g.conn.receive(buf, &mut self.msgs);
            let (from, p) = (g.from, g.path);
            let refused = |why: &str| {
                format!(
                    "refused a connection on the net carrier's {} listener from {from}: {why}",
                    PATHS[p]
                )
            };
            if self.msgs.is_empty() {
                if let Some(why) = g.conn.broken() {
                    notes.push_back(refused(why));
                } else if now > g.until {
                    notes.push_back(refused(&format!("no hello within {ATTEMPT_TIMEOUT:?}")));
                } else {
                    i += 1;
                    continue;
                }
                self.greetings.swap_remove(i);
                continue;
            }
            let mut g = self.greetings.swap_remove(i);
            // The dialing side sent nothing after its hello (it waits for
            // the answer), so nothing was decoded under the limit of 0.
            g.conn.set_max_payload(u32::MAX);
            let mut msgs = std::mem::take(&mut self.msgs);
            let first = msgs.remove(0);
            let checked = match &first {
                Msg::Hello(h) => self.check(h, p).map(|()| h.rank),
                other => Err(format!("it opened with {other:?}, not a hello")),
            };
            match checked {
                Ok(rank) => fresh.push(Fresh {
                    peer: rank,
                    path: p,
                    conn: g.conn,
                    msgs,
                    accepted: true,
                    attempt: 0,
                }),
                // Dropping the connection closes it: the dialing side sees
                // no answer and tries again later.
                Err(why) => notes.push_back(refused(&why)),
            }
        }
    }

    fn dial(
        &mut self,
        r: usize,
        p: usize,
        now: Nanos,
        buf: &mut [u8],
        fresh: &mut Vec<Fresh>,
        notes: &mut VecDeque<String>,
    ) {
        let to = self.addrs[r].expect("only net peers are dialed")[p];
        let hello = self.hello(p);
        let d = &mut self.dials[r][p];
        let failed = match std::mem::replace(&mut d.state, Dial::Idle) {
            Dial::Idle => return,
            Dial::Wait(at) if now < at => {
                d.state = Dial::Wait(at);
                return;
            }
            Dial::Wait(_) => {
                d.attempts += 1;
                d.started = now;
                self.attempts += 1;
                match tcp::start_connect(&to, None) {
                    Ok(s) => {
                        d.state = Dial::Connecting(s, now.after(ATTEMPT_TIMEOUT));
                        return;
                    }
                    Err(e) => format!("connect: {e}"),
                }
            }
            Dial::Connecting(s, until) => match tcp::connected(&s) {
                Ok(true) => match Conn::new(s, u32::MAX) {
                    Ok(mut c) => {
                        c.send(&Msg::Hello(hello));
                        c.flush();
                        d.state = Dial::Greeting(Box::new(c), until);
                        return;
                    }
                    Err(e) => format!("connected, then: {e}"),
                },
                Ok(false) if now <= until => {
                    d.state = Dial::Connecting(s, until);
                    return;
                }
                Ok(false) => format!("no connection within {ATTEMPT_TIMEOUT:?}"),
                Err(e) => format!("connect: {e}"),
            },
            Dial::Greeting(mut c, until) => {
                c.flush();
                c.receive(buf, &mut self.msgs);
                if self.msgs.is_empty() {
                    match c.broken() {
                        // The peer closes a connection it refuses.
                        Some(why) => format!("no answer to the hello ({why})"),
                        None if now > until => {
                            format!("no answer to the hello within {ATTEMPT_TIMEOUT:?}")
                        }
                        None => {
                            d.state = Dial::Greeting(c, until);
                            return;
                        }
                    }
                } else {
                    let mut msgs = std::mem::take(&mut self.msgs);
                    match msgs.remove(0) {
                        Msg::Hello(h)
                            if h.rank as usize == r
                                && usize::from(h.path) == p
                                && h.token == self.token =>
                        {
                            fresh.push(Fresh {
                                peer: r as u32,
                                path: p,
                                conn: *c,
                                msgs,
                                accepted: false,
                                attempt: d.attempts,
                            });
                            return;
                        }
                        other => format!("answered the hello with {other:?}"),
                    }
                }
            }
        };
        // One line per break, not per attempt: a peer that is gone would
        // fill the log.
        if !d.logged {
            d.logged = true;
            notes.push_back(format!(
                "could not reconnect the net carrier's {} to rank {r} at {to}: {failed} (trying again, {REDIAL_FIRST:?} to {REDIAL_MAX:?} apart; logged once per break)",
                PATHS[p]
            ));
        }
        d.state = Dial::Wait(d.started.after(d.delay));
        d.delay = (d.delay * 2).min(REDIAL_MAX);
    }
}
