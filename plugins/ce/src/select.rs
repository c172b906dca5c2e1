//! Which calls ce takes (`can_run`), and the windows it takes them on.
//!
//! A window is of use to ce when it is CUDA memory and the core mapped every
//! peer's window into this process (`peer_bases[r] != 0` for every rank);
//! `window_register` asks every rank and keeps the window only if it is of
//! use on all of them, so the descriptors of later calls name it alike
//! everywhere.
//!
//! ce bids `FERROCX_CE_PRIORITY` for all_gather, alltoall (not in place),
//! broadcast, gather and scatter on CUDA memory whose send and receive
//! buffers both lie in ce windows, inside them (offset + the root's extent ≤
//! the window's size), any type (bytes) and root. Count 0: a bid, and the
//! launch does nothing. Everything the answer depends on is the same on every
//! rank for the same call, provided every rank names its buffers at the same
//! window offsets — the symmetric-window contract (as NCCL's): a rank that
//! passes a buffer outside the windows on a side it does not use (a
//! broadcast's send buffer on a non-root) gets 0 where the others bid.

use crate::plan;
use ferrocx_sdk::collective::{CollDesc, WindowDesc, WindowRef};
use ferrocx_sdk::MemKind;

/// A registered window ce can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// This rank's window.
    pub base: u64,
    /// Its size (the same on every rank).
    pub bytes: u64,
    /// Rank r's window as mapped into this process (all non-zero).
    pub peer_bases: Vec<u64>,
}

impl Window {
    /// The window, if ce can use it on this rank; why not otherwise.
    pub fn usable(d: &WindowDesc, nranks: usize) -> Result<Window, String> {
        if d.mem != MemKind::Cuda {
            return Err("host memory".into());
        }
        if d.peer_bases.len() != nranks {
            return Err(format!(
                "{} peer bases for {nranks} ranks",
                d.peer_bases.len()
            ));
        }
        if let Some(r) = d.peer_bases.iter().position(|&b| b == 0) {
            return Err(format!("rank {r}'s window is not mapped into this process"));
        }
        Ok(Window {
            base: d.base,
            bytes: d.bytes,
            peer_bases: d.peer_bases.clone(),
        })
    }
}

fn fits(w: &WindowRef<'_, Window>, need: usize, side: &str) -> Result<(), String> {
    match w.offset.checked_add(need as u64) {
        Some(end) if end <= w.win.bytes => Ok(()),
        _ => Err(format!(
            "the {side} buffer ({need} bytes at offset {}) overruns its window ({} bytes)",
            w.offset, w.win.bytes
        )),
    }
}

/// ce's bid for `d` on a communicator of `nranks`, or why it cannot run it.
pub fn bid(priority: i32, nranks: usize, d: &CollDesc<'_, Window>) -> Result<i32, String> {
    if priority <= 0 {
        return Err("FERROCX_CE_PRIORITY=0".into());
    }
    if !plan::COLLS.contains(&d.coll) {
        return Err(format!("{} is not a copy collective", d.coll.name()));
    }
    if d.mem != MemKind::Cuda {
        return Err("host memory".into());
    }
    if !plan::supported(d.coll, d.in_place) {
        return Err(format!("{} in place", d.coll.name()));
    }
    if d.root >= nranks {
        return Err(format!("root {} of {nranks} ranks", d.root));
    }
    if d.count == 0 {
        return Ok(priority);
    }
    let (Some(sw), Some(rw)) = (&d.send_win, &d.recv_win) else {
        return Err("a buffer outside ce's symmetric windows".into());
    };
    let block = d
        .count
        .checked_mul(d.elem)
        .ok_or_else(|| "the size overflows".to_string())?;
    let (s, r) = plan::extents(d.coll, nranks, d.root, block, d.in_place)
        .ok_or_else(|| "the size overflows".to_string())?;
    fits(sw, s, "send")?;
    fits(rw, r, "receive")?;
    Ok(priority)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::collective::Coll;

    fn win(bytes: u64) -> Window {
        Window {
            base: 0x1000,
            bytes,
            peer_bases: vec![0x1000, 0x9000],
        }
    }

    fn desc<'a>(
        coll: Coll,
        count: usize,
        sw: Option<&'a Window>,
        rw: Option<&'a Window>,
    ) -> CollDesc<'a, Window> {
        CollDesc {
            coll,
            dtype: ferrocx_sdk::abi::FX_TYPE_F32,
            elem: 4,
            op: 0,
            root: 1,
            count,
            mem: MemKind::Cuda,
            in_place: false,
            capturing: false,
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            send_win: sw.map(|win| WindowRef { win, offset: 0 }),
            recv_win: rw.map(|win| WindowRef { win, offset: 64 }),
            seq: 0,
        }
    }

    #[test]
    fn bids_on_windows_that_hold_the_buffers() {
        let w = win(64 + 2 * 4 * 10);
        for c in plan::COLLS {
            assert_eq!(
                bid(200, 2, &desc(c, 10, Some(&w), Some(&w))),
                Ok(200),
                "{c:?}"
            );
        }
        assert!(bid(0, 2, &desc(Coll::AllGather, 10, Some(&w), Some(&w))).is_err());
        assert!(bid(200, 2, &desc(Coll::AllReduce, 10, Some(&w), Some(&w))).is_err());
        let e = bid(200, 2, &desc(Coll::AllGather, 11, Some(&w), Some(&w))).unwrap_err();
        assert!(e.contains("receive buffer (88 bytes at offset 64)"), "{e}");
        assert!(bid(200, 2, &desc(Coll::AllGather, 10, None, Some(&w))).is_err());
        assert!(bid(200, 2, &desc(Coll::AllGather, 10, Some(&w), None)).is_err());
        assert_eq!(
            bid(200, 2, &desc(Coll::AllGather, 0, None, None)),
            Ok(200),
            "count 0"
        );
        let mut d = desc(Coll::AllToAll, 10, Some(&w), Some(&w));
        d.in_place = true;
        assert!(bid(200, 2, &d).unwrap_err().contains("in place"));
        let mut d = desc(Coll::Broadcast, 10, Some(&w), Some(&w));
        d.mem = MemKind::Host;
        assert!(bid(200, 2, &d).is_err());
        d.mem = MemKind::Cuda;
        d.root = 2;
        assert!(bid(200, 2, &d).is_err());
        let huge = desc(Coll::AllToAll, usize::MAX / 2, Some(&w), Some(&w));
        assert!(bid(200, 2, &huge).unwrap_err().contains("overflow"));
    }

    #[test]
    fn windows_need_cuda_memory_and_every_peer_mapped() {
        let mut d = WindowDesc {
            base: 0x1000,
            bytes: 4096,
            mem: MemKind::Cuda,
            peer_bases: vec![0x1000, 0x9000],
            peer_addrs: vec![0x1000, 0x2000],
        };
        assert_eq!(Window::usable(&d, 2).unwrap(), win(4096));
        d.peer_bases[1] = 0;
        assert!(Window::usable(&d, 2).unwrap_err().contains("rank 1"));
        d.peer_bases[1] = 0x9000;
        assert!(Window::usable(&d, 3).is_err());
        d.mem = MemKind::Host;
        assert!(Window::usable(&d, 2).is_err());
    }
}
