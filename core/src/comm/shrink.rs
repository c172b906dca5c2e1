//! [`Communicator::shrink`]: after ranks failed, the survivors agree on who is
//! left (`ferrocx_algo::survivors`, over this communicator's bootstrap, which
//! outlives the failure) and form a new communicator of them, as
//! `ncclCommShrink` and MPI ULFM's `MPI_Comm_shrink`.

use super::Communicator;
use crate::error::{Error, Result};
use ferrocx_algo::survivors::{Agreement, Outcome};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Tag space of a shrink's messages ("SH"): shrink number, round.
const TAG_SHRINK: u64 = 0x5348_0000_0000_0000;
/// The round number that carries the new root's address.
const ROOT_ROUND: u64 = 0xffff;

impl Communicator {
    /// A new communicator of the ranks still alive, for a program that goes on
    /// after ranks failed (typically after an operation returned
    /// [`Error::PeerFailed`]). Every surviving rank calls it; they agree on who
    /// failed (a rank that does not answer within the timeout counts as failed)
    /// and get a communicator of the survivors, ranked in their old order (the
    /// lowest surviving rank is rank 0), with the timeout of this one. This
    /// communicator stays broken: destroy it. Works on a healthy communicator too
    /// (then nobody is left out).
    ///
    /// A rank lost during the shrink itself can make it fail on every survivor;
    /// call it again. With `fxrun`, use `--keep-going` so the launcher does not
    /// stop the job when a rank dies.
    pub fn shrink(&self) -> Result<Communicator> {
        if self.state.load(Ordering::Acquire) == super::DESTROYED {
            return Err(Error::Destroyed("communicator was destroyed".into()));
        }
        let boot = &self.shared.bootstrap;
        let me = self.rank();
        let epoch = self.shrinks.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
        let tag = |round: u64| TAG_SHRINK | (epoch << 16) | round;
        let mut agree = Agreement::new(me, boot.gone_peers());
        let members = loop {
            let round = u64::from(agree.round());
            let deadline = Instant::now() + self.timeout();
            let msg = agree.message();
            let peers = agree.peers();
            for &p in &peers {
                if boot.send_raw(p, tag(round), &msg).is_err() {
                    agree.lost(p);
                }
            }
            for &p in &peers {
                match boot.recv_despite_abort(p, tag(round), deadline) {
                    Ok(m) => agree.receive(p, &m),
                    Err(e) => {
                        tracing::info!(target: "ferrocx::comm", "shrink: rank {p} counts as failed: {e}");
                        agree.lost(p);
                    }
                }
            }
            match agree.finish_round() {
                Outcome::Agreed(members) => {
                    // For a peer still a round behind (see `Agreement::echo`).
                    let next = u64::from(agree.round()) + 1;
                    for p in agree.peers() {
                        let _ = boot.send_raw(p, tag(next), &agree.echo());
                    }
                    break members;
                }
                Outcome::Again => continue,
                Outcome::Failed(why) => {
                    return Err(Error::Bootstrap(format!(
                        "shrink: rank {me} cannot join the survivors: {why}"
                    )))
                }
            }
        };
        let gone: Vec<usize> = (0..self.nranks())
            .filter(|r| !members.contains(r))
            .collect();
        let comm = self.form(&members, tag(ROOT_ROUND), true)?;
        tracing::info!(
            target: "ferrocx::comm",
            "shrink: without ranks {gone:?}, rank {me} is rank {} of {}",
            comm.rank(),
            comm.nranks()
        );
        Ok(comm)
    }
}
