//! With the deferred check, `comm_destroy` compares each rank's last call.
//!
//! A rank that took nothing from a peer in a call that differs learns of it
//! at a later call (`unheard`, `elsewhere`, a wait for room); after the last
//! calls of a program there is none. Every rank publishes the call it is in
//! (its region's header), and every rank reaches `comm_destroy` (it is
//! collective): after an out-of-band barrier each peer's last published call
//! is final, and a rank compares it with its own. A difference, or a peer
//! that gave up on a mismatch, fails the destroy with the mismatch — so every
//! rank hears of every difference by its next call or its destroy.

use super::ShmComm;
use ferrocx_algo::fingerprint::{mismatch_text, FINGERPRINT_BYTES};
use ferrocx_algo::Fingerprint;
use ferrocx_sdk::{PluginError, PluginResult};

/// A rank's last published call: its number and fingerprint.
type Last = Option<(u64, [u8; FINGERPRINT_BYTES])>;

/// The mismatch of rank `me`'s last call with rank `peer`'s, if they differ.
pub(crate) fn last_calls_differ(
    me: usize,
    mine: Last,
    peer: usize,
    theirs: Last,
) -> Option<String> {
    if mine == theirs {
        return None;
    }
    let say = |l: Last| match l {
        None => "no collective".to_string(),
        Some((seq, fp)) => Fingerprint::decode(&fp).map_or_else(
            |g| format!("something unreadable as op #{seq} ({})", g.0),
            |f| f.to_string(),
        ),
    };
    Some(format!(
        "{} (each rank's last call before comm_destroy)",
        mismatch_text(me, &say(mine), peer, &say(theirs))
    ))
}

impl ShmComm {
    /// At `comm_destroy` (every rank): with the deferred check, the
    /// difference no later call surfaced, if any. Nothing with the check
    /// synchronous or off, or on a comm already broken (its status said why).
    pub fn close(&mut self) -> PluginResult<()> {
        // Kept with the deferred check only.
        let Some(oob) = self.oob.take() else {
            return Ok(());
        };
        // Every rank joins (broken or not): then every peer's last call is
        // published.
        oob.barrier()?;
        if self.broken.is_some() {
            return Ok(());
        }
        let mine = self.arena.published_call(self.rank);
        for p in (0..self.nranks).filter(|&p| p != self.rank) {
            if let Some(e) = self.gave_up(p) {
                return Err(e);
            }
            if let Some(text) = last_calls_differ(self.rank, mine, p, self.arena.published_call(p))
            {
                return Err(self.break_with(PluginError::invalid(text)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_algo::{CollKind, DataType, RedOp};

    fn last(seq: u64, kind: CollKind, count: usize, root: usize) -> Last {
        let f = Fingerprint::of(seq, kind, DataType::U32, RedOp::Sum, count, root, false);
        Some((seq, f.encode()))
    }

    #[test]
    fn the_same_last_call_or_none_is_no_difference() {
        let a = last(7, CollKind::Broadcast, 4, 0);
        assert_eq!(last_calls_differ(0, a, 1, a), None);
        assert_eq!(last_calls_differ(1, None, 0, None), None);
    }

    #[test]
    fn a_differing_or_missing_last_call_names_both_ranks_calls() {
        let a = last(7, CollKind::Broadcast, 4, 0);
        let count = last(7, CollKind::Broadcast, 8, 0);
        let fewer = last(6, CollKind::Broadcast, 4, 0);
        let t = last_calls_differ(1, count, 0, a).expect("differs");
        assert!(
            t.starts_with("mismatched calls: rank 0 called broadcast(uint32, 4, root 0) as op #7, rank 1 called broadcast(uint32, 8, root 0) as op #7"),
            "{t}"
        );
        let t = last_calls_differ(0, a, 1, fewer).expect("differs");
        assert!(t.contains("as op #7") && t.contains("as op #6"), "{t}");
        let t = last_calls_differ(0, a, 1, None).expect("differs");
        assert!(t.contains("rank 1 called no collective"), "{t}");
    }
}
