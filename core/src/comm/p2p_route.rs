//! Stream-ordered device sends and receives offered to the collective
//! plugins (`p2p_can_run`, `p2p_launch`): each op is asked about alone, so
//! the two ends of a message, asked on two ranks, always agree on who runs
//! it; the ops a plugin won are launched together, one call per plugin and
//! stream, before the rest of the group goes through the core's path.

use super::Communicator;
use crate::collective::Runner;
use crate::device::RawStream;
use crate::error::{Error, Result};
use crate::plan::Task;
use crate::plugin::Dir;
use ferrocx_sdk::abi::*;
use std::ffi::c_void;

/// One plugin launch: the runner's index, the stream, the op indices.
pub(crate) type Launch<S> = (usize, S, Vec<usize>);

/// Which launches a group's ops make: for each (runner index, stream), the
/// op indices in posted order, in the order of each pair's first op; the
/// ops nobody won (and every collective) stay for the core, in order.
/// `choose(i)` is op `i`'s winner, `None` for the core.
pub(crate) fn split<S: Copy + PartialEq>(
    n: usize,
    choose: impl Fn(usize) -> Option<usize>,
    stream: impl Fn(usize) -> S,
) -> (Vec<Launch<S>>, Vec<usize>) {
    let mut launches: Vec<Launch<S>> = Vec::new();
    let mut rest = Vec::new();
    for i in 0..n {
        match choose(i) {
            Some(p) => {
                let s = stream(i);
                match launches.iter_mut().find(|(q, t, _)| *q == p && *t == s) {
                    Some((_, _, ops)) => ops.push(i),
                    None => launches.push((p, s, vec![i])),
                }
            }
            None => rest.push(i),
        }
    }
    (launches, rest)
}

fn raw_op(dir: Dir, peer: usize, bytes: usize, buf: usize) -> FxP2pOp {
    FxP2pOp {
        kind: if dir == Dir::Send {
            FX_P2P_SEND
        } else {
            FX_P2P_RECV
        },
        peer: peer as i32,
        bytes: bytes as u64,
        buf: buf as *mut c_void,
    }
}

fn one(op: &FxP2pOp, capturing: bool) -> FxP2pDesc {
    FxP2pDesc {
        ops: op,
        nops: 1,
        mem_kind: FX_MEM_CUDA,
        flags: if capturing { FX_COLL_CAPTURING } else { 0 },
        reserved: 0,
    }
}

impl Communicator {
    /// The plugin that wins a device send (`send`) or receive of `bytes`
    /// with `peer` on a stream not being captured, `None` for the core.
    fn p2p_winner(&self, op: &FxP2pOp, capturing: bool) -> Option<usize> {
        let d = one(op, capturing);
        match Runner::best(self.colls.plugins().iter().map(|p| p.p2p_can_run(&d))) {
            Runner::Plugin(i) => Some(i),
            Runner::Core => None,
        }
    }

    /// Who would run a device send (`send`) or receive of `bytes` with
    /// `peer` (on a stream not being captured): a collective plugin's name,
    /// or `"core"`.
    pub fn device_p2p_runner(&self, send: bool, bytes: usize, peer: usize) -> Result<String> {
        if peer >= self.nranks() {
            return Err(Error::invalid(format!(
                "peer {peer} out of range 0..{}",
                self.nranks()
            )));
        }
        let dir = if send { Dir::Send } else { Dir::Recv };
        // A non-null address: the plugin is asked about the op's shape only.
        let op = raw_op(dir, peer, bytes, 1);
        Ok(match self.p2p_winner(&op, false) {
            Some(i) => self.colls.plugins()[i].name().to_string(),
            None => "core".to_string(),
        })
    }

    /// Launch the device sends and receives of `tasks` that a collective
    /// plugin wins; return the rest (with their streams) for the core.
    ///
    /// # Safety
    /// As [`Communicator::collective_on`] for every task and stream.
    pub(super) unsafe fn device_p2p_on_plugins(
        &self,
        tasks: Vec<Task>,
        streams: Vec<RawStream>,
    ) -> Result<(Vec<Task>, Vec<RawStream>)> {
        if self.colls.is_empty() || !tasks.iter().any(|t| matches!(t, Task::P2p(_))) {
            return Ok((tasks, streams));
        }
        self.check_live()?;
        self.device_error()?;
        let mut capturing = Vec::with_capacity(streams.len());
        for &s in &streams {
            capturing.push(crate::device::order::is_capturing(s)?);
        }
        let ops: Vec<Option<FxP2pOp>> = tasks
            .iter()
            .map(|t| match t {
                Task::P2p(p) if p.device => Some(raw_op(p.dir, p.peer, p.len, p.ptr)),
                _ => None,
            })
            .collect();
        let (launches, rest) = split(
            tasks.len(),
            |i| {
                ops[i]
                    .as_ref()
                    .and_then(|op| self.p2p_winner(op, capturing[i]))
            },
            |i| streams[i],
        );
        for (p, stream, idx) in &launches {
            let group: Vec<FxP2pOp> = idx.iter().map(|&i| ops[i].expect("a p2p op")).collect();
            let desc = FxP2pDesc {
                ops: group.as_ptr(),
                nops: group.len() as u32,
                mem_kind: FX_MEM_CUDA,
                flags: if capturing[idx[0]] {
                    FX_COLL_CAPTURING
                } else {
                    0
                },
                reserved: 0,
            };
            let plugin = &self.colls.plugins()[*p];
            // SAFETY: the caller's contract for the buffers and the stream; the
            // descriptor and its ops live across the call.
            if let Err(e) = unsafe { plugin.p2p_launch(&desc, *stream as *mut c_void) } {
                let e = match self.shared.check_peers() {
                    Err(
                        cause @ (Error::Mismatch { .. }
                        | Error::Hang { .. }
                        | Error::PeerFailed { .. }),
                    ) => cause,
                    _ => super::dispatch::plugin_error(e, self.shared.timeout),
                };
                return Err(e);
            }
        }
        let mut keep = vec![false; tasks.len()];
        for &i in &rest {
            keep[i] = true;
        }
        let (mut t2, mut s2) = (
            Vec::with_capacity(rest.len()),
            Vec::with_capacity(rest.len()),
        );
        for ((t, s), k) in tasks.into_iter().zip(streams).zip(keep) {
            if k {
                t2.push(t);
                s2.push(s);
            }
        }
        Ok((t2, s2))
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn ops_go_to_their_winner_in_posted_order_per_stream() {
        // Ops 0..7: winners and streams.
        let win = [Some(0), None, Some(1), Some(0), None, Some(0), Some(1)];
        let stream = [10, 10, 10, 11, 10, 10, 10];
        let (l, rest) = split(7, |i| win[i], |i| stream[i]);
        assert_eq!(
            l,
            vec![(0, 10, vec![0, 5]), (1, 10, vec![2, 6]), (0, 11, vec![3])]
        );
        assert_eq!(rest, vec![1, 4]);
        let (l, rest) = split(3, |_| None, |_| 0);
        assert!(l.is_empty());
        assert_eq!(rest, vec![0, 1, 2]);
        let (l, rest) = split(0, |_| Some(0), |_| 0);
        assert!(l.is_empty() && rest.is_empty());
    }
}
