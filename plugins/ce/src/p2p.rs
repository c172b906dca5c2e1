//! Device sends and receives as ce's point-to-point kernel
//! ([`ferrocx_sdk::kernels::p2p`]), sans-IO: which ops ce takes (each
//! decided alone, so the two ends of a message always agree), how a group's
//! ops are cut into kernels (at most one send and one receive per peer in
//! each), and each kernel's per-peer sides.

use ferrocx_sdk::collective::{P2pDir, P2pOp};
use ferrocx_sdk::kernels::ll::MAX_RANKS;
use ferrocx_sdk::kernels::p2p::{P2pArgs, P2pSide};

/// Why ce does not take one op (for logs and tests), or `Ok` when it does.
/// `captured_off`: the stream is being captured and graph kernels are off.
pub fn accepts(
    op: &P2pOp,
    nranks: usize,
    limit: usize,
    region: bool,
    cuda: bool,
    captured_off: bool,
) -> Result<(), &'static str> {
    if !region {
        return Err(
            "no point-to-point region (FERROCX_CE_P2P_BYTES=0, reductions off or too many ranks)",
        );
    }
    if !cuda {
        return Err("host memory");
    }
    if captured_off {
        // Graph kernels off (`FERROCX_CE_GRAPH_KERNELS=0`): the core's path
        // handles graphs then. (With them on, replays advance the kernel's
        // counts on the device, as eager calls do.)
        return Err("the stream is being captured (FERROCX_CE_GRAPH_KERNELS=0)");
    }
    // This rank itself too: a send to itself and its receive are a copy
    // inside the kernel (`FX_COLL_CAP_P2P_SELF`; `self_paired` checks them).
    if op.peer >= nranks || nranks > MAX_RANKS {
        return Err("not a rank of this communicator");
    }
    if op.bytes > limit {
        return Err("above FERROCX_CE_P2P_BYTES");
    }
    Ok(())
}

/// How a device send or receive of `bytes` bytes travels at `nranks` ranks
/// under `cfg` (each end decides alike from its own size): as ce's kernel's
/// LL lines or chunks, or on the core's path; what fxinfo prints.
pub fn route(cfg: &crate::config::Config, nranks: usize, bytes: usize) -> &'static str {
    if cfg.p2p_rings(nranks) == 0 || bytes > cfg.p2p_bytes {
        "core"
    } else if ferrocx_sdk::kernels::p2p::as_lines(bytes, cfg.p2p_lines_max(nranks)) {
        "kernel, lines"
    } else {
        "kernel, chunks"
    }
}

/// The kernels of a group: op indices per kernel. The `k`-th op of each
/// (peer, direction) goes into kernel `k`, so every kernel has at most one
/// send and one receive per peer, and the messages between two ranks keep
/// the order they were posted in (the peer cuts its group the same way, or
/// posts the same messages in later calls: either way its kernels meet
/// them in that order).
pub fn kernels(ops: &[P2pOp]) -> Vec<Vec<usize>> {
    let mut seen: Vec<(usize, P2pDir, usize)> = Vec::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let k = match seen
            .iter_mut()
            .find(|(p, d, _)| *p == op.peer && *d == op.dir)
        {
            Some((_, _, n)) => {
                *n += 1;
                *n - 1
            }
            None => {
                seen.push((op.peer, op.dir, 1));
                0
            }
        };
        if out.len() <= k {
            out.push(Vec::new());
        }
        out[k].push(i);
    }
    out
}

/// Whether one kernel's ops (a [`kernels`] cut) with rank `me` itself pair:
/// a send to itself exactly where there is a receive from itself, of as
/// many bytes (the core pairs them so; a launch that does not is refused).
pub fn self_paired(ops: &[P2pOp], me: usize) -> Result<(), String> {
    let find = |dir| ops.iter().find(|o| o.peer == me && o.dir == dir);
    match (find(P2pDir::Send), find(P2pDir::Recv)) {
        (None, None) => Ok(()),
        (Some(s), Some(r)) if s.bytes == r.bytes => Ok(()),
        (Some(s), Some(r)) => Err(format!(
            "rank {me}'s send of {} bytes to itself meets a receive of {} bytes from itself",
            s.bytes, r.bytes
        )),
        (Some(_), None) => Err(format!(
            "rank {me} sends to itself without a receive from itself"
        )),
        (None, Some(_)) => Err(format!(
            "rank {me} receives from itself without a send to itself"
        )),
    }
}

