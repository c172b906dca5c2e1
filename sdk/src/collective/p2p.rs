//! Point-to-point groups as a collective plugin sees them (`p2p_can_run`,
//! `p2p_launch`), checked.

use crate::abi::{FxP2pDesc, FxP2pOp, FX_COLL_CAPTURING, FX_P2P_RECV, FX_P2P_SEND};
use crate::error::{PluginError, PluginResult};
use crate::transport::MemKind;
use smallvec::SmallVec;

/// Which way an op moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pDir {
    /// This rank sends.
    Send,
    /// This rank receives.
    Recv,
}

/// One send or receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P2pOp {
    /// Which way.
    pub dir: P2pDir,
    /// The other rank.
    pub peer: usize,
    /// Bytes.
    pub bytes: usize,
    /// The buffer's address (0 only when `bytes` is 0).
    pub buf: u64,
}

/// A group of ops, in the order the caller posted them.
#[derive(Debug, Clone)]
pub struct P2pDesc {
    /// The ops (inline up to 4: a call's usual handful allocates nothing).
    pub ops: SmallVec<[P2pOp; 4]>,
    /// Every op's memory kind.
    pub mem: MemKind,
    /// The stream is being captured into a CUDA graph.
    pub capturing: bool,
}

impl P2pOp {
    /// One raw op of a communicator of `nranks` ranks, if it is sound.
    #[inline]
    fn from_raw(o: &FxP2pOp, nranks: usize) -> Option<P2pOp> {
        let dir = match o.kind {
            FX_P2P_SEND => P2pDir::Send,
            FX_P2P_RECV => P2pDir::Recv,
            _ => return None,
        };
        let peer = usize::try_from(o.peer).ok().filter(|&p| p < nranks)?;
        let bytes = usize::try_from(o.bytes).ok()?;
        if bytes > 0 && o.buf.is_null() {
            return None;
        }
        Some(P2pOp {
            dir,
            peer,
            bytes,
            buf: o.buf as u64,
        })
    }

    /// Op `i`'s error (out of line: the usual call finds none).
    #[cold]
    #[inline(never)]
    fn bad(i: usize, o: &FxP2pOp, nranks: usize) -> PluginError {
        let why = Self::why_bad(o, nranks);
        PluginError::invalid(format!("point-to-point op {i}: {why}"))
    }

    /// What is wrong with a raw op [`from_raw`](Self::from_raw) refused.
    #[cold]
    fn why_bad(o: &FxP2pOp, nranks: usize) -> String {
        if o.kind != FX_P2P_SEND && o.kind != FX_P2P_RECV {
            format!("unknown kind {}", o.kind)
        } else if usize::try_from(o.peer).map_or(true, |p| p >= nranks) {
            format!("peer {} out of 0..{nranks}", o.peer)
        } else if usize::try_from(o.bytes).is_err() {
            format!("{} bytes exceed the address space", o.bytes)
        } else {
            format!("a null buffer of {} bytes", o.bytes)
        }
    }
}

impl P2pDesc {
    /// Parse and check a raw descriptor of a communicator of `nranks` ranks;
    /// an error names the first bad op.
    ///
    /// # Safety
    /// `raw.ops` points to `raw.nops` readable ops (or `nops` is 0).
    ///
    /// Inlined, as `CollDesc::from_raw`: out of line, the descriptor (its ops
    /// inline) came back through a `memcpy` on every call.
    #[inline(always)]
    pub unsafe fn from_raw(raw: &FxP2pDesc, nranks: usize) -> PluginResult<P2pDesc> {
        let raw_ops: &[FxP2pOp] = if raw.nops == 0 {
            &[]
        } else if raw.ops.is_null() {
            return Err(PluginError::invalid(format!(
                "a point-to-point group of {} ops without an op array",
                raw.nops
            )));
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(raw.ops, raw.nops as usize) }
        };
        // A plain loop into inline storage: this runs on every call, twice
        // per op (the bid, the launch), and iterator adapters through
        // `Result` cost more than the small copies they make. The
        // descriptor is built first and filled in place: a finished
        // `SmallVec` moved into it costs a `memcpy` of its inline ops.
        let mut d = P2pDesc {
            ops: SmallVec::new(),
            mem: MemKind::from_raw(raw.mem_kind)?,
            capturing: raw.flags & FX_COLL_CAPTURING != 0,
        };
        d.ops.reserve(raw_ops.len());
        for (i, o) in raw_ops.iter().enumerate() {
            match P2pOp::from_raw(o, nranks) {
                Some(op) => d.ops.push(op),
                None => return Err(P2pOp::bad(i, o, nranks)),
            }
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::FX_MEM_CUDA;

    fn desc(ops: &[FxP2pOp]) -> FxP2pDesc {
        FxP2pDesc {
            ops: ops.as_ptr(),
            nops: ops.len() as u32,
            mem_kind: FX_MEM_CUDA,
            flags: FX_COLL_CAPTURING,
            reserved: 0,
        }
    }

    #[test]
    fn ops_parse_in_order_and_bad_ones_are_named() {
        let mut b = [0u8; 4];
        let p = b.as_mut_ptr().cast();
        let ops = [
            FxP2pOp {
                kind: FX_P2P_SEND,
                peer: 1,
                bytes: 4,
                buf: p,
            },
            FxP2pOp {
                kind: FX_P2P_RECV,
                peer: 0,
                bytes: 0,
                buf: std::ptr::null_mut(),
            },
        ];
        // SAFETY: a live array.
        let d = unsafe { P2pDesc::from_raw(&desc(&ops), 2) }.unwrap();
        assert_eq!(d.ops.len(), 2);
        assert_eq!(
            (d.ops[0].dir, d.ops[0].peer, d.ops[0].bytes),
            (P2pDir::Send, 1, 4)
        );
        assert_eq!((d.ops[1].dir, d.ops[1].buf), (P2pDir::Recv, 0));
        assert!(d.capturing && d.mem == MemKind::Cuda);
        let cases: [(FxP2pOp, &str); 3] = [
            (FxP2pOp { kind: 7, ..ops[0] }, "op 1: unknown kind 7"),
            (FxP2pOp { peer: 2, ..ops[0] }, "op 1: peer 2 out of 0..2"),
            (
                FxP2pOp {
                    buf: std::ptr::null_mut(),
                    ..ops[0]
                },
                "op 1: a null buffer of 4 bytes",
            ),
        ];
        for (bad, want) in cases {
            let two = [ops[0], bad];
            // SAFETY: a live array.
            let e = unsafe { P2pDesc::from_raw(&desc(&two), 2) }.unwrap_err();
            assert!(e.message().contains(want), "{}", e.message());
        }
        let none = FxP2pDesc {
            ops: std::ptr::null(),
            ..desc(&ops)
        };
        // SAFETY: nops > 0 with a null array: refused before any read.
        assert!(unsafe { P2pDesc::from_raw(&none, 2) }.is_err());
    }
}
