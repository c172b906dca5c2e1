//! Per-(me, peer) path health with failover to a backup path, sans-IO.
//!
//! Reference note 004 (NVSHMEM IBGDA fault tolerance for DeepEP) learned three things
//! the hard way, and this module is built around them:
//!
//! * health belongs to the **path to one peer**, not to a NIC: one peer's dead port
//!   says nothing about the other peers reached through the same NIC;
//! * the completion of **every** request is checked against a deadline, atomics
//!   included (their lost completion hung DeepEP's dispatch);
//! * a timeout must become an **error**, never a trap or an endless wait.
//!
//! The pieces, none of which does I/O, sleeps or reads a clock (the caller passes
//! the time in, as [`Nanos`]):
//!
//! * [`PathHealth`] — for one peer: is the primary up, is the backup up, which one
//!   carries new traffic, when a failed primary is taken back;
//! * [`Sender`] — requests in flight to every peer, each with a completion
//!   deadline; emits [`Action`]s (post this request on that path, report a path,
//!   complete or fail a request);
//! * [`Receiver`] — the other end: applies each request exactly once although it
//!   may arrive on both paths, and answers duplicates with the first answer.
//!
//! A request is identified by its per-peer sequence number ([`Seq`]). When its
//! completion does not come in time on one path, that path is marked bad and the
//! same sequence number is posted on the other path; whichever completion comes
//! first completes it, later ones are ignored, and the receiver never applies it
//! twice. With the recovery window longer than the timeout (checked by
//! [`HealthConfig::validate`]), a peer whose both paths stop answering is declared
//! unreachable at most two timeouts after the first request posted to it after the
//! failure.

mod error;
mod path;
mod receiver;
mod sender;
mod time;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use error::{ConfigError, PathFault, PeerError, PostError, UnknownCompletion};
pub use path::{HealthConfig, PathHealth, PathStatus};
pub use receiver::{Memory, Receiver};
pub use sender::{Action, Sender, SenderStats};
pub use time::Nanos;

use std::fmt;

/// A rank, as the communicator numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerId(pub u32);

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer {}", self.0)
    }
}

/// One of the two paths from this rank to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Path {
    /// Through the NIC (port) closest to this rank's GPU.
    Primary,
    /// Through the backup NIC or port chosen by [`crate::pairing`].
    Backup,
}

impl Path {
    /// The other path.
    pub fn other(self) -> Path {
        match self {
            Path::Primary => Path::Backup,
            Path::Backup => Path::Primary,
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Path::Primary => "primary path",
            Path::Backup => "backup path",
        })
    }
}

/// Per-(sender, receiver) sequence number of a request; the same request keeps it
/// when it is posted again on the other path, which is what makes dedup possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(pub u64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request #{}", self.0)
    }
}

/// What a request does at the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE of `len` bytes at offset `dst` of the peer's window.
    Write {
        /// Offset in the peer's window.
        dst: u64,
        /// Bytes written.
        len: u32,
    },
    /// Atomic fetch-and-add of `add` on the 8-byte word at offset `dst`; its
    /// completion must carry the value the word held before.
    FetchAdd {
        /// Offset of the word in the peer's window.
        dst: u64,
        /// Added value (wrapping).
        add: u64,
    },
}

impl Op {
    /// Whether the completion of this operation carries a value.
    pub fn returns_value(&self) -> bool {
        matches!(self, Op::FetchAdd { .. })
    }
}

/// What travels to the peer: one attempt of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The sender's rank.
    pub from: PeerId,
    /// The request's sequence number (the same on every attempt).
    pub seq: Seq,
    /// The operation.
    pub op: Op,
    /// Every request of this sender below this number has completed at the
    /// sender, so the receiver may forget the answers it kept for them.
    pub completed_below: Seq,
}

/// What comes back to the sender: a completion seen on one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The peer the request went to.
    pub peer: PeerId,
    /// The path the completion was seen on.
    pub path: Path,
    /// The request it completes.
    pub seq: Seq,
    /// For a fetch-add, the value the word held before the add; `None` for a write.
    pub fetched: Option<u64>,
}
