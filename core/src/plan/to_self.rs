//! Sends to this rank itself and receives from itself, inside one group (NCCL
//! programs post them: all-to-all as grouped send/recv includes the rank's own
//! block). They pair in posting order and become local copies; nothing about
//! them crosses a transport.

use super::{P2pTask, Task};
use crate::error::{Error, Result};
use crate::plugin::Dir;

/// Whether any op of `tasks` is with `rank` itself. The usual group has
/// none: callers ask first, so a small send (well under a microsecond, issue
/// 18) pays for no pairing.
pub(crate) fn has_self_ops(tasks: &[Task], rank: usize) -> bool {
    tasks
        .iter()
        .any(|t| matches!(t, Task::P2p(p) if p.peer == rank))
}

/// (send, receive) task indices of every send to `rank` and its receive, paired in
/// order. Unequal numbers or sizes are an error naming them.
pub(crate) fn self_pairs(tasks: &[Task], rank: usize) -> Result<Vec<(usize, usize)>> {
    if !has_self_ops(tasks, rank) {
        return Ok(Vec::new());
    }
    let mine = |dir: Dir| -> Vec<usize> {
        tasks
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                Task::P2p(p) if p.peer == rank && p.dir == dir => Some(i),
                _ => None,
            })
            .collect()
    };
    let (sends, recvs) = (mine(Dir::Send), mine(Dir::Recv));
    if sends.len() != recvs.len() {
        return Err(Error::invalid(format!(
            "rank {rank} sends to itself {} time(s) but receives from itself {} time(s): \
             a send to itself needs its receive in the same group",
            sends.len(),
            recvs.len()
        )));
    }
    let len = |i: usize| match &tasks[i] {
        Task::P2p(p) => p.len,
        Task::Coll(_) => 0,
    };
    for (k, (&s, &r)) in sends.iter().zip(&recvs).enumerate() {
        if len(s) != len(r) {
            return Err(Error::invalid(format!(
                "rank {rank}'s send #{k} to itself has {} bytes but its receive #{k} from itself has {}",
                len(s),
                len(r)
            )));
        }
    }
    Ok(sends.into_iter().zip(recvs).collect())
}

/// `copy(send, receive)` for each of this rank's sends to itself in
/// `tasks` and its receive ([`self_pairs`]); the task indices of those
/// pairs, highest first (removing them in this order leaves the others'
/// indices valid).
pub(crate) fn copy_self_pairs(
    tasks: &[Task],
    rank: usize,
    mut copy: impl FnMut((usize, &P2pTask), (usize, &P2pTask)) -> Result<()>,
) -> Result<Vec<usize>> {
    let pairs = self_pairs(tasks, rank)?;
    for &(s, r) in &pairs {
        let (Task::P2p(send), Task::P2p(recv)) = (&tasks[s], &tasks[r]) else {
            unreachable!("self_pairs pairs sends and receives");
        };
        copy((s, send), (r, recv))?;
    }
    let mut all: Vec<usize> = pairs.iter().flat_map(|&(s, r)| [s, r]).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::P2pTask;

    fn p2p(dir: Dir, peer: usize, len: usize) -> Task {
        Task::P2p(P2pTask {
            dir,
            peer,
            ptr: 0x1000,
            len,
            device: false,
            seq: 0,
        })
    }

    #[test]
    fn sends_to_itself_pair_with_receives_in_order() {
        let t = [
            p2p(Dir::Recv, 1, 8),
            p2p(Dir::Send, 2, 8),
            p2p(Dir::Recv, 2, 16),
            p2p(Dir::Send, 2, 16),
            p2p(Dir::Recv, 2, 8),
        ];
        // Rank 2: send #0 (idx 1, 8 B) pairs with recv #0 (idx 2, 16 B): sizes differ.
        let e = self_pairs(&t, 2).unwrap_err().to_string();
        assert!(
            e.contains("send #0 to itself has 8 bytes but its receive #0 from itself has 16"),
            "{e}"
        );
        let t = [
            p2p(Dir::Send, 0, 4),
            p2p(Dir::Recv, 0, 4),
            p2p(Dir::Send, 1, 4),
            p2p(Dir::Recv, 0, 9),
            p2p(Dir::Send, 0, 9),
        ];
        assert_eq!(self_pairs(&t, 0).unwrap(), vec![(0, 1), (4, 3)]);
        assert_eq!(self_pairs(&t, 3).unwrap(), vec![]);
        let e = self_pairs(&t[..1], 0).unwrap_err().to_string();
        assert!(
            e.contains("sends to itself 1 time(s) but receives from itself 0"),
            "{e}"
        );
    }
}
