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
use ferrocx_sdk::collective::{Coll, CollDesc, WindowDesc, WindowRef};
use ferrocx_sdk::kernels::{DataType, RedOp};
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
    /// Rank r's window as rank r's own process addresses it (what the
    /// direct modes check a peer's buffer against).
    pub peer_addrs: Vec<u64>,
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
        if d.peer_addrs.len() != nranks {
            return Err(format!(
                "{} peer addresses for {nranks} ranks",
                d.peer_addrs.len()
            ));
        }
        Ok(Window {
            base: d.base,
            bytes: d.bytes,
            peer_bases: d.peer_bases.clone(),
            peer_addrs: d.peer_addrs.clone(),
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

/// The reduction kernels' type and operator for `d`, or why there are none.
pub fn kernel_types(d: &CollDesc<'_, Window>) -> Result<(DataType, RedOp), String> {
    let t = u32::try_from(d.dtype).map_err(|_| format!("data type code {}", d.dtype))?;
    let o = u32::try_from(d.op).map_err(|_| format!("operator code {}", d.op))?;
    Ok((
        DataType::from_code(t).map_err(|e| e.to_string())?,
        RedOp::from_code(o).map_err(|e| e.to_string())?,
    ))
}

/// What a communicator's ranks agreed on beyond the copy collectives on
/// windows (all alike).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Agreed {
    /// Agreed: every rank has the kernels, `FERROCX_CE_REDUCE=1`, and the
    /// ranks agree on `FERROCX_CE_ONESHOT_BYTES`.
    pub on: bool,
    /// Scratch per rank (the smallest of the ranks'): staging, and one-shot
    /// all_reduces run in place.
    pub scratch: usize,
    /// Staging allowed (`FERROCX_CE_STAGE`, agreed by every rank).
    pub stage: bool,
    /// Calls are checked with notes (`FERROCX_CE_CHECK_CALLS` on every rank).
    pub check_calls: bool,
    /// `FERROCX_CE_ONESHOT_BYTES`.
    pub one_shot_bytes: usize,
    /// The largest block the LL kernel runs (`FERROCX_CE_LL_BYTES`, the
    /// smallest of the ranks'; 0 without the kernels).
    pub ll_bytes: usize,
    /// The blocks the LL128 kernel runs (`FERROCX_CE_LL128_BYTES`, equal on
    /// every rank; [`crate::config::LL128_AUTO`]: [`LL128_TABLE`]; 0 without
    /// the kernels, or where a rank's GPU is shared or a pair lacks NVLink).
    pub ll128_bytes: usize,
    /// The largest block the Simple kernel runs (`FERROCX_CE_SIMPLE_BYTES`,
    /// equal on every rank; 0 without the kernels).
    pub simple_bytes: usize,
    /// The largest block the Simple kernel's direct modes run
    /// (`FERROCX_CE_DIRECT_BYTES`, equal on every rank; 0 without the
    /// kernels or the rings; [`crate::config::DIRECT_AUTO`]: [`DIRECT_TABLE`]).
    pub direct_bytes: usize,
    /// Calls being captured into a CUDA graph may run the exchange kernels
    /// (`FERROCX_CE_GRAPH_KERNELS` on every rank).
    pub graph_kernels: bool,
}

impl Agreed {
    /// What ranks that all read `cfg` and all have the reduction kernels
    /// agree on (for [`table`]: a communicator's own comes from its setup).
    pub fn assumed(cfg: &crate::config::Config) -> Agreed {
        Agreed {
            on: cfg.reduce,
            scratch: cfg.scratch_bytes,
            stage: cfg.stage,
            check_calls: cfg.check_calls,
            one_shot_bytes: cfg.one_shot_bytes,
            ll_bytes: if cfg.reduce { cfg.ll_bytes } else { 0 },
            // As if every rank had its own GPU and NVLink to every peer.
            ll128_bytes: if cfg.reduce { cfg.ll128_bytes } else { 0 },
            simple_bytes: if cfg.reduce { cfg.simple_bytes } else { 0 },
            direct_bytes: if cfg.reduce && cfg.simple_bytes > 0 {
                cfg.direct_bytes
            } else {
                0
            },
            graph_kernels: cfg.graph_kernels,
        }
    }
}

/// ce's selection table: for each collective it runs, the route [`route`]
/// takes at each block size of `sizes` (bytes per rank, f32 elements) on
/// `nranks` ranks that agreed on `red`, for buffers outside windows and
/// inside them — the LL or Simple kernel, a barrier route (staged, on the
/// windows, one- or two-shot), or why ce leaves it to the core. What
/// `fxinfo` prints; the knobs that move its boundaries are those of
/// `config.rs`.
pub fn table(nranks: usize, red: &Agreed, sizes: &[usize]) -> Vec<(String, Vec<String>)> {
    let biggest = sizes.iter().max().copied().unwrap_or(0) as u64 * nranks.max(1) as u64;
    let w = Window {
        base: 0x1000,
        bytes: biggest + 64,
        peer_bases: vec![0x1000; nranks],
        peer_addrs: vec![0x1000; nranks],
    };
    let colls = [
        Coll::AllReduce,
        Coll::ReduceScatter,
        Coll::AllGather,
        Coll::AllToAll,
        Coll::Broadcast,
        Coll::Gather,
        Coll::Scatter,
    ];
    let mut rows = Vec::new();
    for windows in [false, true] {
        for coll in colls {
            let cells = sizes
                .iter()
                .map(|&b| {
                    let win = windows.then_some(&w);
                    let d = CollDesc {
                        coll,
                        dtype: ferrocx_sdk::abi::FX_TYPE_F32,
                        elem: 4,
                        op: 0,
                        root: 0,
                        count: (b / 4).max(1),
                        mem: MemKind::Cuda,
                        in_place: false,
                        capturing: false,
                        send: std::ptr::null(),
                        recv: std::ptr::null_mut(),
                        send_win: win.map(|win| WindowRef { win, offset: 0 }),
                        recv_win: win.map(|win| WindowRef { win, offset: 0 }),
                        seq: 0,
                    };
                    match bid_route(1, nranks, red, &d) {
                        Ok((_, Some(r))) => route_name(&r, windows),
                        Ok((_, None)) => "-".into(),
                        Err(_) => "core".into(),
                    }
                })
                .collect();
            let place = if windows { "windows" } else { "buffers" };
            rows.push((format!("{:<15} {place}", coll.name()), cells));
        }
    }
    rows
}

/// ce's path for `d` on `nranks` ranks in a few words (what its
/// `describe` hook says): the kernel (`LL`, `Simple`, `Simple direct`,
/// `Simple two-shot`) or the barrier route (`staged`, `one-shot`,
/// `two-shot`, `windows`); `None` where ce would not run it.
pub fn describe(nranks: usize, red: &Agreed, d: &CollDesc<'_, Window>) -> Option<String> {
    match bid_route(1, nranks, red, d) {
        Ok((_, Some(r))) => Some(route_name(&r, in_windows(d))),
        Ok((_, None)) => Some("nothing to move".into()),
        Err(_) => None,
    }
}

/// A route in a few words.
fn route_name(r: &Route, windows: bool) -> String {
    match (r.kernel, r.staged, r.one_shot) {
        (Some(k), ..) => k.name().into(),
        (None, true, _) => "staged".into(),
        (None, false, true) => "one-shot".into(),
        (None, false, false) if windows => "windows".into(),
        (None, false, false) => "two-shot".into(),
    }
}

/// Which exchange kernel runs a call whole (neither windows nor staging).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// [`ferrocx_sdk::kernels::ll`]: flags in the data, small blocks.
    Ll,
    /// [`ferrocx_sdk::kernels::ll128`]: flags in 128-byte lines, the blocks
    /// between the LL kernel's and the Simple kernel's ([`ll128_range`]).
    Ll128,
    /// [`ferrocx_sdk::kernels::simple`]: chunks and a flag per chunk.
    Simple,
    /// all_reduce above 2 ranks as a reduce_scatter into this rank's part
    /// of the output, then an all_gather in place, so each rank sends
    /// 2(n−1)/n of its input instead of n−1 whole copies, in one Simple
    /// kernel ([`ferrocx_sdk::kernels::simple::MODE_TWO_SHOT`]; until
    /// session 21 two kernels, a reduce_scatter and an all_gather, past one
    /// lap of the rings: 7–11 % slower from 32 MiB on 4 H200s).
    TwoShot,
    /// The Simple kernel's direct modes on windows
    /// ([`ferrocx_sdk::kernels::simple::MODE_DIRECT_FOLD`] and the two
    /// copies): the data read from the peers' input windows (all_reduce) or
    /// written into their output windows (all_gather, broadcast), the rings
    /// carrying only a start and an end per pair.
    Direct,
}

impl Exchange {
    /// The route in a few words (fxinfo's table, the watchdog's messages).
    pub fn name(self) -> &'static str {
        match self {
            Exchange::Ll => "LL",
            Exchange::Ll128 => "LL128",
            Exchange::Simple => "Simple",
            Exchange::TwoShot => "Simple two-shot",
            Exchange::Direct => "Simple direct",
        }
    }
}

/// How ce runs a call it bids for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Route {
    /// Staged through the scratch buffers ([`plan::Shape::staged`]).
    pub staged: bool,
    /// all_reduce one-shot on windows ([`plan::Shape::one_shot`]).
    pub one_shot: bool,
    /// One exchange kernel: neither windows nor staging.
    pub kernel: Option<Exchange>,
}

