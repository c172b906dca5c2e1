//! A new communicator from ranks of this one (what [`split`](Communicator::split)
//! and [`shrink`](Communicator::shrink) end with): the first member listens for
//! the rendezvous and sends its address to the others over this bootstrap.

use super::{CommConfig, Communicator};
use crate::error::{Error, Result};

impl Communicator {
    /// A new communicator of `members` (ranks of this one, in new-rank order; this
    /// rank among them), whose rendezvous address the first member sends to the
    /// others under `tag`. With `after_failure`, the address travels even though
    /// this communicator was aborted (only the first member's own failure stops it).
    pub(crate) fn form(
        &self,
        members: &[usize],
        tag: u64,
        after_failure: bool,
    ) -> Result<Communicator> {
        let me = self.rank();
        let new_rank = members
            .iter()
            .position(|&r| r == me)
            .ok_or_else(|| Error::invalid(format!("rank {me} is not among {members:?}")))?;
        let boot = &self.shared.bootstrap;
        let cfg = |root: String| CommConfig {
            root,
            rank: new_rank,
            nranks: members.len(),
            timeout: Some(self.timeout()),
            // This one's, not re-read: the environment or the file may have changed.
            secret: self.secret.clone(),
            // The parent's GPU (or none): a process keeps its device across splits.
            device: Some(self.device().unwrap_or(-1)),
        };
        if new_rank == 0 {
            // Listen on a free port of the interface the peers reach us at, and
            // tell the members where once bound.
            let ip = self.peers()[me].addr.ip();
            let root = std::net::SocketAddr::new(ip, 0).to_string();
            let tell = |addr: std::net::SocketAddr| {
                for &m in &members[1..] {
                    if let Err(e) = boot.send_raw(m, tag, addr.to_string().as_bytes()) {
                        tracing::warn!(target: "ferrocx::comm", "telling rank {m} the new root: {e}");
                    }
                }
            };
            Communicator::create(cfg(root), Some(&tell))
        } else {
            let addr = if after_failure {
                let deadline = std::time::Instant::now() + self.timeout();
                boot.recv_despite_abort(members[0], tag, deadline)?
            } else {
                boot.recv(members[0], tag)?
            };
            let root = String::from_utf8(addr)
                .map_err(|_| Error::Bootstrap("the new root's address is not text".into()))?;
            Communicator::create(cfg(root), None)
        }
    }
}
