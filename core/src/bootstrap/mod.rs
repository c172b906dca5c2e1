//! Bootstrap: rendezvous, then an out-of-band TCP mesh between all ranks.
//!
//! [`Bootstrap::init`] meets the other ranks at rank 0's root address (see `root.rs`),
//! learns everybody's [`RankInfo`], and connects every pair of ranks (see `mesh.rs`).
//! Afterwards ranks exchange tagged messages ([`send`](Bootstrap::send) /
//! [`recv`](Bootstrap::recv)) and run the small collectives that communicator setup needs
//! ([`barrier`](Bootstrap::barrier), [`all_gather`](Bootstrap::all_gather)).
//!
//! Failures are loud and prompt: every wait is bounded by the timeout, a peer whose
//! connection drops without a goodbye frame is reported dead, with its pid and host, and
//! an abort notice from any peer ends every wait at once.
//!
//! With a [`JobSecret`], every connection (to the root, between ranks) is accepted only
//! after a mutual HMAC challenge-response (`auth.rs`); without one, anybody who can reach
//! the root can join (one warning per process says so).
//!
//! Wire format: `wire.rs`. Who launched us (`FERROCX_COMM_ID`, torchrun, Open MPI,
//! Slurm): `launch.rs`.

mod auth;
mod coll;
mod host;
mod launch;
mod mailbox;
mod mesh;
mod net;
mod root;
#[cfg(test)]
mod tests;
mod wire;

pub use auth::JobSecret;
pub use host::{host_hash, host_name};
pub use launch::LaunchInfo;

use crate::error::{Error, Result};
use mailbox::{Mailbox, WaitError};
use mesh::Conn;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// Tags with this bit set are reserved for the bootstrap's own collectives.
pub const RESERVED_TAG_BIT: u64 = 1 << 63;
/// Abort reasons are cut to this many bytes on the wire.
const MAX_REASON: usize = 4096;
/// How long `broadcast_abort` and `close` wait on any one peer.
const QUICK: Duration = Duration::from_millis(200);

/// What each rank tells every other at rendezvous.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankInfo {
    /// Its rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// Its host's name (for messages).
    pub host_name: String,
    /// Its host's identity ([`host_hash`]): equal means same machine.
    pub host_hash: u64,
    /// Its index among the ranks of its host, in rank order.
    pub local_rank: usize,
    /// The CUDA device it uses, or -1.
    pub cuda_device: i32,
    /// Its peer listener (rank 0: the root address; no rank ever connects to rank 0's).
    pub addr: SocketAddr,
}

/// A rank's bootstrap: the rank table and a TCP connection to every other rank.
///
/// `Send + Sync`: any thread may send, receive or close. Collectives ([`barrier`](Self::barrier),
/// [`all_gather`](Self::all_gather)) must be called in the same order on every rank; calls
/// from several threads of one rank are serialized.
pub struct Bootstrap {
    rank: usize,
    nranks: usize,
    peers: Vec<RankInfo>,
    comm_hash: u64,
    timeout: Duration,
    mailbox: Arc<Mailbox>,
    /// Indexed by rank; `None` at our own rank. Shared with the status responder, which
    /// answers on the reader threads.
    conns: Arc<Vec<Option<Conn>>>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
    /// Serializes this rank's collectives (their tags are reused call after call).
    coll: Mutex<()>,
}

impl Bootstrap {
    /// Rendezvous: rank 0 listens on `root` (its port, on all interfaces of its family),
    /// the others connect to it, retrying until `timeout`. Each rank reports its
    /// [`RankInfo`]; rank 0 answers with the full table and a communicator nonce. Then every
    /// rank connects to every higher rank (identified by rank and nonce, so stray
    /// connections are rejected) and starts one reader thread per connection.
    ///
    /// With a `secret` (the same on every rank), each of those connections is taken only
    /// after both ends proved they know it; a connection that does not is refused with a
    /// warning and the rendezvous goes on. A rank whose secret differs from its peer's, or
    /// that has none where the peer has one (or the reverse), fails with [`Error::Auth`].
    ///
    /// Each phase (rendezvous, mesh) is bounded by `timeout`.
    pub fn init(
        root: &str,
        rank: usize,
        nranks: usize,
        cuda_device: i32,
        timeout: Duration,
        secret: Option<&JobSecret>,
    ) -> Result<Bootstrap> {
        Self::init_with(root, rank, nranks, cuda_device, timeout, secret, None)
    }