/// The largest block the Simple kernel runs per collective with
/// `FERROCX_CE_SIMPLE_BYTES=auto` (the default), at 2 ranks and at more;
/// the barrier routes (or the core) above it.
///
/// At 2 ranks, measured on 2 × H100 (NVLink) against the barrier routes,
/// 16 MiB–512 MiB both ways (`bench/results/2026-11-26-h100x2-simple/run4`):
/// the kernel was ahead or within noise at every size up to these; past
/// them the copy engines were ahead (broadcast from 64 MiB: 397 µs vs 433 at
/// 128 MiB; all_gather from 256 MiB total) or it was not measured.
///
/// At 4 ranks on 4 H100s (`bench/results/2026-11-26-h100x4-simple/run1`)
/// every rank's one-shot all_reduce sends its whole input to every peer and
/// the broadcast root sends to each peer in turn: 0.40–0.75× NCCL from 2 MiB
/// (all_reduce) and 0.36–0.58× from 8 MiB (broadcast), so above 2 ranks
/// all_reduce took the kernel one-shot no more (it runs two-shot, as a
/// reduce_scatter and an all_gather kernel, where the count divides by the
/// ranks and a part fits their limits: [`Exchange::TwoShot`]) and broadcast
/// only to 2 MiB (1.31× NCCL there). all_gather, reduce_scatter and alltoall keep their 2-rank limits
/// (0.8–0.95× NCCL from 8 MiB at 4 ranks then; 0.9–1.16× with `spread`).
///
/// Since the kernel spreads a chunk's peers over its blocks (`spread`, 4
/// H200s, `bench/results/2026-11-27-h200x4-spread/run3`, µs, one-shot /
/// two-shot / NCCL): one-shot all_reduce at 2 MiB 43.0 / 51.5 / 44.3, at 4
/// MiB 62.8 / 62.6 / 46.6, at 8 MiB 107 / 80 / 63 — so above 2 ranks one-shot
/// runs while block × nranks ≤ 2 × 4 MiB (2 MiB blocks at 4 ranks). And
/// since a broadcast above 2 ranks is passed along the ranks (the kernel's
/// chain, 4 H100s, `…/run5`, µs, chain / scatter + all_gather kernels to 32
/// MiB and the barrier routes above / NCCL): 4 MiB 45.6 / 76.3 / 47.8, 16
/// MiB 82.5 / 119 / 75.0, 64 MiB 265 / 350 / 220, 128 MiB 514 / 505 / 404 —
/// so broadcast runs as the chain to 64 MiB (the scatter + all_gather route
/// it replaced is gone).
///
/// At 1 GiB on 2 H100s (`bench/results/2026-11-27-x2-checks/run1`, µs,
/// kernel / routes / NCCL, out of place and in place): all_reduce 3384 /
/// 3525 / 3294 and 3356 / 3547 / 3234, reduce_scatter 1803 / 2198 / 1969 and
/// 1798 / 2040 / 1986 — so at 2 ranks these two run as the kernel to 1 GiB
/// blocks (alltoall stays: 1736 / 1525 out of place, the common case).
///
/// On 4 H100s (`bench/results/2026-11-27-x2-session10/run4`, µs out of place,
/// kernel / routes / NCCL from run3 on the same machine, by total size):
/// all_gather 128 MiB 372 / 441–469 / 355, 256 MiB 722–725 / 626–630 / 664,
/// 512 MiB (routes already) 1141–1154 / 1273; alltoall 128 MiB 378–381 /
/// 371–384 / 359, 256 MiB 732–741 / 634–695 / 665, 512 MiB 1447–1454 /
/// 1160–1201 / 1258 (in place the routes lose: 800 / 908 at 256 MiB);
/// reduce_scatter keeps the kernel (256 MiB 752–767 / 782–804) — so above 2
/// ranks all_gather and alltoall run as the kernel to 32 MiB blocks.
///
/// alltoall of 1 GiB at 2 ranks on 2 H100s, two alternations
/// (`bench/results/2026-11-27-session14/run2`, µs, kernel / routes): out of
/// place 1562–1575 / 1544–1575, in place 1583–1587 / 1885–1976 (the routes
/// stage an in-place call through the scratch) — so at 2 ranks alltoall runs
/// as the kernel to 512 MiB blocks (1 GiB in all; larger not measured).
///
/// broadcast at 2 ranks on 2 H200s once the kernel's polls acquire (no
/// acquire fence per chunk), two alternations, outside windows
/// (`bench/results/2026-11-27-session15/run3`, µs out of place / in place,
/// kernel / the core's path): 64 MiB 203.5–205.3 / 205.1–207.7 against
/// 217.8–269.8 / 211.7–230.9 (NCCL 204 / 200 on that host model), 128 MiB
/// 402–406 / 402–407 against 388–397 / 389–393 — so at 2 ranks broadcast
/// ran as the kernel to 64 MiB. Once a broadcast's chunks became whole
/// slots from 16 MiB and frees lost their fence, on 2 H100s
/// (`bench/results/2026-11-27-session16/run3`, two alternations, µs out of
/// place / in place): 128 MiB 374.3–376.6 / 372.8–375.4 as the kernel against
/// 400.2–402.2 / 377.9–391.9 on the core's path (NCCL 389.6–390.2 / 380.7–380.9
/// on that machine) — so at 2 ranks broadcast runs as the kernel to 128 MiB
/// (256 MiB not measured with these chunks; the core there is at 0.99× NCCL).
///
/// scatter at 2 ranks on 2 H200s, symmetric windows, two alternations
/// (`bench/results/2026-11-28-session24/gather-scatter`, µs out of place /
/// in place by total size, the kernel / the routes; NCCL's copy-engine
/// scatter in the same call): 4 MiB 13.8–14.5 / 13.4–13.5 against 33.0–33.5
/// / 24.5–24.7 (30.5 / 20.8), 16 MiB 31.4 / 31.6–32.4 against 53.8–56.0 /
/// 41.6–42.7 (51.3 / 37.3), 64 MiB 101.5–103.2 / 99.4–99.8 against 132.6–132.8
/// / 106.6–108.3 (129.0 / 101.7), 128 MiB 191.7–193.0 / 191.0–192.5 against
/// 231.4–232.1 / 191.8–192.3 (227.2 / 186.8), 1 GiB 1481.5–1481.9 /
/// 1479.2–1481.3 against 1636.9–1638.7 / 1375.5 (1633.1 / 1370.2) — 10–12 %
/// faster out of place from 128 MiB but 3–8 % slower in place, so blocks to
/// 32 MiB (64 MiB in all), where it wins both ways (above 2 ranks: below).
///
/// gather at 2 ranks, the same way (`…/session24/gather-simple`, the kernel's
/// root-gather mode forced / the routes / NCCL's CE gather): 4 MiB
/// 13.5–14.2 / 25.6–27.0 / 23.7, 8 MiB 19.7–20.2 / 31.0–31.2 / 25.8, 16 MiB
/// 32.2–32.6 / 41.8–42.1 / 38.1, 32 MiB 58.2–58.5 / 65.4 / 59.8, 64 MiB
/// 109.0–109.5 / 108.4–109.7 / 103.4 (in place 106.9–107.8 / 105.7–107.4),
/// 128 MiB 211–213 / 192–193 / 187 — so blocks to 16 MiB (32 MiB in all).
/// Once 2 ranks cut segments from 16 MiB into whole 128 KiB slots (session
/// 27, `bench/results/2026-11-28-session27/x2-gather`, two alternations, on
/// windows, the kernel forced / `auto` (the routes) / NCCL's CE gather): 32
/// MiB 53.1–55.9 / 54.1–54.7 / 61.7, 64 MiB 100.9 / 106.9–107.5 / 102.5 (in
/// place 98.7–99.0 / 106.6 / 103.7), 128 MiB 193.4 / 193.2–194.1 / 188.0,
/// 256 MiB 379 / 363–364 / 358 — so blocks to 32 MiB (64 MiB in all). The
/// kernel moves no byte through the windows, so calls outside them take it
/// alike.
///
/// At 4 ranks on 4 H200s, the kernel forced against `auto`, two
/// alternations (`bench/results/2026-11-28-session26/x4-knobs`, µs out of
/// place / in place by total size; NCCL from `…/x4-table`, the same tree on
/// the machine before): alltoall as the kernel 256 MiB 619–623 / 643–645
/// against the core's 619–626 / 825–831 (NCCL 673 / 659), 512 MiB 1226–1232
/// / 1270–1271 against 1175–1177 / 1631–1658 (1299 / 1273), 1 GiB 2383–2390
/// / 2680–2737 against 2204–2210 / 2917–2932 (2386 / 2365) — so above 2
/// ranks alltoall runs as the kernel to 128 MiB blocks, where in place takes
/// 22–23 % less time and out of place stays ahead of NCCL (the route cannot ask
/// whether a rank runs in place). broadcast as the chain at every size
/// against `auto` (the chain to 64 MiB, the routes above): 128 MiB 478–486
/// against 483–497 (NCCL 398), 256 MiB 796–800 against 861–889 (769), 512
/// MiB 1548–1553 against 1586–1620 (1512), 1 GiB 3043–3051 against
/// 3080–3144 (2985), as session 22 found on other 4 × H200 hosts
/// (`…/session22/x4-knobs`, `x4-gather-blocks`) — so above 2 ranks broadcast
/// runs as the chain to 1 GiB. 1 MiB slots, 64 KiB slots and 32 blocks were
/// slower for the chain from 256 MiB or level below. (On 4 H100s in session
/// 8 the chain of that time lost to the routes by 2 % at 128 MiB; the H100
/// hosts have not been lent since.) 8 ranks: not measured.
///
/// gather and scatter at 4 ranks on 4 H200s, symmetric windows, the kernel
/// forced against `auto` (the LL kernel to 1 MiB blocks, the barrier routes
/// above), two alternations (`…/session26/x4-final`, µs out of place / in
/// place by total size; NCCL's copy-engine collectives in the same call):
/// gather 8 MiB 22.9–25.2 / 24.2–24.9 against 46.5–46.6 / 44.4–46.4 (33.6 /
/// 33.5), 32 MiB 69.8–70.7 / 69.7–71.0 against 94.3–95.3 / 90.0–92.4 (82.5 /
/// 83.1), 128 MiB 279.0–279.2 / 278.0–278.2 against 283.5–285.2 /
/// 284.4–286.1 (272.9 / 272.7), 512 MiB 1103–1105 / 1099–1101 against 1048 /
/// 1046–1047 (1029 / 1027); scatter 8 MiB 29.8–29.9 / 29.6–29.7 against
/// 45.7–46.5 / 45.5–45.9 (46.4 / 34.8), 32 MiB 82.3–82.6 / 82.3–82.4 against
/// 93.4–93.5 / 91.4–92.8 (97.9 / 84.3), 128 MiB 282.0–282.5 / 281.7–282.3
/// against 285.0–285.1 / 285.8–285.9 (300.3 / 273.2), 512 MiB 1098–1099 /
/// 1097–1100 against 1047–1048 / 1046 (1109 / 1033) — so above 2 ranks both
/// run as the kernel to 32 MiB blocks (128 MiB in all at 4 ranks).
pub const SIMPLE_TABLE: [(Coll, usize, usize); 7] = [
    (Coll::AllReduce, 1 << 30, 4 << 20),
    (Coll::ReduceScatter, 1 << 30, 256 << 20),
    (Coll::AllGather, 64 << 20, 32 << 20),
    (Coll::AllToAll, 512 << 20, 128 << 20),
    (Coll::Broadcast, 128 << 20, 1 << 30),
    (Coll::Scatter, 32 << 20, 32 << 20),
    (Coll::Gather, 32 << 20, 32 << 20),
];

/// Blocks above the first bound and up to the second.
pub type Range = (usize, usize);

