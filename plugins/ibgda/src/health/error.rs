//! What went wrong, said plainly: every error names the peer, the path and the
//! request involved, so the host side can report it without more context.

use super::{Path, PeerId, Seq};
use std::fmt;
use std::time::Duration;

/// Why a path was marked bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathFault {
    /// No completion for `seq` within the timeout.
    Timeout {
        /// The request whose completion was missing.
        seq: Seq,
        /// Whether it was an atomic (note 004: those were the ones left unchecked).
        atomic: bool,
        /// How long it had been waiting.
        waited: Duration,
    },
    /// The NIC completed `seq` with an error (retry count exceeded, flushed, …).
    ErrorCompletion {
        /// The failed request.
        seq: Seq,
        /// The NIC's status or syndrome, as it reported it.
        status: u32,
    },
    /// A fetch-add completed without the value it fetched, so whether and where it
    /// applied is unknown; the other path's answer (deduplicated) decides.
    AtomicWithoutValue {
        /// The atomic request.
        seq: Seq,
    },
    /// A write completed carrying a fetched value: the completion belongs to
    /// something else.
    WriteWithValue {
        /// The write request.
        seq: Seq,
    },
}

impl fmt::Display for PathFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathFault::Timeout {
                seq,
                atomic,
                waited,
            } => write!(
                f,
                "{} {seq} saw no completion within {waited:?}",
                if *atomic { "atomic" } else { "write" }
            ),
            PathFault::ErrorCompletion { seq, status } => {
                write!(f, "{seq} completed with error status {status:#x}")
            }
            PathFault::AtomicWithoutValue { seq } => {
                write!(f, "atomic {seq} completed without its fetched value")
            }
            PathFault::WriteWithValue { seq } => {
                write!(f, "write {seq} completed with a fetched value")
            }
        }
    }
}

/// A peer can no longer be reached: both its paths are bad (or it has no backup
/// and its primary is bad). Sticky: the communicator must be rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerError {
    /// The peer.
    pub peer: PeerId,
    /// Why the primary path was marked bad.
    pub primary: PathFault,
    /// Why the backup path was marked bad; `None` when the peer has no backup path.
    pub backup: Option<PathFault>,
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is unreachable: {} failed ({})",
            self.peer,
            Path::Primary,
            self.primary
        )?;
        match &self.backup {
            Some(why) => write!(f, ", {} failed ({why})", Path::Backup),
            None => write!(f, ", and there is no {}", Path::Backup),
        }
    }
}

impl std::error::Error for PeerError {}

/// A request could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The peer was declared unreachable earlier.
    PeerUnreachable(PeerError),
    /// The peer was never added with [`super::Sender::add_peer`].
    UnknownPeer(PeerId),
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::PeerUnreachable(e) => write!(f, "cannot post: {e}"),
            PostError::UnknownPeer(p) => write!(f, "cannot post: {p} has no paths set up"),
        }
    }
}

impl std::error::Error for PostError {}

/// A completion that matches nothing this sender posted (a bug in the caller or
/// the NIC handler, never a path fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownCompletion {
    /// The completion names a peer with no paths set up.
    UnknownPeer {
        /// The peer named.
        peer: PeerId,
        /// The path it was seen on.
        path: Path,
    },
    /// The completion names a sequence number not yet issued to that peer.
    NeverPosted {
        /// The peer.
        peer: PeerId,
        /// The path it was seen on.
        path: Path,
        /// The sequence number named.
        seq: Seq,
        /// The next number that would be issued.
        next: Seq,
    },
}

impl fmt::Display for UnknownCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownCompletion::UnknownPeer { peer, path } => {
                write!(
                    f,
                    "completion on the {path} to {peer}, which has no paths set up"
                )
            }
            UnknownCompletion::NeverPosted {
                peer,
                path,
                seq,
                next,
            } => write!(
                f,
                "completion on the {path} to {peer} for {seq}, never posted (next is {})",
                next.0
            ),
        }
    }
}

impl std::error::Error for UnknownCompletion {}

/// A [`super::HealthConfig`] that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// A zero completion timeout would fail every request at once.
    ZeroTimeout,
    /// The recovery window must be longer than the timeout: a window no longer than
    /// one timeout cannot have seen a request fail, and it would let a dead peer's
    /// requests bounce between two bad paths instead of failing.
    RecoveryNotLongerThanTimeout {
        /// The completion timeout.
        timeout: Duration,
        /// The recovery window.
        recovery: Duration,
    },
    /// The longest window of a flapping path is shorter than the first one.
    MaxRecoveryBelowRecovery {
        /// The recovery window.
        recovery: Duration,
        /// Its upper bound.
        max_recovery: Duration,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroTimeout => f.write_str("the completion timeout is zero"),
            ConfigError::RecoveryNotLongerThanTimeout { timeout, recovery } => write!(
                f,
                "the recovery window ({recovery:?}) must be longer than the completion timeout ({timeout:?})"
            ),
            ConfigError::MaxRecoveryBelowRecovery {
                recovery,
                max_recovery,
            } => write!(
                f,
                "the longest recovery window of a flapping path ({max_recovery:?}) must be at least the recovery window ({recovery:?})"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