    /// [`init`](Self::init), with a callback that rank 0 calls with its listening address
    /// once bound (lets tests rendezvous on port 0).
    pub(crate) fn init_with(
        root: &str,
        rank: usize,
        nranks: usize,
        cuda_device: i32,
        timeout: Duration,
        secret: Option<&JobSecret>,
        on_bound: root::OnBound<'_>,
    ) -> Result<Bootstrap> {
        if nranks == 0 {
            return Err(Error::invalid("bootstrap: nranks must be at least 1"));
        }
        if rank >= nranks {
            return Err(Error::invalid(format!(
                "bootstrap: rank {rank} is out of range for {nranks} ranks"
            )));
        }
        debug!(%root, rank, nranks, ?timeout, authenticated = secret.is_some(), "bootstrap init");
        let rv = root::rendezvous(root, rank, nranks, cuda_device, timeout, secret, on_bound)?;
        let comm_hash = root::comm_hash(rv.nonce);
        let streams = mesh::connect_mesh(rank, &rv.peers, rv.nonce, rv.listener, timeout, secret)?;
        let mailbox = Arc::new(Mailbox::new(nranks));
        let mut boot = Bootstrap {
            rank,
            nranks,
            peers: rv.peers,
            comm_hash,
            timeout,
            mailbox,
            conns: Arc::new(Vec::with_capacity(nranks)),
            readers: Mutex::new(Vec::with_capacity(nranks.saturating_sub(1))),
            closed: AtomicBool::new(false),
            coll: Mutex::new(()),
        };
        // From here on, an early return drops `boot`, whose Drop shuts what was started.
        for (peer, stream) in streams.into_iter().enumerate() {
            let conns = Arc::get_mut(&mut boot.conns).expect("not shared before init ends");
            let Some(stream) = stream else {
                conns.push(None);
                continue;
            };
            let spawned = stream.try_clone().and_then(|reader| {
                let conn = Conn::new(stream, timeout)?;
                let handle =
                    mesh::spawn_reader(rank, &boot.peers[peer], reader, boot.mailbox.clone())?;
                Ok((conn, handle))
            });
            let (conn, handle) = spawned.map_err(|e| {
                Error::Bootstrap(format!("starting the reader for rank {peer}: {e}"))
            })?;
            Arc::get_mut(&mut boot.conns)
                .expect("not shared before init ends")
                .push(Some(conn));
            boot.readers.lock().push(handle);
        }
        debug!(
            rank,
            nranks,
            comm_hash = format_args!("{comm_hash:#018x}"),
            "bootstrap ready"
        );
        Ok(boot)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.nranks
    }

    /// Every rank's info, indexed by rank.
    pub fn peers(&self) -> &[RankInfo] {
        &self.peers
    }

    /// This rank's info.
    pub fn me(&self) -> &RankInfo {
        &self.peers[self.rank]
    }

    /// Identifies this communicator; equal on all its ranks.
    pub fn comm_hash(&self) -> u64 {
        self.comm_hash
    }

    /// The bound on every wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Send `data` to `peer` under `tag` (below [`RESERVED_TAG_BIT`]). Sending to oneself
    /// queues locally. Returns once the data is handed to the socket.
    pub fn send(&self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        self.check_args(peer, tag)?;
        self.send_raw(peer, tag, data)
    }

    /// Block until a message with `tag` from `peer` arrives (FIFO per (peer, tag)), bounded
    /// by the timeout. A dead peer gives `Error::PeerFailed` naming it, an abort notice
    /// from any peer `Error::PeerFailed` naming the aborting rank, expiry `Error::Timeout`.
    pub fn recv(&self, peer: usize, tag: u64) -> Result<Vec<u8>> {
        self.check_args(peer, tag)?;
        self.recv_raw(peer, tag, net::deadline_after(self.timeout), self.timeout)
    }

    /// [`recv`](Self::recv) with an explicit deadline.
    pub fn recv_deadline(&self, peer: usize, tag: u64, deadline: Instant) -> Result<Vec<u8>> {
        self.check_args(peer, tag)?;
        self.recv_raw(
            peer,
            tag,
            deadline,
            deadline.saturating_duration_since(Instant::now()),
        )
    }

    /// Wait until `deadline` for a message on any of `keys` (peer, tag): the
    /// index of the key that had one, and the message. A failure is
    /// [`recv`](Self::recv)'s, naming the peer it concerns (the first key's for
    /// an expired deadline).
    pub fn recv_any(&self, keys: &[(usize, u64)], deadline: Instant) -> Result<(usize, Vec<u8>)> {
        for &(peer, tag) in keys {
            self.check_args(peer, tag)?;
        }
        let waited = deadline.saturating_duration_since(Instant::now());
        self.mailbox
            .wait_any(keys, deadline, true)
            .map_err(|(i, e)| match keys.get(i) {
                Some(&(peer, tag)) => self.wait_error(e, peer, tag, waited),
                None => Error::invalid("bootstrap: recv_any needs at least one key".to_string()),
            })
    }