/// The blocks of each collective the Simple kernel's direct modes run under
/// `FERROCX_CE_DIRECT_BYTES=auto`: above the first bound and up to the
/// second, at 2 ranks and at more (`(0, 0)`: never).
///
/// On 2 H200s, symmetric windows (`fxperf -R 2`), two alternations of the
/// modes off (the ring modes and routes) and forced
/// (`bench/results/2026-11-27-session15/run1/k`, µs out of place / in place,
/// by total size):
/// - all_gather: 4 MiB 19.5–19.7 / 18.7–19.1 off, 20.6 / 19.7–19.9 on;
///   8 MiB even (27.1–27.2 / 24.8–25.3 off, 26.8–27.1 / 25.4–25.5 on);
///   16 MiB 41.6–42.1 / 38.9–39.6 off, 39.1 / 37.4–37.5 on; 32 MiB 68.9–70.7
///   / 66.4–68.2 off, 62.2–62.6 / 60.1–60.3 on; 128 MiB 224–227 / 227–230
///   off, 202 / 199 on — so blocks above 2 MiB to 64 MiB (128 MiB in all,
///   the largest measured).
/// - broadcast: 2–8 MiB 15.8–32.5 off, 20.3–38.8 on; 16 MiB 59.2–60.2 /
///   58.1–59.1 off, 61.7–62.0 / 59.8–60.0 on; 32 MiB 111–113 / 110–112 off,
///   108 / 105 on; 64 MiB 231 / 190–191 off, 200 / 197 on; 128 MiB 432 / 360
///   off, 380 / 377 on (NCCL in the same run: 204 / 200 and 387 / 380) — so
///   blocks above 16 MiB to 128 MiB.
/// - all_reduce: no size gains: 2–8 MiB 1–2 µs slower out of place and 2–3
///   in place; 16–32 MiB 3 % faster out of place but 8–12 % slower in place
///   (the fold into the scratch and the copy back).
///
/// Once the ring modes' polls acquire (no fence per chunk), again on 2 H200s
/// (`bench/results/2026-11-27-session15/run3/k`, ring / direct): all_gather
/// 4 MiB 17.9 / 16.98–17.06 against 19.2–19.4 / 18.7, 8 MiB even, 16 MiB
/// 38.8–38.9 / 36.4–36.7 against 37.3–37.4 / 35.6–35.8, 64 MiB 115 / 115
/// against 109 / 106, 128 MiB 215 / 214–218 against 201 / 197; broadcast 16
/// MiB 56–57 / 56 against 60 / 59, 32 MiB 106–107 / 105–106 against 107 /
/// 104, 64 MiB 233 / 190 against 198 / 195, 128 MiB 433 / 360 against 380 /
/// 376 — so all_gather blocks above 4 MiB and broadcast blocks above 32 MiB.
/// Past 64 MiB blocks (all_gather) and 128 MiB (broadcast) the window routes
/// copy a rank's own block on the same stream after the peers' (out of place),
/// and the direct modes win there too (`…/run5`, 2 H200s, two alternations,
/// routes / direct, µs out of place / in place): all_gather 256 MiB in all
/// 436–439 / 363–364 against 387 / 381–382, 512 MiB 841–842 / 706 against 757
/// / 748, 1 GiB 1655 / 1389–1390 against 1487–1489 / 1478; broadcast 256 MiB
/// 832 / 698 against 747 / 739–740, 512 MiB 1637–1638 / 1374 against 1469 /
/// 1461, 1 GiB 3235–3236 / 2725–2726 against 2915–2916 / 2906–2907 (NCCL on
/// that host model: 753 / 743 and 2938 / 2912) — slower in place by 5–7 %,
/// but at or above NCCL both ways where the routes fall to 0.90 out of
/// place — so all_gather blocks to 512 MiB and broadcast to 1 GiB (the
/// largest measured).
///
/// Once a batch's local copies run on a second stream (session 24: a
/// rank's own block no longer waits for the peers'), the window routes
/// overtook all_gather's direct mode past 64 MiB blocks on 2 H200s
/// (`bench/results/2026-11-28-session26/x2-gather`, two alternations, µs out
/// of place / in place by total size, `auto` then / direct off, NCCL's CE
/// all_gather in the same call): 128 MiB 201.7–204.0 / 198.7–199.1 against
/// 217.9–218.7 / 217.0–217.7 (the Simple kernel; 234.4 / 188.8), 256 MiB
/// 385.3–386.1 / 380.9–381.7 against 366.6–368.5 / 362.9–363.2 (435.9 /
/// 359.1), 512 MiB 756–757 / 746–747 against 710–713 / 706 (839.3 / 702.0),
/// 1 GiB 1485–1487 / 1478 against 1397–1400 / 1390–1391 (1655.1 / 1386.3) —
/// so all_gather blocks to 64 MiB. broadcast's range re-measured on 2 of
/// 4 H200s (`bench/results/2026-11-28-session27/x4-chunk`, µs out of place
/// / in place, direct (`auto` then) against `FERROCX_CE_DIRECT_BYTES=32M`:
/// the Simple kernel to 128 MiB, the window routes above; NCCL's CE
/// broadcast in the same call): 64 MiB 201 / 197 against 191 / 191 (217 /
/// 204), 128 MiB 381 / 376 against 375 / 376 (409 / 385), 256 MiB 746 / 737
/// against 701 / 697 (794 / 749), 512 MiB 1469 / 1461 against 1378 / 1374
/// (1558 / 1470), 1 GiB 2914 / 2905 against 2735 / 2728 (3082 / 2918) — so
/// broadcast no longer takes the direct mode under `auto`.
///
/// Not measured above 2 ranks: none there.
pub const DIRECT_TABLE: [(Coll, Range, Range); 3] = [
    (Coll::AllReduce, (0, 0), (0, 0)),
    (Coll::AllGather, (4 << 20, 64 << 20), (0, 0)),
    (Coll::Broadcast, (0, 0), (0, 0)),
];

/// The blocks of `coll` the direct modes run on `nranks` ranks at
/// `direct_bytes` (`FERROCX_CE_DIRECT_BYTES`: a number, or `auto`:
/// [`DIRECT_TABLE`]): above the first bound and up to the second; `(0, 0)`
/// for the collectives they do not run. A number is an upper bound alone.
pub fn direct_range(coll: Coll, nranks: usize, direct_bytes: usize) -> Range {
    DIRECT_TABLE
        .iter()
        .find(|(c, ..)| *c == coll)
        .map_or((0, 0), |&(_, two, more)| {
            if direct_bytes != crate::config::DIRECT_AUTO {
                (0, direct_bytes)
            } else if nranks <= 2 {
                two
            } else {
                more
            }
        })
}

/// The blocks of each collective the LL128 kernel runs under
/// `FERROCX_CE_LL128_BYTES=auto`: above the first bound and up to the
/// second, at 2 ranks and at more (`(0, 0)`: never); it is asked before the
/// LL kernel's limit.
///
/// Measured on 4 H200s (`bench/results/2026-11-27-session17/run3/k`, fxperf
/// `-n 100`–`200`, µs out of place by total size, LL128 off
/// (`FERROCX_CE_LL128_BYTES=0`: the LL kernel to 1 MiB blocks, Simple above)
/// against LL128 from 32 KiB blocks to 4 MiB; every result checked, 0 wrong):
/// - 2 ranks: all_reduce 512 KiB 9.1–10.4 / 8.5–8.9, 1 MiB 12.5–16.5 /
///   8.8–9.2, 2 MiB 16.1 / 14.3–14.5, 4 MiB 23.2–23.3 / 20.2–20.3, 256 KiB
///   even (8.5–9.2 / 8.2–8.5); all_gather and alltoall 2 MiB 12.5 / 8.9, 8
///   MiB (4 MiB blocks) 24.2 / 20.9–21.2, 1 MiB even; reduce_scatter 512 KiB
///   9.2 / 7.4 to 8 MiB 23.0 / 20.2; broadcast 1 MiB 12.1 / 8.0, 2 and 4 MiB
///   even — so blocks above 256 KiB (reduce_scatter 128 KiB, alltoall 512
///   KiB) to 4 MiB (broadcast 2 MiB).
/// - 4 ranks (one-shot: every rank sends its whole block to every peer):
///   all_reduce 128 KiB 11.0 / 8.8, 512 KiB 18.8 / 12.4, 1 MiB 34.4 / 20.0,
///   2 MiB even, 4 MiB 43.5 / 54.7 (two-shot Simple ahead); all_gather,
///   alltoall and reduce_scatter 2 MiB 18.9–19.1 / 12.7–13.3, 4 MiB (1 MiB
///   blocks) 33.0–34.4 / 20.3–20.5, 8 MiB 33.1–35.4 / 35.6–37.0; broadcast
///   512 KiB 13.5 / 10.4, 1 MiB 24.3 / 14.9, 4 MiB 31.2 / 44.3 — so blocks
///   above 64 KiB (broadcast 128 KiB) to 1 MiB. Not measured above 4 ranks.
pub const LL128_TABLE: [(Coll, Range, Range); 5] = [
    (Coll::AllReduce, (256 << 10, 4 << 20), (64 << 10, 1 << 20)),
    (
        Coll::ReduceScatter,
        (128 << 10, 4 << 20),
        (64 << 10, 1 << 20),
    ),
    (Coll::AllGather, (256 << 10, 4 << 20), (64 << 10, 1 << 20)),
    (Coll::AllToAll, (512 << 10, 4 << 20), (64 << 10, 1 << 20)),
    (Coll::Broadcast, (256 << 10, 2 << 20), (128 << 10, 1 << 20)),
];

/// The blocks of `coll` the LL128 kernel runs on `nranks` ranks at
/// `ll128_bytes` (`FERROCX_CE_LL128_BYTES`: a number N for the blocks above
/// `ll_bytes` up to N, or `auto`: [`LL128_TABLE`]): above the first bound
/// and up to the second; `(0, 0)` for the collectives it does not run.
pub fn ll128_range(coll: Coll, nranks: usize, ll128_bytes: usize, ll_bytes: usize) -> Range {
    LL128_TABLE
        .iter()
        .find(|(c, ..)| *c == coll)
        .map_or((0, 0), |&(_, two, more)| {
            if ll128_bytes != crate::config::LL128_AUTO {
                (ll_bytes, ll128_bytes)
            } else if nranks <= 2 {
                two
            } else {
                more
            }
        })
}

/// The largest block the LL128 kernel runs on `nranks` ranks at
/// `ll128_bytes` and `ll_bytes`, any collective: what sizes its areas (0:
/// none, where every range is empty).
pub fn ll128_most(nranks: usize, ll128_bytes: usize, ll_bytes: usize) -> usize {
    LL128_TABLE
        .iter()
        .map(|&(c, ..)| ll128_range(c, nranks, ll128_bytes, ll_bytes))
        .filter(|&(above, upto)| upto > above)
        .map(|(_, upto)| upto)
        .max()
        .unwrap_or(0)
}

/// `coll`'s entry in a table of measured limits (at 2 ranks, at more) for
/// `nranks` ranks; `None` where the table has no row for it.
fn measured(table: &[(Coll, usize, usize)], coll: Coll, nranks: usize) -> Option<usize> {
    table
        .iter()
        .find(|(c, ..)| *c == coll)
        .map(|&(_, two, more)| if nranks <= 2 { two } else { more })
}

