//! What the proxy needs from a transport: carry one request to one peer on one
//! path. Copy engines (same host), net-socket and net-ib will implement it.

use crate::health::{Path, PeerId, Request};
use crate::queue::WorkRecord;
use std::fmt;

/// One attempt of one request, as handed to a [`Carrier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarrierRequest {
    /// The health header: sender, sequence number and `completed_below`, which
    /// the receiving side's [`crate::health::Receiver`] needs to apply the
    /// request once although it may arrive on both paths.
    pub req: Request,
    /// What to do at the peer: windows, offsets, signal.
    pub work: WorkRecord,
    /// 0 for the first post, 1 after one failover, ….
    pub attempt: u32,
}

/// A carrier that could not even accept a request (the connection is gone, the
/// queue to the NIC is broken); treated like an error completion of that path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The transport's status code, reported in the path fault.
    pub status: u32,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "carrier refused the request (status {:#x})", self.status)
    }
}

impl std::error::Error for Refused {}

/// The transport under the proxy. `post` starts the transfer and returns; its
/// completion (or error completion) comes back later through
/// [`super::Proxy::on_completion`] / [`super::Proxy::on_error_completion`],
/// and one that never comes back is the health machine's timeout to notice.
pub trait Carrier {
    /// Starts carrying `req` to `peer` on `path`.
    fn post(&mut self, peer: PeerId, path: Path, req: &CarrierRequest) -> Result<(), Refused>;

    /// Whether `work` can be carried to `peer` at all (windows and offsets in
    /// bounds...). An `Err` completes the request at once with
    /// [`CqStatus::BadRecord`](crate::queue::CqStatus::BadRecord) and a
    /// [`ProxyEvent::Rejected { queue, req_id, why }`](super::ProxyEvent::Rejected),
    /// without posting it or touching path health.
    ///
    /// Asked once per request, before its first post: a request no path could
    /// carry is the GPU's mistake, not a path fault, and must not fail over.
    fn check(&self, peer: PeerId, work: &WorkRecord) -> Result<(), String> {
        let _ = (peer, work);
        Ok(())
    }
}
