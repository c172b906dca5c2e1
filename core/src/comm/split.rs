//! [`Communicator::split`]: new communicators from groups of this one's
//! ranks, as `MPI_Comm_split` and `ncclCommSplit`.

use super::Communicator;
use crate::error::Result;
use std::sync::atomic::Ordering;

/// Tag space of the messages that carry a split's rendezvous address ("SP").
const TAG_SPLIT: u64 = 0x5350_0000_0000_0000;

/// The groups of a split: for every rank its (color, key); returns the
/// members of `me`'s group in new-rank order (key, then old rank), or `None`
/// when `me` passed a negative color. Sans-IO.
pub fn group_of(all: &[(i32, i32)], me: usize) -> Option<Vec<usize>> {
    let color = all[me].0;
    if color < 0 {
        return None;
    }
    let mut members: Vec<usize> = (0..all.len()).filter(|&r| all[r].0 == color).collect();
    members.sort_by_key(|&r| (all[r].1, r));
    Some(members)
}

impl Communicator {
    /// Split into new communicators (collective: every rank calls it, in the
    /// same order with its other collective calls): ranks passing the same
    /// `color` form one, ordered by `key` (ties by their rank here). A
    /// negative `color` takes no part and gets `None`. The new communicators
    /// have their own bootstrap, transports and plugins, and the timeout and
    /// job secret of this one.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Communicator>> {
        self.check_live()?;
        let seq = self.splits.fetch_add(1, Ordering::Relaxed);
        let mut mine = [0u8; 8];
        mine[..4].copy_from_slice(&color.to_le_bytes());
        mine[4..].copy_from_slice(&key.to_le_bytes());
        let all: Vec<(i32, i32)> = self
            .shared
            .bootstrap
            .all_gather(&mine)?
            .iter()
            .map(|b| {
                let w = |i: usize| i32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
                (w(0), w(4))
            })
            .collect();
        let me = self.rank();
        let Some(members) = group_of(&all, me) else {
            return Ok(None);
        };
        let new_rank = members.iter().position(|&r| r == me).expect("a member");
        let comm = self.form(&members, TAG_SPLIT | seq, false)?;
        tracing::info!(target: "ferrocx::comm", "split (color {color}, key {key}): rank {me} is rank {new_rank} of {}", members.len());
        Ok(Some(comm))
    }
}

#[cfg(test)]
mod tests {
    use super::group_of;

    #[test]
    fn groups_by_color_order_by_key_then_rank() {
        let all = [(1, 5), (0, 0), (1, 2), (-1, 0), (1, 2), (0, -3)];
        assert_eq!(group_of(&all, 0), Some(vec![2, 4, 0]));
        assert_eq!(group_of(&all, 4), Some(vec![2, 4, 0]));
        assert_eq!(group_of(&all, 1), Some(vec![5, 1]));
        assert_eq!(group_of(&all, 3), None);
    }
}