/// Whether the direct modes run `d` (its block is above the LL limit):
/// within their limit, and the buffers the peers reach lie in windows — an
/// all_reduce's send and receive buffers (the peers read its input; the
/// block must also fit the scratch, where a rank in place folds), an
/// all_gather's or a broadcast's receive buffers (written by the peers).
/// Windows are registered by every rank alike (the symmetric-window
/// contract), so every rank answers alike; the kernel checks that the
/// peers' buffers lie at this rank's offsets before it reaches them.
fn direct(nranks: usize, red: &Agreed, d: &CollDesc<'_, Window>, block: usize) -> bool {
    let (above, limit) = direct_range(d.coll, nranks, red.direct_bytes);
    let reach = match d.coll {
        Coll::AllReduce => d.send_win.is_some() && d.recv_win.is_some() && block <= red.scratch,
        Coll::AllGather | Coll::Broadcast => d.recv_win.is_some(),
        _ => false,
    };
    nranks > 1 && block > above && block <= limit && reach
}

/// The largest all_reduce run two-shot above 2 ranks under `auto`
/// ([`Exchange::TwoShot`]). On 4 H200s (`bench/results/2026-11-26-h200x4-twoshot/run2`,
/// µs, two-shot / ce's routes without the kernel): 2 MiB 50 / 77, 8 MiB
/// 92 / 212, 16 MiB 131 / 402, 32 MiB 264 / 786, 64 MiB 473 / 420. With
/// the spread kernel (`bench/results/2026-11-27-h200x4-spread/run3`): 64
/// MiB 381 / 482, 128 MiB 730 / 672, 256 MiB 1438 / 1288. Against the
/// core's path on 4 H100s (`bench/results/2026-11-28-session20/x4-twoshot`,
/// µs, two-shot / core / NCCL): 128 MiB 706–711 / 715–733 / 624, 256 MiB
/// 1372–1373 / 1352–1358 / 1185, 1 GiB 5028–5049 / 5173–5216 / 4542 —
/// within 3 % either way, so the bound stayed. Once two-shot became one
/// kernel at every size (session 21, 4 H200s,
/// `bench/results/2026-11-28-session21/x4-twoshot`, µs, two rounds, out of
/// place / in place; one kernel / the two kernels before / the core /
/// NCCL): 128 MiB 650–651 / 626–635, 698–707, 673–689 (one 759), 613; 256
/// MiB 1238–1243 / 1237–1243, 1370–1376, 1217–1342, 1185; 512 MiB 2454 /
/// 2435–2441, 2700–2728, 2363–2680, 2311; 1 GiB 4828–4840 / 4835–4841,
/// 5016–5100, 4604–5402, 4538 — ahead of the core to 256 MiB, even with its
/// median above and steadier; so the bound is 256 MiB.
pub const TWO_SHOT_AUTO_BYTES: usize = 256 << 20;

/// Most sending blocks of a Simple kernel running `coll` in its exchange
/// modes (`None`: the point-to-point kernel and the direct modes, measured
/// only at 64) on `nranks` ranks at `blocks`
/// (`FERROCX_CE_SIMPLE_BLOCKS`: a number, or `auto`): under `auto`, 128 for
/// reduce_scatter, all_gather and alltoall above 2 ranks (their spread
/// kernels: a sending block per (chunk, peer) pair, a receiving block that
/// folds or places what it takes — twice the blocks keep twice of both in
/// flight), [`TARGET_BLOCKS`](ferrocx_sdk::kernels::simple::TARGET_BLOCKS)
/// (64) otherwise. On 4 H200s (`bench/results/2026-11-28-session22/`, µs
/// out of place, 64 / 128 blocks, NCCL in the same call): reduce_scatter
/// (`x4-rs-blocks`, two rounds) 64 MiB 182.9–185.0 / 169.3–169.8 (NCCL
/// 190.3), 256 MiB 683.0–684.9 / 626.9–630.6 (662.8), 512 MiB 1341 / 1238
/// (1283); all_gather (`x4-gather-blocks`, `-2`) 64 MiB 178.1–182.4 /
/// 162.6–165.4 (197.6), 128 MiB 346.0–352.5 / 315.3–317.1 (354.8); alltoall
/// 64 MiB 181.3–181.6 / 163.6–166.0 (193.4), 128 MiB 351.9–353.2 /
/// 315.5–319.8 (353.3), in place 7–18 % off. all_reduce's two-shot did not
/// move (`x4-knobs`: 256 MiB 1231.7 against 1231.4) and broadcast's chain
/// slowed (64 MiB 234.1 against 324.9).
pub fn simple_blocks(coll: Option<Coll>, nranks: usize, blocks: usize) -> usize {
    if blocks != crate::config::SIMPLE_BLOCKS_AUTO {
        return blocks;
    }
    match coll {
        Some(Coll::ReduceScatter | Coll::AllGather | Coll::AllToAll) if nranks > 2 => {
            2 * ferrocx_sdk::kernels::simple::TARGET_BLOCKS
        }
        _ => ferrocx_sdk::kernels::simple::TARGET_BLOCKS,
    }
}

/// The largest block of `coll` the Simple kernel runs on `nranks` ranks at
/// `simple_bytes` (`FERROCX_CE_SIMPLE_BYTES`: a number, or `auto`:
/// [`SIMPLE_TABLE`]).
pub fn simple_limit(coll: Coll, nranks: usize, simple_bytes: usize) -> usize {
    if simple_bytes != crate::config::SIMPLE_AUTO {
        return simple_bytes;
    }
    measured(&SIMPLE_TABLE, coll, nranks).unwrap_or(0)
}

/// The exchange kernel that runs `d`, if one does: the LL kernel for a block
/// of at most `ll_bytes`, the Simple kernel above it up to its limit
/// ([`simple_limit`]; all_reduce: block × nranks ≤ 2 × the limit, as
/// one-shot: every rank sends its whole input to every peer); not avg (its division is a step of
/// its own). While capturing only with [`Agreed::graph_kernels`]: the
/// kernels keep their state on the device, so replays advance it, and the
/// communicator's launches are chained across streams and graphs
/// (`chain.rs`), since its kernels share control words and must never
/// overlap. Outside windows
/// only where staging is allowed, the gate that keeps unchecked calls on the
/// core's checked path; "in windows" is the buffer every rank of the call
/// uses — the receive buffer's, a gather's send buffer's (a broadcast root's
/// send buffer is its alone: asking for it would split the ranks' routes).
fn exchange(nranks: usize, red: &Agreed, d: &CollDesc<'_, Window>) -> Option<Exchange> {
    let kind = match d.coll {
        Coll::AllReduce | Coll::ReduceScatter => d.op != ferrocx_sdk::abi::FX_OP_AVG,
        Coll::AllGather | Coll::AllToAll | Coll::Broadcast | Coll::Scatter | Coll::Gather => true,
        _ => false,
    };
    // Every rank of a gather uses its send buffer, not always its receive
    // buffer (a non-root's may be anything).
    let in_window = match d.coll {
        Coll::Gather => d.send_win.is_some(),
        _ => d.recv_win.is_some(),
    };
    let usable = red.on
        && kind
        && (!d.capturing || red.graph_kernels)
        && nranks <= ferrocx_sdk::kernels::ll::MAX_RANKS
        && (red.stage || in_window);
    if !usable {
        return None;
    }
    let block = d.count.saturating_mul(d.elem);
    // gather and scatter: the LL kernel, then the Simple kernel (its
    // root-gather mode; its broadcast mode with a send stride), not LL128's.
    match d.coll {
        Coll::Gather | Coll::Scatter if block <= red.ll_bytes => return Some(Exchange::Ll),
        Coll::Gather | Coll::Scatter => {
            let limit = simple_limit(d.coll, nranks, red.simple_bytes);
            return (block <= limit).then_some(Exchange::Simple);
        }
        _ => {}
    }
    let limit = simple_limit(d.coll, nranks, red.simple_bytes);
    let simple = match d.coll {
        Coll::AllReduce => block.saturating_mul(nranks) <= limit.saturating_mul(2),
        _ => block <= limit,
    };
    // Above 2 ranks an all_reduce too large for one-shot runs two-shot (one
    // kernel, whose chunks may lap the rings): under `auto` up to
    // TWO_SHOT_AUTO_BYTES, else while its part is within the limit; a count
    // the ranks do not divide runs one-shot there instead (correct, slower;
    // rare at these sizes).
    let part = block.div_ceil(nranks.max(1));
    let two_shot = d.coll == Coll::AllReduce
        && nranks > 2
        && if red.simple_bytes == crate::config::SIMPLE_AUTO {
            block <= TWO_SHOT_AUTO_BYTES
        } else {
            part <= red.simple_bytes
        };
    let divides = d.count.is_multiple_of(nranks);
    let ll128 = red.ll128_bytes > 0 && {
        let (above, upto) = ll128_range(d.coll, nranks, red.ll128_bytes, red.ll_bytes);
        block > above && block <= upto
    };
    if ll128 {
        Some(Exchange::Ll128)
    } else if block <= red.ll_bytes {
        Some(Exchange::Ll)
    } else if direct(nranks, red, d, block) {
        Some(Exchange::Direct)
    } else if simple {
        Some(Exchange::Simple)
    } else if two_shot && divides {
        Some(Exchange::TwoShot)
    } else if two_shot {
        Some(Exchange::Simple)
    } else {
        None
    }
}

/// Whether the buffers through which `d`'s copies reach the peers lie in
/// windows: the one buffer every rank of a rooted collective uses — the
/// receive buffer of a broadcast or scatter (the root writes into its peers'),
/// the send buffer of a gather (the root reads its peers') — and both
/// otherwise. A root's other buffer (a broadcast's or scatter's input, a
/// gather's output) is its alone and reached locally: asking for its window
/// would let the root route apart from the others (it did, until session 24:
/// staged on the root, on windows elsewhere).
fn in_windows(d: &CollDesc<'_, Window>) -> bool {
    let (send, recv) = reaching(d.coll);
    (!send || d.send_win.is_some()) && (!recv || d.recv_win.is_some())
}

/// Which of a call's buffers (send, receive) its copies reach the peers
/// through ([`in_windows`]): the one every rank of a rooted collective uses,
/// both otherwise.
fn reaching(coll: Coll) -> (bool, bool) {
    match coll {
        Coll::Broadcast | Coll::Scatter => (false, true),
        Coll::Gather => (true, false),
        _ => (true, true),
    }
}

