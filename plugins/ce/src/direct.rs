//! The Simple kernel's direct modes for one call (sans-IO): which mode, and
//! where every rank's buffers lie in this process. Windows are symmetric, so
//! rank `r`'s buffer is its window as mapped here plus the call's offset into
//! this rank's window ([`crate::select::Window::peer_bases`]); this rank's own are
//! the call's addresses. The kernel checks that assumption: each rank's start
//! chunk names its own buffers as its process addresses them, which must be
//! rank `r`'s window there ([`crate::select::Window::peer_addrs`]) plus the same offset.

use crate::select::Window;
use ferrocx_sdk::collective::{Coll, CollDesc, WindowRef};
use ferrocx_sdk::kernels::ll::MAX_RANKS;
use ferrocx_sdk::kernels::simple::{
    SimpleArgs, MODE_DIRECT_BROADCAST, MODE_DIRECT_FOLD, MODE_DIRECT_GATHER,
};

/// Rank `r`'s buffer for each rank from its window `bases` (as mapped here,
/// or as each rank's own process addresses it) and the call's offset in
/// `w`; zeros without a window (a side the mode does not reach).
fn table(w: Option<&WindowRef<'_, Window>>, bases: fn(&Window) -> &[u64]) -> [u64; MAX_RANKS] {
    let mut t = [0u64; MAX_RANKS];
    if let Some(w) = w {
        for (r, &base) in bases(w.win).iter().enumerate().take(MAX_RANKS) {
            t[r] = base + w.offset;
        }
    }
    t
}

fn mapped(w: &Window) -> &[u64] {
    &w.peer_bases
}

fn owned(w: &Window) -> &[u64] {
    &w.peer_addrs
}

/// The Simple kernel's direct mode that runs `coll`, if any.
pub fn mode(coll: Coll) -> Option<i32> {
    match coll {
        Coll::AllReduce => Some(MODE_DIRECT_FOLD),
        Coll::AllGather => Some(MODE_DIRECT_GATHER),
        Coll::Broadcast => Some(MODE_DIRECT_BROADCAST),
        _ => None,
    }
}

