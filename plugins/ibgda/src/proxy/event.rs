//! What the proxy tells the host side (logs, `fxinfo`, the error the user sees).

use super::QueueId;
use crate::health::{Path, PathFault, PeerError, PeerId, Seq, UnknownCompletion};
use crate::queue::{DecodeError, QueueError};
use std::fmt;
use std::time::Duration;

/// Something the host side should know, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyEvent {
    /// `path` to `peer` was marked bad; its traffic moves to the other path.
    PathDown {
        /// The peer.
        peer: PeerId,
        /// The path.
        path: Path,
        /// Why.
        why: PathFault,
    },
    /// A request was posted again on the other path.
    Failover {
        /// The peer.
        peer: PeerId,
        /// The request's sequence number.
        seq: Seq,
        /// The path it now goes on.
        to: Path,
        /// Its attempt number (1 for the first re-post).
        attempt: u32,
    },
    /// `path` to `peer` is usable again (the primary: the switch back).
    PathRestored {
        /// The peer.
        peer: PeerId,
        /// The path.
        path: Path,
        /// How long it was down.
        down_for: Duration,
    },
    /// `peer` is unreachable; every request to it gets an error completion.
    /// Reported once per peer.
    PeerUnreachable(PeerError),
    /// A record could not be decoded; it got a [`crate::queue::CqStatus::BadRecord`]
    /// completion.
    BadRecord {
        /// Its queue.
        queue: QueueId,
        /// Its request id.
        req_id: u64,
        /// What was wrong.
        error: DecodeError,
    },
    /// The carrier refused a record as one it can never carry
    /// ([`super::Carrier::check`]); it got a
    /// [`crate::queue::CqStatus::BadRecord`] completion and was never posted.
    Rejected {
        /// Its queue.
        queue: QueueId,
        /// Its request id.
        req_id: u64,
        /// The carrier's reason.
        why: String,
    },
    /// A queue's memory is inconsistent; the proxy stopped using it.
    QueueBroken {
        /// The queue.
        queue: QueueId,
        /// Whether it was the completion queue (else the request queue).
        completion_queue: bool,
        /// What was wrong.
        error: QueueError,
    },
    /// The health machine did not recognize a completion the proxy gave it (a
    /// carrier bug, never a path fault).
    StrayCompletion(UnknownCompletion),
}

impl fmt::Display for ProxyEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyEvent::PathDown { peer, path, why } => {
                write!(f, "{path} to {peer} is down: {why}")
            }
            ProxyEvent::Failover {
                peer,
                seq,
                to,
                attempt,
            } => write!(
                f,
                "{seq} to {peer} posted again on the {to} (attempt {attempt})"
            ),
            ProxyEvent::PathRestored {
                peer,
                path,
                down_for,
            } => write!(f, "{path} to {peer} is back after {down_for:?}"),
            ProxyEvent::PeerUnreachable(e) => write!(f, "{e}"),
            ProxyEvent::BadRecord {
                queue,
                req_id,
                error,
            } => write!(
                f,
                "{queue}: request {req_id} is not a valid record: {error}"
            ),
            ProxyEvent::Rejected { queue, req_id, why } => {
                write!(f, "{queue}: request {req_id} cannot be carried: {why}")
            }
            ProxyEvent::QueueBroken {
                queue,
                completion_queue,
                error,
            } => write!(
                f,
                "{queue}: {} no longer used: {error}",
                if *completion_queue {
                    "completion queue"
                } else {
                    "request queue"
                }
            ),
            ProxyEvent::StrayCompletion(e) => write!(f, "{e}"),
        }
    }
}