/// How ce would run `d` on `nranks`, or why it cannot. Decided only from
/// what every rank has alike — the call, the agreed [`Agreed`], and
/// whether the buffers lie in windows (windows are registered by every rank
/// alike) — never from whether this rank runs in place, which NCCL lets
/// ranks choose apart:
///
/// | collective | on windows | without windows |
/// |---|---|---|
/// | all_reduce | one-shot up to `FERROCX_CE_ONESHOT_BYTES` × 2/n (and the scratch), two-shot above | staged one-shot while the scratch holds it |
/// | reduce_scatter, all_gather, broadcast, gather, scatter | on the windows | staged while the scratch holds it |
/// | alltoall | staged while the scratch holds it (the core above) | staged while the scratch holds it |
///
/// Before all of these: all_reduce and reduce_scatter (not avg), all_gather,
/// alltoall, broadcast, gather and scatter whose block is at most
/// `FERROCX_CE_LL_BYTES` run as one LL kernel, and up to
/// `FERROCX_CE_SIMPLE_BYTES` as one Simple kernel, windows or not (`exchange`).
pub fn route(nranks: usize, red: &Agreed, d: &CollDesc<'_, Window>) -> Result<Route, String> {
    reductions_usable(red, d)?;
    if let Some(k) = exchange(nranks, red, d) {
        return Ok(Route {
            kernel: Some(k),
            ..Route::default()
        });
    }
    let block = d.count.saturating_mul(d.elem);
    let staged_bytes = plan::staged_bytes(d.coll, nranks, block).unwrap_or(usize::MAX);
    let fits = staged_bytes <= red.scratch;
    let can_stage = red.stage && fits;
    let windows = in_windows(d);
    // One-shot reads n-1 whole inputs, two-shot 2(n-1)/n of one: the limit
    // is set for 2 ranks and shrinks as 2/n.
    let one_shot = block.saturating_mul(nranks) <= red.one_shot_bytes.saturating_mul(2);
    // alltoall always stages (a rank in place needs its input set aside, and
    // ranks may differ in that): on windows whenever it fits, since the gate
    // (FERROCX_CE_STAGE) is about calls outside windows; above the scratch the
    // core runs it on every rank alike.
    let staged = match d.coll {
        Coll::AllToAll if windows => fits,
        _ => !windows && can_stage,
    };
    let windowed_ok = windows && d.coll != Coll::AllToAll;
    if !staged && !windowed_ok {
        let why = if !windows && !red.stage {
            "staging is off (FERROCX_CE_STAGE; by default on only where calls stay checked)"
                .to_string()
        } else {
            format!(
                "more than the {}-byte scratch (FERROCX_CE_SCRATCH_BYTES)",
                red.scratch
            )
        };
        return Err(format!(
            "{} of {staged_bytes} bytes {}: {why}",
            d.coll.name(),
            if windows {
                "on windows"
            } else {
                "outside ce's windows"
            },
        ));
    }
    // One-shot on windows needs the scratch too (a rank in place folds there).
    let one_shot = d.coll == Coll::AllReduce && !staged && one_shot && block <= red.scratch;
    Ok(Route {
        staged,
        one_shot,
        kernel: None,
    })
}

/// ce's bid for `d` on `nranks` ranks, or why it cannot run it: the same
/// on every rank (nothing of the rank's own goes into it).
pub fn bid(
    priority: i32,
    nranks: usize,
    red: &Agreed,
    d: &CollDesc<'_, Window>,
) -> Result<i32, String> {
    bid_route(priority, nranks, red, d).map(|(p, _)| p)
}

/// [`bid`] and, for a call with data, its [`route`] (what `launch` needs).
pub fn bid_route(
    priority: i32,
    nranks: usize,
    red: &Agreed,
    d: &CollDesc<'_, Window>,
) -> Result<(i32, Option<Route>), String> {
    if priority <= 0 {
        return Err("FERROCX_CE_PRIORITY=0".into());
    }
    if !plan::COLLS.contains(&d.coll) && !plan::REDUCE_COLLS.contains(&d.coll) {
        return Err(format!("ce does not run {}", d.coll.name()));
    }
    if d.mem != MemKind::Cuda {
        return Err("host memory".into());
    }
    if d.root >= nranks {
        return Err(format!("root {} of {nranks} ranks", d.root));
    }
    reductions_usable(red, d)?;
    if d.count == 0 {
        return Ok((priority, None));
    }
    let route = route(nranks, red, d)?;
    if route.staged || route.kernel.is_some() {
        return Ok((priority, Some(route)));
    }
    let block = d
        .count
        .checked_mul(d.elem)
        .ok_or_else(|| "the size overflows".to_string())?;
    let (s, r) = plan::extents(d.coll, nranks, d.root, block, d.in_place)
        .ok_or_else(|| "the size overflows".to_string())?;
    // Windowed: the windows through which the copies reach the peers must
    // hold the root's extents (the largest, and the same on every rank, since
    // offsets are symmetric). A rooted collective's other buffer is the
    // root's alone (reached locally) or unused: its window, if any, says
    // nothing every rank knows, so it is not asked (`in_windows`).
    let (send_used, recv_used) = reaching(d.coll);
    if let (Some(sw), true) = (&d.send_win, send_used) {
        fits(sw, s, "send")?;
    }
    if let (Some(rw), true) = (&d.recv_win, recv_used) {
        fits(rw, r, "receive")?;
    }
    Ok((priority, Some(route)))
}