/// The direct-mode arguments of `d` on rank `me`, from `base` (the Simple
/// kernel's arguments as [`SimpleArgs::from_ll`] made them for `d`'s moves)
/// and this rank's scratch, which an all_reduce in place folds into (the
/// peers read its input until they are done). Errors name what is missing,
/// which the route (`select`) should have ruled out.
pub fn args(
    d: &CollDesc<'_, Window>,
    me: usize,
    base: SimpleArgs,
    scratch: Option<u64>,
) -> Result<SimpleArgs, String> {
    let in_place = d.in_place || d.send as u64 == d.recv as u64;
    let mode = mode(d.coll).ok_or_else(|| format!("no direct mode for {}", d.coll.name()))?;
    let need = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("{} direct: {what}", d.coll.name()))
        }
    };
    let scratch = if mode == MODE_DIRECT_FOLD {
        need(d.send_win.is_some(), "the send buffer is in no window")?;
        if in_place {
            need(scratch.is_some(), "no scratch to fold into in place")?;
            scratch.unwrap_or(0)
        } else {
            0
        }
    } else {
        need(d.recv_win.is_some(), "the receive buffer is in no window")?;
        0
    };
    let (mut peer_in, mut peer_out) = (
        table(d.send_win.as_ref(), mapped),
        table(d.recv_win.as_ref(), mapped),
    );
    // This rank's own: the call's addresses.
    if d.send_win.is_some() {
        peer_in[me] = d.send as u64;
    }
    if d.recv_win.is_some() {
        peer_out[me] = d.recv as u64;
    }
    // Where every peer's buffer on the side the mode reaches must be, in the
    // peer's own addresses; and this rank's, for the peers to check.
    let reached = if mode == MODE_DIRECT_FOLD {
        &d.send_win
    } else {
        &d.recv_win
    };
    Ok(SimpleArgs {
        mode,
        overlap: 0,
        spread: 0,
        scratch,
        peer_in,
        peer_out,
        own: [d.send as u64, d.recv as u64],
        expect: table(reached.as_ref(), owned),
        ..base
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::MemKind;

    fn desc<'a>(
        coll: Coll,
        w: &'a Window,
        send: u64,
        recv: u64,
        in_place: bool,
    ) -> CollDesc<'a, Window> {
        CollDesc {
            coll,
            dtype: ferrocx_sdk::abi::FX_TYPE_F32,
            elem: 4,
            op: 0,
            root: 1,
            count: 256,
            mem: MemKind::Cuda,
            in_place,
            capturing: false,
            send: send as *const u8,
            recv: recv as *mut u8,
            send_win: Some(WindowRef {
                win: w,
                offset: send - w.base,
            }),
            recv_win: Some(WindowRef {
                win: w,
                offset: recv - w.base,
            }),
            seq: 0,
        }
    }

    fn base() -> SimpleArgs {
        let ll = ferrocx_sdk::kernels::ll::LlArgs {
            bases: 1,
            region_off: 2,
            note_off: 0,
            note: [0; 4],
            input: 0x1000,
            output: 0x3000,
            ctl: 3,
            send_stride: 0,
            out_stride: 1024,
            seg: 1024,
            area: 4,
            timeout_ns: 5,
            rank: 1,
            nranks: 3,
            mode: 0,
            root: 1,
        };
        SimpleArgs::from_ll(&ll, 6, 512, 4096, true)
    }

    /// Rank 1 of 3, its window at 0x1000 (mapped into this process at
    /// 0xa000, 0x1000 and 0xc000 for ranks 0, 1, 2): the peers' buffers at
    /// the call's offsets in their windows, its own as given.
    #[test]
    fn peers_buffers_lie_at_the_calls_offsets_in_their_windows() {
        let w = Window {
            base: 0x1000,
            bytes: 0x8000,
            peer_bases: vec![0xa000, 0x1000, 0xc000],
            peer_addrs: vec![0x5000, 0x1000, 0x7000],
        };
        let d = desc(Coll::AllReduce, &w, 0x1000, 0x3000, false);
        let a = args(&d, 1, base(), Some(0x9_0000)).unwrap();
        assert_eq!(a.mode, MODE_DIRECT_FOLD);
        assert_eq!(&a.peer_in[..3], &[0xa000, 0x1000, 0xc000]);
        assert_eq!(&a.peer_out[..3], &[0xc000, 0x3000, 0xe000]);
        assert!(a.peer_in[3..].iter().all(|&p| p == 0));
        assert_eq!(a.scratch, 0, "out of place: no scratch");
        assert_eq!((a.overlap, a.spread), (0, 0));
        assert_eq!((a.seg, a.chunk, a.slot), (1024, 512, 4096), "the rest kept");
        assert_eq!(a.own, [0x1000, 0x3000], "what the peers check");
        assert_eq!(
            &a.expect[..3],
            &[0x5000, 0x1000, 0x7000],
            "the peers' inputs in their own addresses"
        );
        // In place the fold goes to the scratch; without one, an error.
        let d = desc(Coll::AllReduce, &w, 0x1000, 0x1000, true);
        assert_eq!(
            args(&d, 1, base(), Some(0x9_0000)).unwrap().scratch,
            0x9_0000
        );
        assert!(args(&d, 1, base(), None).unwrap_err().contains("scratch"));
        // NCCL's in place with the flag unset: send == recv.
        let d = desc(Coll::AllReduce, &w, 0x1000, 0x1000, false);
        assert_eq!(
            args(&d, 1, base(), Some(0x9_0000)).unwrap().scratch,
            0x9_0000
        );
    }

    #[test]
    fn copies_need_the_receive_window_and_only_three_collectives_run() {
        let w = Window {
            base: 0x1000,
            bytes: 0x8000,
            peer_bases: vec![0xa000, 0x1000],
            peer_addrs: vec![0x5000, 0x1000],
        };
        let mut d = desc(Coll::AllGather, &w, 0x1000, 0x3000, false);
        assert_eq!(args(&d, 1, base(), None).unwrap().mode, MODE_DIRECT_GATHER);
        d.coll = Coll::Broadcast;
        assert_eq!(
            args(&d, 1, base(), None).unwrap().mode,
            MODE_DIRECT_BROADCAST
        );
        d.send_win = None;
        let a = args(&d, 1, base(), None).unwrap();
        assert_eq!(
            &a.expect[..2],
            &[0x7000, 0x3000],
            "a copy reaches the outputs"
        );
        assert!(a.peer_in.iter().all(|&p| p == 0));
        d.recv_win = None;
        assert!(args(&d, 1, base(), None).unwrap_err().contains("no window"));
        d.coll = Coll::AllToAll;
        assert!(args(&d, 1, base(), None).is_err());
        let mut d = desc(Coll::AllReduce, &w, 0x1000, 0x3000, false);
        d.send_win = None;
        assert!(args(&d, 1, base(), None)
            .unwrap_err()
            .contains("send buffer"));
    }
}