/// The kernel's arguments for `ops` (one kernel's: at most one each way per
/// peer), with the shared fields from `base`: messages of at most `ll_max`
/// bytes as LL lines, except the rank's own block (a copy, in chunks).
pub fn args(base: &P2pArgs, ops: &[P2pOp], slot: usize, ll_max: usize) -> P2pArgs {
    let mut a = *base;
    a.send = [P2pSide::default(); MAX_RANKS];
    a.recv = [P2pSide::default(); MAX_RANKS];
    let me = base.rank as usize;
    for op in ops {
        let lines = if op.peer == me { 0 } else { ll_max };
        let side = P2pSide::new(op.buf, op.bytes, slot, lines);
        match op.dir {
            P2pDir::Send => a.send[op.peer] = side,
            P2pDir::Recv => a.recv[op.peer] = side,
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(dir: P2pDir, peer: usize, bytes: usize) -> P2pOp {
        P2pOp {
            dir,
            peer,
            bytes,
            buf: 0x1000 * (peer as u64 + 1),
        }
    }

    #[test]
    fn every_op_is_decided_by_itself() {
        let s = op(P2pDir::Send, 1, 4096);
        assert_eq!(accepts(&s, 2, 4 << 20, true, true, false), Ok(()));
        // The same op at its receiving end: the same answer.
        let r = op(P2pDir::Recv, 0, 4096);
        assert_eq!(accepts(&r, 2, 4 << 20, true, true, false), Ok(()));
        assert!(accepts(&s, 2, 4095, true, true, false).is_err());
        assert_eq!(
            accepts(&op(P2pDir::Send, 1, 4096), 2, 4096, true, true, false),
            Ok(())
        );
        assert!(accepts(&s, 2, 4 << 20, false, true, false).is_err());
        assert!(accepts(&s, 2, 4 << 20, true, false, false).is_err());
        assert!(accepts(&s, 2, 4 << 20, true, true, true).is_err());
        assert_eq!(
            accepts(&op(P2pDir::Send, 0, 8), 2, 4096, true, true, false),
            Ok(()),
            "a send to the rank itself: a copy in the kernel"
        );
        assert!(accepts(&op(P2pDir::Send, 2, 8), 2, 4096, true, true, false).is_err());
        assert_eq!(
            accepts(&op(P2pDir::Send, 1, 0), 2, 4096, true, true, false),
            Ok(()),
            "an empty message is still a message"
        );
    }

    #[test]
    fn kernels_take_one_message_each_way_per_peer_in_posted_order() {
        use P2pDir::*;
        let ops = [
            op(Send, 1, 10),
            op(Recv, 1, 11),
            op(Send, 1, 12),
            op(Send, 2, 13),
            op(Recv, 2, 14),
            op(Send, 1, 15),
            op(Recv, 1, 16),
        ];
        let ks = kernels(&ops);
        assert_eq!(ks, vec![vec![0, 1, 3, 4], vec![2, 6], vec![5]]);
        for k in &ks {
            for (x, &i) in k.iter().enumerate() {
                for &j in &k[x + 1..] {
                    assert!(
                        ops[i].peer != ops[j].peer || ops[i].dir != ops[j].dir,
                        "{k:?}"
                    );
                }
            }
        }
        // Per (peer, direction), the kernels meet the messages in posted order.
        for peer in 0..3 {
            for dir in [Send, Recv] {
                let posted: Vec<usize> = (0..ops.len())
                    .filter(|&i| ops[i].peer == peer && ops[i].dir == dir)
                    .collect();
                let run: Vec<usize> = ks
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|&i| ops[i].peer == peer && ops[i].dir == dir)
                    .collect();
                assert_eq!(posted, run);
            }
        }
        assert!(kernels(&[]).is_empty());
    }

    #[test]
    fn a_kernels_sends_to_itself_pair_with_its_receives() {
        use P2pDir::*;
        // nccl-tests' all-to-all at rank 1 of 2: its own block is a pair.
        let ops = [
            op(Send, 0, 64),
            op(Recv, 0, 64),
            op(Send, 1, 64),
            op(Recv, 1, 64),
        ];
        let ks = kernels(&ops);
        assert_eq!(ks, vec![vec![0, 1, 2, 3]]);
        assert_eq!(self_paired(&ops, 1), Ok(()));
        assert_eq!(self_paired(&ops[..2], 1), Ok(()), "none with itself");
        let e = self_paired(&ops[..3], 1).unwrap_err();
        assert_eq!(e, "rank 1 sends to itself without a receive from itself");
        let e = self_paired(&[op(Recv, 1, 8)], 1).unwrap_err();
        assert_eq!(e, "rank 1 receives from itself without a send to itself");
        let e = self_paired(&[op(Send, 1, 8), op(Recv, 1, 16)], 1).unwrap_err();
        assert_eq!(
            e,
            "rank 1's send of 8 bytes to itself meets a receive of 16 bytes from itself"
        );
        // Two pairs go to two kernels, each whole.
        let two = [
            op(Send, 1, 8),
            op(Send, 1, 16),
            op(Recv, 1, 8),
            op(Recv, 1, 16),
        ];
        for k in kernels(&two) {
            let cut: Vec<P2pOp> = k.iter().map(|&i| two[i]).collect();
            assert_eq!(self_paired(&cut, 1), Ok(()), "{k:?}");
        }
    }

    /// The route follows the size alone, boundaries ±1 byte, as the kernel's
    /// arguments take it ([`args`] with the same limit).
    #[test]
    fn routes_by_size_at_the_boundaries() {
        let cfg = crate::config::Config::default();
        let (lines, limit) = (cfg.p2p_lines_max(2), cfg.p2p_bytes);
        assert_eq!(route(&cfg, 2, 0), "kernel, lines");
        assert_eq!(route(&cfg, 2, lines), "kernel, lines");
        assert_eq!(route(&cfg, 2, lines + 1), "kernel, chunks");
        assert_eq!(route(&cfg, 2, limit), "kernel, chunks");
        assert_eq!(route(&cfg, 2, limit + 1), "core");
        assert_eq!(route(&cfg, 1, 8), "core", "no peer: no rings");
        assert_eq!(
            route(&cfg, 17, 8),
            "core",
            "more ranks than the kernel takes"
        );
        let chunks_only = crate::config::Config {
            p2p_ll_bytes: 0,
            ..cfg
        };
        assert_eq!(route(&chunks_only, 2, 8), "kernel, chunks");
        assert_eq!(
            route(&chunks_only, 2, 0),
            "kernel, chunks",
            "even an empty message"
        );
        for bytes in [0, 8, lines, lines + 1, limit] {
            let side = P2pSide::new(0x1000, bytes, 65536, lines);
            assert_eq!(
                side.lines > 0,
                route(&cfg, 2, bytes) == "kernel, lines",
                "{bytes}"
            );
        }
    }

    #[test]
    fn args_put_each_message_at_its_peer() {
        use P2pDir::*;
        let base = P2pArgs {
            bases: 1,
            region_off: 2,
            ctl: 3,
            slot: 4096,
            timeout_ns: 5,
            ll_off: 6,
            ll_lines: 7,
            rank: 0,
            nranks: 3,
            send: [P2pSide::new(9, 9, 4096, 0); MAX_RANKS],
            recv: [P2pSide::new(9, 9, 4096, 0); MAX_RANKS],
        };
        let ops = [op(Send, 2, 100_000), op(Recv, 1, 0)];
        let a = args(&base, &ops, 4096, 0);
        assert_eq!(a.send[2], P2pSide::new(0x3000, 100_000, 4096, 0));
        assert_eq!(a.recv[1], P2pSide::new(0x2000, 0, 4096, 0));
        assert_eq!(a.recv[1].chunks, 1);
        assert_eq!(a.send[1].chunks + a.recv[2].chunks + a.send[0].chunks, 0);
        assert_eq!(
            (a.bases, a.region_off, a.ctl, a.nranks, a.ll_off, a.ll_lines),
            (1, 2, 3, 3, 6, 7)
        );
        assert_eq!(
            crate::watch::What::p2p(&ops).to_string(),
            "send of 100000 bytes to rank 2 and receive of 0 bytes from rank 1"
        );
        let three = [op(Send, 2, 1), op(Recv, 1, 2), op(Send, 1, 3)];
        assert_eq!(
            crate::watch::What::p2p(&three).to_string(),
            "2 sends and 1 receives"
        );
        assert_eq!(
            crate::watch::What::p2p(&ops[..1]).to_string(),
            "send of 100000 bytes to rank 2"
        );
        // With lines up to 64 KiB: the small messages go as lines, the rank's
        // own block stays in chunks (a copy), the large one in chunks.
        let ops = [
            op(Send, 2, 100_000),
            op(Recv, 1, 65_536),
            op(Send, 0, 16),
            op(Recv, 0, 16),
        ];
        let a = args(&base, &ops, 4096, 65_536);
        assert_eq!((a.send[2].lines, a.send[2].chunks > 0), (0, true));
        assert_eq!((a.recv[1].lines, a.recv[1].chunks), (1 + 8192, 0));
        assert_eq!((a.send[0].lines, a.send[0].chunks), (0, 1));
        assert_eq!((a.recv[0].lines, a.recv[0].chunks), (0, 1));
    }
}