/// For a reduction: whether the ranks run them, and the kernels' type and operator exist.
fn reductions_usable(red: &Agreed, d: &CollDesc<'_, Window>) -> Result<(), String> {
    if !plan::REDUCE_COLLS.contains(&d.coll) {
        return Ok(());
    }
    if !red.on {
        return Err(format!(
            "{}: reductions are off on this communicator (FERROCX_CE_REDUCE=0, or a rank has no reduction kernels)",
            d.coll.name()
        ));
    }
    kernel_types(d).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocx_sdk::collective::Coll;

    #[test]
    fn simple_blocks_double_for_the_spread_kernels_above_2_ranks_unless_set() {
        use crate::config::SIMPLE_BLOCKS_AUTO as AUTO;
        let t = ferrocx_sdk::kernels::simple::TARGET_BLOCKS;
        for c in [Coll::ReduceScatter, Coll::AllGather, Coll::AllToAll] {
            for n in [3, 4, 8] {
                assert_eq!(simple_blocks(Some(c), n, AUTO), 2 * t, "{}", c.name());
            }
            assert_eq!(simple_blocks(Some(c), 2, AUTO), t, "{}", c.name());
        }
        for c in [Coll::AllReduce, Coll::Broadcast] {
            assert_eq!(simple_blocks(Some(c), 4, AUTO), t, "{}", c.name());
        }
        assert_eq!(simple_blocks(None, 4, AUTO), t);
        assert_eq!(simple_blocks(Some(Coll::ReduceScatter), 4, 32), 32);
        assert_eq!(simple_blocks(None, 4, 16), 16);
    }

    fn bid(priority: i32, nranks: usize, d: &CollDesc<'_, Window>) -> Result<i32, String> {
        super::bid(priority, nranks, &Agreed::default(), d)
    }

    const ON: Agreed = Agreed {
        on: true,
        scratch: 1 << 10,
        one_shot_bytes: 64,
        stage: true,
        check_calls: false,
        ll_bytes: 0,
        ll128_bytes: 0,
        simple_bytes: 0,
        direct_bytes: 0,
        graph_kernels: false,
    };

    fn win(bytes: u64) -> Window {
        Window {
            base: 0x1000,
            bytes,
            peer_bases: vec![0x1000, 0x9000],
            peer_addrs: vec![0x1000, 0x2000],
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
            // alltoall runs staged only: it needs a scratch.
            let red = if c == Coll::AllToAll {
                ON
            } else {
                Agreed::default()
            };
            assert_eq!(
                super::bid(200, 2, &red, &desc(c, 10, Some(&w), Some(&w))),
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
        assert!(bid(200, 2, &d).unwrap_err().contains("scratch"));
        assert_eq!(super::bid(200, 2, &ON, &d), Ok(200), "in place: staged");
        let staged = desc(Coll::Scatter, 10, None, None);
        assert_eq!(
            super::bid(200, 2, &ON, &staged),
            Ok(200),
            "no windows: staged"
        );
        let mut d = desc(Coll::Broadcast, 10, Some(&w), Some(&w));
        d.mem = MemKind::Host;
        assert!(bid(200, 2, &d).is_err());
        d.mem = MemKind::Cuda;
        d.root = 2;
        assert!(bid(200, 2, &d).is_err());
        let ar = desc(Coll::AllReduce, 10, Some(&w), Some(&w));
        assert_eq!(super::bid(200, 2, &ON, &ar), Ok(200));
        assert!(bid(200, 2, &ar).unwrap_err().contains("FERROCX_CE_REDUCE"));
        let mut d = desc(Coll::AllReduce, 10, Some(&w), Some(&w));
        d.op = 9;
        assert!(super::bid(200, 2, &ON, &d)
            .unwrap_err()
            .contains("operator"));
        let rs = desc(Coll::ReduceScatter, 20, Some(&w), Some(&w));
        let e = super::bid(200, 2, &ON, &rs).unwrap_err();
        assert!(e.contains("send buffer (160 bytes"), "{e}");
        let huge = desc(Coll::AllGather, usize::MAX / 2, Some(&w), Some(&w));
        assert!(bid(200, 2, &huge).unwrap_err().contains("overflow"));
    }

    /// The routes of the table in [`route`], at the boundaries (±1 element).
    #[test]
    fn routes_follow_the_table() {
        let w = win(1 << 20);
        let r = |n, coll, count, windows: bool, in_place| {
            let mut d = if windows {
                desc(coll, count, Some(&w), Some(&w))
            } else {
                desc(coll, count, None, None)
            };
            d.in_place = in_place;
            route(n, &ON, &d).map(|r| (r.staged, r.one_shot))
        };
        use Coll::{AllGather as AG, AllReduce as AR, AllToAll as A2A, ReduceScatter as RS};
        // all_reduce: one-shot up to 64 B at 2 ranks (×2/n), two-shot on windows above.
        assert_eq!(
            r(2, AR, 16, true, false),
            Ok((false, true)),
            "64 B one-shot"
        );
        assert_eq!(
            r(2, AR, 16, true, true),
            Ok((false, true)),
            "in place alike"
        );
        assert_eq!(
            r(2, AR, 17, true, false),
            Ok((false, false)),
            "68 B two-shot"
        );
        assert_eq!(
            r(4, AR, 8, true, false),
            Ok((false, true)),
            "32 B × 4 ranks"
        );
        assert_eq!(r(4, AR, 9, true, false), Ok((false, false)));
        assert_eq!(
            r(2, AR, 256, false, false),
            Ok((true, false)),
            "no windows: staged"
        );
        assert!(r(2, AR, 257, false, false)
            .unwrap_err()
            .contains("FERROCX_CE_SCRATCH_BYTES"));
        // reduce_scatter and all_gather: windows first.
        assert_eq!(r(4, RS, 64, true, false), Ok((false, false)));
        assert_eq!(
            r(4, RS, 64, false, false),
            Ok((true, false)),
            "4 × 256 B staged"
        );
        assert!(r(4, RS, 65, false, true).is_err());
        assert_eq!(r(2, AG, 4, true, true), Ok((false, false)));
        assert_eq!(r(2, AG, 256, false, false), Ok((true, false)));
        assert!(r(2, AG, 257, false, false).is_err());
        // alltoall: staged while it fits, the core above (in place or not).
        assert_eq!(r(2, A2A, 128, true, true), Ok((true, false)));
        assert_eq!(r(2, A2A, 128, true, false), Ok((true, false)));
        assert!(r(2, A2A, 129, true, false).unwrap_err().contains("scratch"));
        assert!(r(2, A2A, 129, true, true).unwrap_err().contains("scratch"));
        let d = desc(AR, 256, None, None);
        assert_eq!(super::bid(200, 2, &ON, &d), Ok(200));
        assert!(bid(200, 2, &d).is_err(), "reductions off");
        assert!(bid(200, 2, &desc(Coll::AllGather, 4, None, None)).is_err());
        // Staging off: windows only.
        let no_stage = Agreed { stage: false, ..ON };
        let rs = |coll, count, windows: bool, in_place| {
            let mut d = if windows {
                desc(coll, count, Some(&w), Some(&w))
            } else {
                desc(coll, count, None, None)
            };
            d.in_place = in_place;
            route(2, &no_stage, &d).map(|r| r.staged)
        };
        assert_eq!(
            rs(AR, 16, true, true),
            Ok(false),
            "one-shot in place still uses the scratch"
        );
        assert!(rs(AR, 16, false, false)
            .unwrap_err()
            .contains("FERROCX_CE_STAGE"));
        // On windows alltoall stages whatever the gate (it is about buffers outside windows).
        assert_eq!(rs(A2A, 16, true, false), Ok(true));
        assert_eq!(rs(A2A, 16, true, true), Ok(true));
        let zero = desc(AR, 0, None, None);
        assert!(bid(200, 2, &zero).is_err(), "count 0 too: reductions off");
    }

    /// Every rank must decide alike: never from whether it runs in place
    /// (except alltoall in place above the scratch, which no layout runs),
    /// nor, in rooted collectives, from a non-root's unused buffer.
    #[test]
    fn routes_ignore_in_place_and_unused_buffers() {
        let w = win(1 << 20);
        for coll in plan::COLLS.into_iter().chain(plan::REDUCE_COLLS) {
            for n in 1..=5 {
                for count in [1usize, 15, 16, 17, 63, 64, 65, 255, 256, 257] {
                    for me in 0..n {
                        for windows in [false, true] {
                            let d = |in_place, unused_win: bool| {
                                let mut d = desc(coll, count, Some(&w), Some(&w));
                                d.root = n - 1;
                                d.in_place = in_place;
                                if !windows {
                                    (d.send_win, d.recv_win) = (None, None);
                                }
                                let root = me == n - 1;
                                let unused_send =
                                    !root && matches!(coll, Coll::Broadcast | Coll::Scatter);
                                let unused_recv = !root && coll == Coll::Gather;
                                if !unused_win && unused_send {
                                    d.send_win = None;
                                }
                                if !unused_win && unused_recv {
                                    d.recv_win = None;
                                }
                                route(n, &ON, &d)
                            };
                            let base = d(false, true);
                            assert_eq!(
                                d(false, false),
                                base,
                                "{coll:?} n={n} count={count} me={me}"
                            );
                            let inp = d(true, true);
                            if !(coll == Coll::AllToAll
                                && base.as_ref().map(|r| r.staged) == Ok(false))
                            {
                                assert_eq!(
                                    inp, base,
                                    "{coll:?} n={n} count={count} me={me} in place"
                                );
                            }
                        }
                    }
                }
            }
        }
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

    /// Small blocks of the LL collectives take the kernel, windows or not,
    /// staging or not; everything else keeps its route.
    #[test]
    fn small_blocks_take_the_ll_kernel() {
        let w = win(1 << 20);
        let red = Agreed { ll_bytes: 64, ..ON };
        let ll = |d: &CollDesc<'_, Window>, red: &Agreed| {
            route(2, red, d).map(|r| r.kernel == Some(Exchange::Ll))
        };
        for coll in [
            Coll::AllReduce,
            Coll::ReduceScatter,
            Coll::AllGather,
            Coll::AllToAll,
            Coll::Broadcast,
            Coll::Scatter,
            Coll::Gather,
        ] {
            for (sw, rw) in [(None, None), (Some(&w), Some(&w))] {
                assert_eq!(ll(&desc(coll, 16, sw, rw), &red), Ok(true), "{coll:?} 64 B");
                assert_eq!(ll(&desc(coll, 1, sw, rw), &red), Ok(true), "{coll:?} 4 B");
                // One byte more: another route.
                assert_ne!(ll(&desc(coll, 17, sw, rw), &red), Ok(true), "{coll:?} 68 B");
            }
            let d = desc(coll, 16, None, None);
            assert_eq!(
                bid_route(7, 2, &red, &d).map(|(p, r)| (p, r.and_then(|r| r.kernel))),
                Ok((7, Some(Exchange::Ll)))
            );
            assert_ne!(
                ll(&d, &Agreed { ll_bytes: 0, ..red }),
                Ok(true),
                "{coll:?}: off"
            );
            assert_ne!(
                ll(&d, &Agreed { on: false, ..red }),
                Ok(true),
                "{coll:?}: no kernels"
            );
            assert_ne!(
                route(17, &red, &d).map(|r| r.kernel),
                Ok(Some(Exchange::Ll)),
                "17 ranks"
            );
            // While capturing only with graph kernels; outside windows not
            // without staging (the check's gate).
            let mut cap = desc(coll, 16, None, None);
            cap.capturing = true;
            assert_ne!(ll(&cap, &red), Ok(true), "{coll:?}: capturing");
            let graphs = Agreed {
                graph_kernels: true,
                ..red
            };
            assert_eq!(
                ll(&cap, &graphs),
                Ok(true),
                "{coll:?}: capturing, graph kernels"
            );
            let no_stage = Agreed {
                stage: false,
                ..red
            };
            assert_ne!(ll(&d, &no_stage), Ok(true), "{coll:?}: no staging");
            assert_eq!(ll(&desc(coll, 16, Some(&w), Some(&w)), &no_stage), Ok(true));
        }
        // Not avg (its division is a step of its own), not the other collectives.
        let mut avg = desc(Coll::AllReduce, 4, None, None);
        avg.op = ferrocx_sdk::abi::FX_OP_AVG;
        assert_ne!(ll(&avg, &red), Ok(true));
        assert_ne!(ll(&desc(Coll::Reduce, 4, None, None), &red), Ok(true));
        // A gather's window is its send buffer's (a non-root's receive buffer
        // may be anything): in it, the kernel runs without staging.
        let no_stage = Agreed {
            stage: false,
            ..red
        };
        let g = desc(Coll::Gather, 16, Some(&w), None);
        assert_eq!(ll(&g, &no_stage), Ok(true));
        let g = desc(Coll::Gather, 16, None, Some(&w));
        assert_ne!(ll(&g, &no_stage), Ok(true));
    }

    /// Above the LL kernel's limit and up to `simple_bytes` (all_reduce:
    /// block × n ≤ 2 × that), the same collectives take the Simple kernel,
    /// under the same gates; above it the barrier routes.
    #[test]
    fn mid_blocks_take_the_simple_kernel() {
        let w = win(1 << 20);
        let red = Agreed {
            ll_bytes: 64,
            simple_bytes: 256,
            ..ON
        };
        let k =
            |n: usize, d: &CollDesc<'_, Window>, red: &Agreed| route(n, red, d).map(|r| r.kernel);
        for coll in [
            Coll::AllReduce,
            Coll::ReduceScatter,
            Coll::AllGather,
            Coll::AllToAll,
            Coll::Broadcast,
        ] {
            for (sw, rw) in [(None, None), (Some(&w), Some(&w))] {
                assert_eq!(k(2, &desc(coll, 16, sw, rw), &red), Ok(Some(Exchange::Ll)));
                assert_eq!(
                    k(2, &desc(coll, 17, sw, rw), &red),
                    Ok(Some(Exchange::Simple)),
                    "{coll:?} 68 B"
                );
                assert_eq!(
                    k(2, &desc(coll, 64, sw, rw), &red),
                    Ok(Some(Exchange::Simple)),
                    "{coll:?} 256 B"
                );
                assert_ne!(
                    k(2, &desc(coll, 65, sw, rw), &red).ok().flatten(),
                    Some(Exchange::Simple),
                    "{coll:?} 260 B"
                );
            }
            // all_reduce scales as one-shot: 4 ranks take half the block.
            let at4 = |count| k(4, &desc(coll, count, None, None), &red);
            let (fits, over) = match coll {
                Coll::AllReduce => (32, 36),
                _ => (64, 65),
            };
            assert_eq!(at4(fits), Ok(Some(Exchange::Simple)), "{coll:?}");
            assert_ne!(at4(over).ok().flatten(), Some(Exchange::Simple), "{coll:?}");
            if coll == Coll::Broadcast {
                // Past its limit a broadcast leaves the kernel (above 2
                // ranks the kernel passes it along the ranks whole).
                assert_eq!(at4(68).ok().flatten(), None);
            }
            if coll == Coll::AllReduce {
                // Past one-shot: two-shot while the count divides and a
                // part (count / 4) fits the reduce_scatter and all_gather
                // limits (256 B: 64 elements of 4 bytes).
                assert_eq!(at4(36), Ok(Some(Exchange::TwoShot)));
                assert_eq!(at4(256), Ok(Some(Exchange::TwoShot)));
                assert_eq!(at4(260).ok().flatten(), None, "a part of 65");
                assert_eq!(
                    at4(37),
                    Ok(Some(Exchange::Simple)),
                    "37 does not divide: one-shot"
                );
                assert_eq!(at4(257).ok().flatten(), None, "a part of 64.25");
                // Under auto, up to TWO_SHOT_AUTO_BYTES.
                let auto = Agreed {
                    simple_bytes: crate::config::SIMPLE_AUTO,
                    ..red
                };
                let at = |bytes: usize| k(4, &desc(coll, bytes / 4, None, None), &auto);
                assert_eq!(at(TWO_SHOT_AUTO_BYTES), Ok(Some(Exchange::TwoShot)));
                assert_ne!(
                    at(TWO_SHOT_AUTO_BYTES + 16).ok().flatten(),
                    Some(Exchange::TwoShot)
                );
                assert_ne!(
                    k(
                        2,
                        &desc(coll, 64, None, None),
                        &Agreed {
                            simple_bytes: 100,
                            ..red
                        }
                    )
                    .ok()
                    .flatten(),
                    Some(Exchange::TwoShot),
                    "2 ranks stay one-shot"
                );
            }
            let d = desc(coll, 40, None, None);
            let off = Agreed {
                simple_bytes: 0,
                ..red
            };
            assert_ne!(k(2, &d, &off).ok().flatten(), Some(Exchange::Simple), "off");
            let mut cap = desc(coll, 40, None, None);
            cap.capturing = true;
            assert_ne!(
                k(2, &cap, &red).ok().flatten(),
                Some(Exchange::Simple),
                "capturing"
            );
            assert_eq!(
                k(
                    2,
                    &cap,
                    &Agreed {
                        graph_kernels: true,
                        ..red
                    }
                )
                .ok()
                .flatten(),
                Some(Exchange::Simple),
                "capturing, graph kernels"
            );
            let no_stage = Agreed {
                stage: false,
                ..red
            };
            assert_ne!(
                k(2, &d, &no_stage).ok().flatten(),
                Some(Exchange::Simple),
                "gate"
            );
            assert_eq!(
                k(2, &desc(coll, 40, Some(&w), Some(&w)), &no_stage),
                Ok(Some(Exchange::Simple))
            );
        }
        let mut avg = desc(Coll::AllReduce, 40, None, None);
        avg.op = ferrocx_sdk::abi::FX_OP_AVG;
        assert_ne!(k(2, &avg, &red).ok().flatten(), Some(Exchange::Simple));
        // gather and scatter: the Simple kernel where a number sets the
        // limit, and under auto at 2 and 4 ranks (measured to 32 MiB
        // blocks above 2 ranks).
        let auto = Agreed {
            simple_bytes: crate::config::SIMPLE_AUTO,
            ..red
        };
        for coll in [Coll::Gather, Coll::Scatter] {
            assert_eq!(
                k(2, &desc(coll, 40, None, None), &red),
                Ok(Some(Exchange::Simple))
            );
            assert_eq!(
                k(2, &desc(coll, 40, None, None), &auto),
                Ok(Some(Exchange::Simple))
            );
            assert_eq!(
                k(4, &desc(coll, 40, None, None), &auto),
                Ok(Some(Exchange::Simple))
            );
            assert_eq!(
                k(4, &desc(coll, (32 << 20) / 4 + 1, None, None), &auto)
                    .ok()
                    .flatten(),
                None
            );
        }
    }

    /// Above the LL limit and up to `FERROCX_CE_DIRECT_BYTES`, the direct
    /// modes take all_reduce whose buffers lie in windows (and whose
    /// block fits the scratch), all_gather and broadcast whose receive
    /// buffers do; everything else keeps its route.
    #[test]
    fn direct_modes_take_calls_whose_peers_buffers_lie_in_windows() {
        let w = win(1 << 20);
        let red = Agreed {
            ll_bytes: 64,
            simple_bytes: 1 << 20,
            direct_bytes: 1024,
            ..ON
        };
        let k = |d: &CollDesc<'_, Window>, red: &Agreed| route(2, red, d).map(|r| r.kernel);
        let direct = Ok(Some(Exchange::Direct));
        let simple = Ok(Some(Exchange::Simple));
        // all_reduce: both windows; 1 element above the LL limit, up to the
        // scratch (1 KiB here) and the limit.
        assert_eq!(
            k(&desc(Coll::AllReduce, 16, Some(&w), None), &red),
            Ok(Some(Exchange::Ll))
        );
        assert_eq!(
            k(&desc(Coll::AllReduce, 17, Some(&w), Some(&w)), &red),
            direct
        );
        assert_eq!(k(&desc(Coll::AllReduce, 17, Some(&w), None), &red), simple);
        assert_eq!(
            k(&desc(Coll::AllReduce, 256, Some(&w), Some(&w)), &red),
            direct
        );
        assert_eq!(
            k(&desc(Coll::AllReduce, 257, Some(&w), Some(&w)), &red),
            simple
        );
        assert_eq!(k(&desc(Coll::AllReduce, 17, None, Some(&w)), &red), simple);
        let small_scratch = Agreed {
            scratch: 512,
            ..red
        };
        assert_eq!(
            k(
                &desc(Coll::AllReduce, 200, Some(&w), Some(&w)),
                &small_scratch
            ),
            simple
        );
        // The copies: the receive window.
        for coll in [Coll::AllGather, Coll::Broadcast] {
            assert_eq!(k(&desc(coll, 17, None, Some(&w)), &red), direct, "{coll:?}");
            assert_eq!(
                k(&desc(coll, 256, Some(&w), None), &red),
                simple,
                "{coll:?}"
            );
        }
        // Not these, not avg, not while capturing (unless graph kernels), not at one rank.
        for coll in [Coll::ReduceScatter, Coll::AllToAll] {
            assert_eq!(
                k(&desc(coll, 17, Some(&w), Some(&w)), &red),
                simple,
                "{coll:?}"
            );
        }
        let mut avg = desc(Coll::AllReduce, 17, Some(&w), Some(&w));
        avg.op = ferrocx_sdk::abi::FX_OP_AVG;
        assert_ne!(k(&avg, &red), direct);
        let mut cap = desc(Coll::AllGather, 17, None, Some(&w));
        cap.capturing = true;
        assert_ne!(k(&cap, &red), direct);
        let graphs = Agreed {
            graph_kernels: true,
            ..red
        };
        assert_eq!(k(&cap, &graphs), direct);
        assert_ne!(
            route(1, &red, &desc(Coll::AllGather, 17, None, Some(&w))).map(|r| r.kernel),
            direct
        );
        assert_eq!(direct_range(Coll::AllToAll, 2, 1 << 20), (0, 0));
    }

    /// Under `auto` the direct modes take each collective's measured range
    /// at 2 ranks (above the first bound, up to the second, ±1 element),
    /// no all_reduce, nothing above 2 ranks; the ring modes keep the rest.
    #[test]
    fn direct_modes_under_auto_take_the_measured_ranges() {
        let big = win(1 << 30);
        let auto = Agreed {
            ll_bytes: 1 << 20,
            simple_bytes: crate::config::SIMPLE_AUTO,
            direct_bytes: crate::config::DIRECT_AUTO,
            scratch: 1 << 30,
            ..ON
        };
        let k = |n: usize, coll, bytes: usize| {
            route(n, &auto, &desc(coll, bytes / 4, Some(&big), Some(&big))).map(|r| r.kernel)
        };
        let direct = Ok(Some(Exchange::Direct));
        for (coll, (above, upto), _) in DIRECT_TABLE {
            if upto == 0 {
                continue;
            }
            assert_ne!(k(2, coll, above), direct, "{coll:?} at its floor");
            assert_eq!(k(2, coll, above + 4), direct, "{coll:?} above its floor");
            assert_eq!(k(2, coll, upto), direct, "{coll:?} at its limit");
            assert_ne!(k(2, coll, upto + 4), direct, "{coll:?} above its limit");
            assert_ne!(k(3, coll, above + 4), direct, "{coll:?} at 3 ranks");
        }
        assert_eq!(k(2, Coll::AllGather, 32 << 20), direct);
        assert_eq!(k(2, Coll::AllGather, 4 << 20), Ok(Some(Exchange::Simple)));
        // Past 64 MiB blocks the window routes (own block on a side stream).
        assert_eq!(k(2, Coll::AllGather, 128 << 20), Ok(None));
        // broadcast: the Simple kernel to 128 MiB, the window routes above.
        assert_eq!(k(2, Coll::Broadcast, 64 << 20), Ok(Some(Exchange::Simple)));
        assert_eq!(k(2, Coll::Broadcast, 256 << 20), Ok(None));
        for bytes in [2 << 20, 8 << 20, 32 << 20] {
            assert_ne!(k(2, Coll::AllReduce, bytes), direct, "all_reduce {bytes}");
        }
        // A number is an upper bound alone (from the LL limit up).
        assert_eq!(direct_range(Coll::Broadcast, 2, 4096), (0, 4096));
        assert_eq!(direct_range(Coll::AllReduce, 4, 4096), (0, 4096));
    }

    /// `describe` names the route a bid stands for, on this rank's own
    /// buffers: the kernels, the barrier routes, nothing for an empty call,
    /// and `None` where ce would not bid.
    #[test]
    fn describe_names_the_route_the_bid_stands_for() {
        let w = win(1 << 30);
        let red = Agreed::assumed(&crate::config::Config::default());
        let d = |coll, bytes: usize, win: Option<&Window>| {
            describe(2, &red, &desc(coll, bytes / 4, win, win))
        };
        let s = |x: &str| Some(x.to_string());
        assert_eq!(d(Coll::AllGather, 64, None), s("LL"));
        assert_eq!(d(Coll::AllGather, 1 << 20, None), s("LL128"));
        assert_eq!(d(Coll::AllGather, 8 << 20, None), s("Simple"));
        assert_eq!(d(Coll::AllGather, 32 << 20, Some(&w)), s("Simple direct"));
        assert_eq!(d(Coll::AllReduce, 32 << 20, Some(&w)), s("Simple"));
        assert_eq!(d(Coll::Gather, 4096, None), s("LL"));
        assert_eq!(d(Coll::Scatter, 4096, None), s("LL"));
        assert_eq!(d(Coll::Gather, 4 << 20, None), s("Simple"));
        assert_eq!(d(Coll::Gather, 64 << 20, Some(&w)), s("windows"));
        assert_eq!(d(Coll::Gather, 64 << 20, None), None);
        assert_eq!(d(Coll::AllGather, 0, None), s("nothing to move"));
        assert_eq!(d(Coll::Broadcast, 1 << 30, None), None);
        let mut host = desc(Coll::AllGather, 16, None, None);
        host.mem = MemKind::Host;
        assert_eq!(describe(2, &red, &host), None);
    }

    /// The printed table follows the routes: LL, LL128 (at 2 ranks, where
    /// every rank has its own GPU and NVLink: assumed here), then Simple up
    /// to each collective's limit, then the barrier routes or the core.
    #[test]
    fn the_table_names_each_route() {
        let cfg = crate::config::Config::default();
        let red = Agreed::assumed(&cfg);
        let sizes = [8, 1 << 20, (1 << 20) + 4, 32 << 20, (32 << 20) + 4, 1 << 30];
        let t = table(2, &red, &sizes);
        let row = |name: &str| {
            t.iter()
                .find(|(n, _)| n.starts_with(name) && n.ends_with("buffers"))
                .map(|(_, c)| c.join(" "))
                .unwrap()
        };
        assert_eq!(row("all_gather "), "LL LL128 LL128 Simple Simple core");
        assert_eq!(row("broadcast "), "LL LL128 LL128 Simple Simple core");
        assert_eq!(row("all_reduce "), "LL LL128 LL128 Simple Simple Simple");
        assert_eq!(row("gather "), "LL LL Simple Simple core core");
        assert_eq!(row("scatter "), "LL LL Simple Simple core core");
        let win = t
            .iter()
            .find(|(n, _)| n.starts_with("broadcast ") && n.ends_with("windows"))
            .map(|(_, c)| c.join(" "))
            .unwrap();
        // On windows at 2 ranks the window routes take broadcasts past the
        // Simple kernel's 128 MiB (no direct mode under auto).
        assert_eq!(win, "LL LL128 LL128 Simple Simple windows");
        assert_eq!(t.len(), 14);
        // Forced: a number replaces the table for every collective.
        let forced = Agreed {
            simple_bytes: 1 << 30,
            ..red
        };
        let t = table(2, &forced, &sizes);
        let bc = t.iter().find(|(n, _)| n.starts_with("broadcast ")).unwrap();
        assert_eq!(bc.1.join(" "), "LL LL128 LL128 Simple Simple Simple");
    }

    /// The LL128 kernel takes its range before the LL kernel's limit is
    /// asked: under `auto` the table's (per rank count), a number N the blocks
    /// above `FERROCX_CE_LL_BYTES` up to N, `0` or not agreed none; never avg,
    /// nor a capture without graph kernels. Every block maps to one kernel, boundaries ±1 element.
    #[test]
    fn mid_blocks_take_the_ll128_kernel_where_agreed() {
        let red = Agreed::assumed(&crate::config::Config::default());
        let k = |n: usize, red: &Agreed, coll, bytes: usize| {
            route(n, red, &desc(coll, bytes / 4, None, None)).map(|r| r.kernel)
        };
        let l8 = Ok(Some(Exchange::Ll128));
        for (coll, two, more) in LL128_TABLE {
            for (n, (above, upto)) in [(2, two), (3, more), (4, more)] {
                assert!(above < upto && upto <= crate::config::LL128_MAX_BYTES);
                // The LL kernel's limit (1 MiB) covers everything below.
                assert!(above <= crate::config::DEFAULT_LL_BYTES);
                assert_ne!(k(n, &red, coll, above), l8, "{coll:?} {n}");
                assert_eq!(k(n, &red, coll, above + 4), l8, "{coll:?} {n}");
                assert_eq!(k(n, &red, coll, upto), l8, "{coll:?} {n}");
                assert_ne!(k(n, &red, coll, upto + 4), l8, "{coll:?} {n}");
                // Odd counts and every type: by bytes alone.
                for elem in [1usize, 2, 8] {
                    let mut d = desc(coll, above / elem + 1, None, None);
                    d.elem = elem;
                    let kernel = route(n, &red, &d).map(|r| r.kernel);
                    assert_eq!(kernel, l8, "{coll:?} {n} {elem}");
                }
            }
        }
        // Below the range the LL kernel (within its limit), above it Simple.
        let ll = Ok(Some(Exchange::Ll));
        assert_eq!(k(2, &red, Coll::AllReduce, 256 << 10), ll);
        assert_eq!(k(4, &red, Coll::AllReduce, 64 << 10), ll);
        let simple = Ok(Some(Exchange::Simple));
        assert_eq!(k(2, &red, Coll::AllReduce, (4 << 20) + 4), simple);
        // A number: above the LL limit up to it, any rank count.
        let forced = Agreed {
            ll_bytes: 64 << 10,
            ll128_bytes: 4 << 20,
            ..red
        };
        for n in [2, 4] {
            assert_eq!(
                k(n, &forced, Coll::AllReduce, 64 << 10),
                Ok(Some(Exchange::Ll))
            );
            assert_eq!(k(n, &forced, Coll::AllReduce, (64 << 10) + 4), l8);
            assert_eq!(k(n, &forced, Coll::AllGather, 4 << 20), l8);
            assert_ne!(k(n, &forced, Coll::AllGather, (4 << 20) + 4), l8);
        }
        // Off (not agreed, or 0), avg, gather: never.
        let off = Agreed {
            ll128_bytes: 0,
            ..red
        };
        assert_eq!(
            k(2, &off, Coll::AllReduce, 512 << 10),
            Ok(Some(Exchange::Ll))
        );
        assert_eq!(
            k(2, &off, Coll::AllReduce, 2 << 20),
            Ok(Some(Exchange::Simple))
        );
        let mut avg = desc(Coll::AllReduce, 128 << 10, None, None);
        avg.op = ferrocx_sdk::abi::FX_OP_AVG;
        assert_ne!(route(2, &red, &avg).map(|r| r.kernel), l8);
        // Captured: only with graph kernels (the default).
        let mut cap = desc(Coll::AllReduce, 128 << 10, None, None);
        cap.capturing = true;
        assert_eq!(route(2, &red, &cap).map(|r| r.kernel), l8);
        let no_graphs = Agreed {
            graph_kernels: false,
            ..red
        };
        assert_ne!(route(2, &no_graphs, &cap).map(|r| r.kernel), l8);
        assert_eq!(
            ll128_range(Coll::Gather, 2, crate::config::LL128_AUTO, 0),
            (0, 0)
        );
        // The areas: the largest block at that rank count.
        let auto = crate::config::LL128_AUTO;
        assert_eq!(ll128_most(2, auto, 1 << 20), 4 << 20);
        assert_eq!(ll128_most(4, auto, 1 << 20), 1 << 20);
        assert_eq!(ll128_most(4, 1 << 20, 64 << 10), 1 << 20);
        assert_eq!(ll128_most(4, 1 << 20, 1 << 20), 0, "an empty range");
        assert_eq!(ll128_most(2, 0, 0), 0);
    }

    /// `auto` above 2 ranks: one-shot all_reduce only to 2 MiB blocks at 4
    /// ranks (two-shot above, to TWO_SHOT_AUTO_BYTES), broadcast (as a
    /// chain) to 1 GiB (the 4-GPU measurements); a number still forces
    /// every collective.
    #[test]
    fn auto_limits_follow_the_rank_count() {
        let red = Agreed::assumed(&crate::config::Config::default());
        let k = |n: usize, coll, bytes: usize| {
            route(n, &red, &desc(coll, bytes / 4, None, None)).map(|r| r.kernel)
        };
        let simple = Ok(Some(Exchange::Simple));
        assert_eq!(k(2, Coll::AllReduce, 8 << 20), simple);
        assert_ne!(k(4, Coll::AllReduce, 8 << 20), simple);
        assert_eq!(k(4, Coll::AllReduce, 2 << 20), simple);
        assert_ne!(k(4, Coll::AllReduce, (2 << 20) + 16), simple);
        assert_eq!(k(4, Coll::AllReduce, 64 << 10), Ok(Some(Exchange::Ll)));
        assert_eq!(k(4, Coll::Broadcast, 64 << 20), simple);
        assert_eq!(k(4, Coll::Broadcast, 1 << 30), simple);
        assert_ne!(k(4, Coll::Broadcast, (1 << 30) + 16), simple);
        assert_eq!(k(4, Coll::AllReduce, 8 << 20), Ok(Some(Exchange::TwoShot)));
        assert_eq!(
            k(4, Coll::AllReduce, TWO_SHOT_AUTO_BYTES),
            Ok(Some(Exchange::TwoShot))
        );
        assert_eq!(k(2, Coll::Broadcast, 32 << 20), simple);
        assert_eq!(k(2, Coll::Broadcast, 128 << 20), simple);
        assert_ne!(k(2, Coll::Broadcast, (128 << 20) + 16), simple);
        assert_eq!(k(4, Coll::AllGather, 8 << 20), simple);
        // At 2 ranks all_reduce and reduce_scatter run as the kernel to 1 GiB
        // blocks (one element more: not), alltoall to 512 MiB.
        for coll in [Coll::AllReduce, Coll::ReduceScatter] {
            assert_eq!(k(2, coll, 1 << 30), simple, "{coll:?}");
            assert_ne!(k(2, coll, (1 << 30) + 4), simple, "{coll:?}");
            assert_ne!(k(4, coll, 1 << 30), simple, "{coll:?} at 4 ranks");
        }
        assert_eq!(k(2, Coll::AllToAll, 512 << 20), simple);
        assert_ne!(k(2, Coll::AllToAll, (512 << 20) + 4), simple);
        // Above 2 ranks all_gather takes the routes past 32 MiB blocks (4
        // H100s), alltoall past 128 MiB (4 H200s), reduce_scatter the kernel
        // to 256 MiB.
        for (coll, most) in [(Coll::AllGather, 32 << 20), (Coll::AllToAll, 128 << 20)] {
            assert_eq!(k(4, coll, most), simple, "{coll:?}");
            assert_ne!(k(4, coll, most + 4), simple, "{coll:?}");
            assert_eq!(k(2, coll, 64 << 20), simple, "{coll:?} at 2 ranks");
        }
        assert_eq!(k(4, Coll::ReduceScatter, 256 << 20), simple);
        assert_ne!(k(4, Coll::ReduceScatter, (256 << 20) + 4), simple);
        assert_eq!(simple_limit(Coll::AllReduce, 4, 1 << 30), 1 << 30);
        assert_eq!(
            simple_limit(Coll::Gather, 4, crate::config::SIMPLE_AUTO),
            32 << 20
        );
        assert_eq!(k(4, Coll::Scatter, 32 << 20), simple);
        assert_ne!(k(4, Coll::Scatter, (32 << 20) + 4), simple);
        // The rows above 2 ranks hold at 3 too (an odd count, the kernel's
        // modes modelled at 1-5 ranks): the limits, and one element past them.
        for (coll, most) in [
            (Coll::AllToAll, 128 << 20),
            (Coll::Broadcast, 1 << 30),
            (Coll::Gather, 32 << 20),
            (Coll::Scatter, 32 << 20),
        ] {
            assert_eq!(k(3, coll, most), simple, "{coll:?} at 3 ranks");
            assert_ne!(k(3, coll, most + 16), simple, "{coll:?} at 3 ranks");
        }
        assert_eq!(simple_limit(Coll::Reduce, 2, crate::config::SIMPLE_AUTO), 0);
    }

    /// Without staging the exchange kernels need the receive buffer in a
    /// window; a broadcast root whose send buffer is outside one still routes
    /// as the non-roots do (asking for both would split the ranks).
    #[test]
    fn exchange_gate_asks_every_rank_the_same() {
        let w = win(1 << 20);
        let red = Agreed {
            ll_bytes: 64,
            simple_bytes: 1 << 20,
            stage: false,
            ..ON
        };
        for count in [8, 1000] {
            let mut root = desc(Coll::Broadcast, count, None, Some(&w));
            root.root = 0;
            let mut other = desc(Coll::Broadcast, count, Some(&w), Some(&w));
            other.root = 0;
            let (a, b) = (route(2, &red, &root), route(2, &red, &other));
            assert_eq!(a, b, "count {count}");
            assert!(a.unwrap().kernel.is_some(), "count {count}");
        }
    }

    /// A rooted collective's root has a buffer of its own (a broadcast's or
    /// scatter's input, a gather's output) that it reaches locally: whether it
    /// lies in a window must not move the root off the others' route, at
    /// any size (kernels, windows, staged, the core) — until session 24 the
    /// barrier routes staged on such a root and ran on windows elsewhere.
    #[test]
    fn a_roots_own_buffer_outside_windows_routes_as_the_others() {
        let w = win(1 << 30);
        let auto = Agreed::assumed(&crate::config::Config::default());
        for red in [auto, ON] {
            for n in [2, 3, 4] {
                for coll in [Coll::Broadcast, Coll::Scatter, Coll::Gather] {
                    for bytes in [64, 2 << 20, 24 << 20, 48 << 20, 256 << 20] {
                        let count = bytes / 4;
                        // The buffer every rank uses is in a window on every rank.
                        let shared_send = coll == Coll::Gather;
                        let only_shared = if shared_send {
                            desc(coll, count, Some(&w), None)
                        } else {
                            desc(coll, count, None, Some(&w))
                        };
                        let both = desc(coll, count, Some(&w), Some(&w));
                        assert_eq!(
                            route(n, &red, &only_shared),
                            route(n, &red, &both),
                            "{coll:?} n={n} {bytes} B"
                        );
                        assert_eq!(
                            describe(n, &red, &only_shared),
                            describe(n, &red, &both),
                            "{coll:?} n={n} {bytes} B"
                        );
                    }
                }
            }
        }
    }
}