    /// The first peer seen dead (connection lost without a goodbye frame), with a
    /// description naming its pid and host.
    pub fn dead_peer(&self) -> Option<(usize, String)> {
        self.mailbox.first_dead()
    }

    /// Tell every live peer that this communicator is aborting. Best effort: a peer that
    /// cannot take the notice within a fraction of a second is skipped.
    pub fn broadcast_abort(&self, reason: &str) {
        let mut cut = reason.len().min(MAX_REASON);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let reason = &reason[..cut];
        warn!(rank = self.rank, "aborting the communicator: {reason}");
        for (peer, conn) in self.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            if self.mailbox.peer_gone(peer) {
                continue;
            }
            if let Err(e) = conn.send_quick(wire::Kind::Abort, 0, reason.as_bytes(), QUICK) {
                debug!(peer, "abort notice not delivered: {e}");
            }
        }
    }

    /// The first abort notice received from a peer: (its rank, its reason).
    pub fn abort_notice(&self) -> Option<(usize, String)> {
        self.mailbox.abort_notice()
    }

    /// Register a callback fired on a reader thread when a peer dies or an abort notice
    /// arrives (the core wakes its progress thread with it). Set once; a second call is
    /// ignored with a warning. If such an event already happened, it fires right away.
    /// It must not block, nor call [`close`](Self::close) of this bootstrap.
    pub fn set_event_hook(&self, hook: Box<dyn Fn() + Send + Sync>) {
        if !self.mailbox.set_hook(hook) {
            warn!(
                rank = self.rank,
                "bootstrap event hook already set; the new one is ignored"
            );
        }
    }

    /// Answer every peer's status query with `status()`, on the reader thread (so a rank
    /// whose program is busy elsewhere still answers). Set once. The reply carries the
    /// query's first 8 bytes (its id) and then the status.
    pub(crate) fn set_status_source(&self, status: Box<dyn Fn() -> Vec<u8> + Send + Sync>) {
        let conns = self.conns.clone();
        let answer = move |peer: usize, query: Vec<u8>| {
            let Some(Some(conn)) = conns.get(peer) else {
                return;
            };
            let mut reply = query.get(..8).unwrap_or_default().to_vec();
            reply.extend_from_slice(&status());
            if let Err(e) = conn.send_quick(wire::Kind::Data, coll::STATUS_REPLY, &reply, QUICK) {
                debug!(peer, "status reply not delivered: {e}");
            }
        };
        if !self
            .mailbox
            .set_responder(coll::STATUS_QUERY, Box::new(answer))
        {
            warn!(
                rank = self.rank,
                "status source already set; the new one is ignored"
            );
        }
    }

    /// For every rank, whether it died or closed its communicator.
    pub(crate) fn gone_peers(&self) -> Vec<bool> {
        self.mailbox.gone()
    }

    /// [`recv_deadline`](Self::recv_deadline) that goes on after an abort notice (only
    /// `peer`'s own failure ends it): for exchanges among the survivors of a failure.
    pub(crate) fn recv_despite_abort(
        &self,
        peer: usize,
        tag: u64,
        deadline: Instant,
    ) -> Result<Vec<u8>> {
        let after = deadline.saturating_duration_since(Instant::now());
        self.mailbox
            .wait_despite_abort(peer, tag, deadline)
            .map_err(|e| self.wait_error(e, peer, tag, after))
    }

    /// Send `query` (starting with its 8-byte id) to every live peer and collect their
    /// replies with that id until `deadline`, indexed by rank (`None`: no answer; our own
    /// entry is `None` too). Works on a communicator that was aborted.
    pub(crate) fn query_status(&self, query: &[u8], deadline: Instant) -> Vec<Option<Vec<u8>>> {
        let mut out = vec![None; self.nranks];
        let mut asked = Vec::new();
        for (peer, conn) in self.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            if self.mailbox.peer_gone(peer) {
                continue;
            }
            match conn.send_quick(wire::Kind::Data, coll::STATUS_QUERY, query, QUICK) {
                Ok(()) => asked.push(peer),
                Err(e) => debug!(peer, "status query not delivered: {e}"),
            }
        }
        let id = query.get(..8).unwrap_or_default();
        for peer in asked {
            // Replies to an earlier query that gave up on this peer are skipped.
            while let Ok(reply) =
                self.mailbox
                    .wait_despite_abort(peer, coll::STATUS_REPLY, deadline)
            {
                if reply.get(..8) == Some(id) {
                    out[peer] = Some(reply[8..].to_vec());
                    break;
                }
            }
        }
        out
    }

    /// Clean shutdown: goodbye to every live peer, close the sockets, join the reader
    /// threads. Idempotent; also done on drop. Never blocks long, even with dead peers.
    pub fn close(&self) {
        self.shut(true);
    }

    /// Simulate a crash: drop every connection without a goodbye frame.
    #[cfg(test)]
    pub(crate) fn kill_for_test(&self) {
        self.shut(false);
    }

    fn shut(&self, goodbye: bool) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // First, so our readers take the EOFs caused by our own shutdown as ours.
        self.mailbox.begin_close();
        for (peer, conn) in self.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            if goodbye && !self.mailbox.peer_gone(peer) {
                if let Err(e) = conn.send_quick(wire::Kind::Goodbye, 0, &[], QUICK) {
                    debug!(peer, "goodbye not delivered: {e}");
                }
            }
            conn.shutdown();
        }
        self.mailbox.close();
        let me = std::thread::current().id();
        for h in self.readers.lock().drain(..) {
            // A hook that closes us runs on a reader thread: it cannot join itself.
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
        debug!(rank = self.rank, goodbye, "bootstrap closed");
    }

    fn check_args(&self, peer: usize, tag: u64) -> Result<()> {
        if peer >= self.nranks {
            return Err(Error::invalid(format!(
                "bootstrap: peer {peer} is out of range for {} ranks",
                self.nranks
            )));
        }
        if tag & RESERVED_TAG_BIT != 0 {
            return Err(Error::invalid(format!(
                "bootstrap: tag {tag:#x} is reserved (tags must be below 2^63)"
            )));
        }
        Ok(())
    }

    /// Send without the tag check (collectives use reserved tags).
    pub(crate) fn send_raw(&self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        if data.len() as u64 > wire::MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "bootstrap: a message of {} bytes exceeds the {} byte limit",
                data.len(),
                wire::MAX_PAYLOAD
            )));
        }
        self.mailbox
            .check_peer(peer)
            .map_err(|e| self.wait_error(e, peer, tag, Duration::ZERO))?;
        let Some(conn) = &self.conns[peer] else {
            self.mailbox.deliver(peer, tag, data.to_vec());
            return Ok(());
        };
        conn.send(wire::Kind::Data, tag, data).map_err(|e| {
            let who = root::describe(&self.peers[peer]);
            match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout {
                    what: format!(
                        "sending {} to {who}: it stopped reading its bootstrap connection",
                        describe_tag(tag)
                    ),
                    peer: Some(peer),
                    after: self.timeout,
                },
                _ => Error::PeerFailed {
                    rank: peer,
                    detail: format!("sending {} to {who} failed: {e}", describe_tag(tag)),
                },
            }
        })
    }

    /// Receive without the tag check; `after` is the wait a timeout error reports.
    pub(crate) fn recv_raw(
        &self,
        peer: usize,
        tag: u64,
        deadline: Instant,
        after: Duration,
    ) -> Result<Vec<u8>> {
        self.mailbox
            .wait(peer, tag, deadline)
            .map_err(|e| self.wait_error(e, peer, tag, after))
    }

    fn wait_error(&self, e: WaitError, peer: usize, tag: u64, waited: Duration) -> Error {
        let who = || root::describe(&self.peers[peer]);
        match e {
            WaitError::PeerDead(detail) => Error::PeerFailed { rank: peer, detail },
            WaitError::PeerLeft => Error::PeerFailed {
                rank: peer,
                detail: format!(
                    "{} closed its communicator (said goodbye) before {} could be exchanged",
                    who(),
                    describe_tag(tag)
                ),
            },
            WaitError::Aborted(from, reason) => Error::from_abort(from, &reason),
            WaitError::Closed => {
                Error::Destroyed(format!("the bootstrap of rank {} was closed", self.rank))
            }
            WaitError::Timeout => Error::Timeout {
                what: format!("{} from {}", describe_tag(tag), who()),
                peer: Some(peer),
                after: waited,
            },
        }
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        self.close();
    }
}

/// "bootstrap message (tag 5)" or the internal collective a reserved tag belongs to.
fn describe_tag(tag: u64) -> String {
    if tag & RESERVED_TAG_BIT == 0 {
        format!("bootstrap message (tag {tag})")
    } else {
        coll::describe_internal_tag(tag)
    }
}
