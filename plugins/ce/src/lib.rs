//! # ferrocx-ce — device collectives on the user's stream, through peer-mapped memory
//!
//! A collective plugin (`ferrocx_collective_v1`, `sdk/include/ferrocx_collective.h`)
//! that runs collectives on CUDA device memory entirely on the user's stream,
//! with no host thread and no proxy on the data path:
//!
//! * **copy collectives** — all_gather, alltoall, broadcast, gather, scatter —
//!   with the GPUs' copy engines only, no SM kernel (the approach of NCCL's
//!   "zero-CTA" CE collectives): on symmetric windows, pushes into the peers'
//!   windows (in a rooted collective the root does every copy, gather by
//!   pulling); without windows **staged** (each rank copies its input into its
//!   scratch, then every rank pulls what it needs into its own buffer).
//!   alltoall is staged while the scratch holds it, in place too;
//! * **reductions** — all_reduce and reduce_scatter — with the SDK's reduction
//!   kernels (`ferrocx_sdk::kernels`, the core's own) reading the peers' inputs
//!   straight through their IPC mappings, and copy engines spreading the
//!   results ([`plan::fold`]): one-shot all_reduce (every rank folds every
//!   input; a rank in place folds into its scratch and copies back after the
//!   complete barrier) up to `FERROCX_CE_ONESHOT_BYTES` (scaled by 2/n),
//!   two-shot above; buffers outside windows are staged (one-shot);
//! * **small calls** — all_reduce and reduce_scatter (not avg), all_gather,
//!   alltoall, broadcast, gather, scatter with blocks up to
//!   `FERROCX_CE_LL_BYTES` (1 MiB) —
//!   as one LL kernel (`ferrocx_sdk::kernels::ll`, the collective's moves
//!   from `ferrocx_sdk::kernels::moves`): each rank writes
//!   its data with the call's flag in every 8 bytes into its peers' LL areas
//!   (in the flag buffers) and polls its own, folding in registers; no
//!   barrier, no staging, no windows, 9–14 µs up to 1 MiB blocks on two
//!   H100s where NCCL takes 14–24 (docs/BENCH.md). A kernel that waits past `FERROCX_TIMEOUT` ends
//!   (and the watchdog breaks the communicator, naming the rank it waited
//!   for); so does one the watchdog releases (its abort word). Not in CUDA
//!   graphs (the kernels share a call counter and must not overlap).
//! * **mid and large calls** — the same collectives above that, up to each
//!   one's measured limit (`select::SIMPLE_TABLE`) — as one Simple kernel
//!   (`ferrocx_sdk::kernels::simple`): chunks pushed into slot rings in the
//!   peers' flag buffers with a flag per chunk and credits, 1.02–1.5× NCCL
//!   from 2 MiB to 256 MiB on two H100s; the same gates, timeouts and aborts
//!   as the LL kernel. Above 2 ranks its blocks take one (chunk, peer) pair
//!   each (`FERROCX_CE_SIMPLE_SPREAD`), a broadcast is passed along the
//!   ranks from the root (the chain) and all_reduce runs two-shot, as one
//!   kernel ([`select::Exchange::TwoShot`]). These kernels end by themselves at the
//!   timeout, which ce says through `launch_bounded` (the NCCL drop-in then
//!   need not wait for them).
//!
//! On windows every rank reaches a peer's buffer at its own offset: the
//! buffers of a call must lie at the same offsets of corresponding windows
//! on every rank (NCCL's `NCCL_WIN_COLL_SYMMETRIC` contract) — a gather root
//! in place passes its receive buffer, and the peers their send buffers, at
//! one offset. Staged calls need nothing of the kind.
//!
//! Calls are checked without a host round trip ([`notes`],
//! `FERROCX_CE_CHECK_CALLS`, on by default, as the core's
//! `FERROCX_CHECK_CALLS`): each rank writes a note of its call into its
//! peers' flag buffers with its ready flag, and the watchdog compares them
//! once the call completed.
//!
//! Which way a call runs ([`select::route`]) depends only on what every rank
//! has alike — the call, the agreed knobs, whether the buffers it uses lie in
//! windows — never on whether this rank runs in place, which NCCL lets ranks
//! choose apart (the plan tests run such mixes).
//!
//! The scratch is allocated with each rank's flags and mapped by every peer
//! (`FERROCX_CE_SCRATCH_BYTES`, 32 MiB by default), so unregistered calls up
//! to that size run here too (`FERROCX_CE_STAGE`, on by default; `auto`
//! turns it off where ce's check alone is off, since the core, which runs
//! those calls otherwise, checks them).
//!
//! It bids for a call when every rank of the communicator is on one host with
//! a GPU and the call is small enough for the LL kernel (outside windows only
//! where staging is allowed), the buffers lie in
//! its windows, or the input fits the scratch ([`select`]). Agreed are on when every rank loaded the kernels
//! (NVRTC) at `comm_init` and the ranks agree on the knobs.
//!
//! ## How a collective runs
//!
//! Every rank owns a flag buffer in its GPU memory (the barrier flags, the
//! note ring, and the LL areas: 2 × nranks × 2 MiB by default), exported with CUDA
//! IPC and opened by every peer at `comm_init` ([`flags`]). A collective
//! other than an LL call is *ready barrier, copies, complete barrier*
//! ([`sync`]):
//!
//! 1. **ready**: each rank writes its slot in every peer's ready array and
//!    waits until every peer wrote its slot in its own array
//!    (`cuStreamBatchMemOp`: `WRITE_VALUE_32` to the peers' mapped flags,
//!    `WAIT_VALUE_32` on its own). Once past it, every peer's stream has
//!    finished what it queued before the collective, so its receive buffer is
//!    free to be written.
//! 2. **copies**: each rank pushes its blocks straight into the peers'
//!    receive windows (`peer_bases[r] + offset`, mapped by the core), as one
//!    `cuMemcpyBatchAsync` (driver ≥ 12.8) or one `cuMemcpyAsync` per copy
//!    ([`plan`], [`issue`]); a gather's root pulls. Large collectives are
//!    split into batches with a barrier between them. A reduction runs its
//!    fold here (kernels), then its copies. A staged collective copies its
//!    input into its own scratch before the ready barrier, then only pulls
//!    (or folds) into this rank's own buffer. No rank writes what another
//!    reads between the two barriers ([`plan::fold`], [`plan::stage`] say
//!    why), so two suffice.
//! 3. **complete**: the same barrier on the complete array; once past it,
//!    every copy into this rank's buffer has landed (each writer's flag write
//!    is ordered after its copies), so the stream's later work sees the
//!    result.
//!
//! Eager launches use growing values compared `GEQ`; launches captured into
//! a CUDA graph use separate arrays, the constant value 1 compared `EQ` and
//! reset after each wait, with an even number of barriers per collective so
//! replays never lose a write ([`sync`] explains why). A captured barrier's
//! waits run as the SDK's graph wait kernel (`kernels::graph_wait`: the same
//! words polled with a deadline and the abort word) where ce has its
//! kernels, plain stream waits otherwise; a captured call is checked once,
//! at capture, by comparing the ranks' notes over the out-of-band channel.
//!
//! Calls captured into a graph also run the exchange kernels (LL, LL128,
//! Simple, the point-to-point kernel: `FERROCX_CE_GRAPH_KERNELS`, on by
//! default), since their call counts, ring positions and credits live on the
//! device and replays advance them. Their kernels share control words, so
//! from the first capture on every launch of the communicator, eager or
//! captured, is chained to the one before it through one event ([`chain`]):
//! a graph replayed beside eager calls, or captured on forked streams, never
//! runs a ce kernel beside another.
//!
//! ## Failures and the watchdog
//!
//! A stream waiting for a peer that never arrives would wait forever. A
//! watchdog thread per communicator ([`watchdog`], decisions in [`watch`])
//! tracks every eager launch with an event; at `Host::timeout()` it reads this
//! rank's flags, names the ranks that never arrived, releases the stream
//! (one write into every eager slot of a value 2³⁰ past the stuck barrier's:
//! CUDA's `GEQ` compares cyclically, `(int32_t)(*addr - value) >= 0`, so that
//! value satisfies every pending wait — `0xFFFF_FFFF` would satisfy none
//! below 2³¹) and breaks the communicator: `status` and every later `launch`
//! return that error. It also releases at once when the host's abort flag
//! rises: the core raises it when the communicator is aborted or breaks and
//! when a peer dies or aborts. **Graph-captured launches are not tracked**: a replayed graph's
//! waits cannot be released by the host (nor told apart from a slow replay);
//! their wait kernels give up on their own at `Host::timeout()` (recording
//! the rank they waited for in the error word, which the watchdog reads at
//! every wake) or when the watchdog raises the abort word on the host's
//! abort. Without kernels a replay whose peer never arrives waits forever.
//!
//! **Known limit, ranks sharing one GPU under MPS:** when a peer is SIGKILLed
//! while a survivor's stream still has a write into the peer's memory queued
//! (a barrier flag or a copy), that write may never complete in the driver.
//! The watchdog still names the rank and breaks the communicator (`status`,
//! and every later `launch`, return the error), but the flag release cannot
//! move a stream stuck on such a write, so a thread in `cuStreamSynchronize`
//! on it does not return. Measured on one H100: 5 of 11 killed-peer runs
//! under MPS, 0 of 2 without MPS (`bench/results/2026-11-25-h100-ce/kill/`).
//! Since the core raises the abort flag as soon as a peer dies (not at the
//! timeout), the watchdog releases before that happens: 9 of 9 killed-peer runs
//! under MPS pass (`bench/results/2026-11-26-h100-stop-flag/`). Ranks on
//! separate GPUs (two H100s, 3 ranks, `bench/results/2026-11-26-h100x2/`):
//! no survivor hung in three runs; in the second, one survivor's error named
//! the watchdog's release instead of the dead rank (`device_error` asked the
//! plugin before the core's record of the dead peer; now the peer comes
//! first), and the third passed with all_gather and with an all_reduce killed
//! inside its reduction kernel.
//!
//! **Ranks sharing one GPU** (processes under MPS): the LL, Simple and
//! point-to-point kernels wait for their peers' blocks, so every rank's
//! blocks must be resident at once. Each rank's grid is its share of one wave
//! (`Kernels::with_share`, the most ranks on any GPU of the communicator,
//! `setup::ranks_per_gpu`). Before, four ranks on one H100 each launched a
//! whole wave and `ce_runs_mid_calls_as_one_simple_kernel` timed out at the
//! watchdog in its 4-rank round (case 2909), at 0804cfe as after it; capping
//! the blocks by hand passed, and so does the share
//! (`bench/results/2026-11-27-devnet/run34`, `run36`, `run37`); the whole
//! device test file then passed on one H100, 21 of 21 (`run38`).
//!
//! `comm_init` decides alike on every rank: two out-of-band exchanges
//! ([`setup`]) so that a rank whose setup failed makes every rank sit the
//! communicator out (`FX_UNSUPPORTED`, naming the rank and why) rather than
//! leave its peers waiting. Without CUDA it is unsupported, never a panic.
//!
//! ## Environment
//!
//! See [`config`]: `FERROCX_CE_PRIORITY` (bid, default 200; 0 disables),
//! `FERROCX_CE_BATCH` (8), `FERROCX_CE_BATCH_BYTES` (512M),
//! `FERROCX_CE_MEMCPY_BATCH` (1), `FERROCX_CE_REDUCE` (1),
//! `FERROCX_CE_ONESHOT_BYTES` (32M), `FERROCX_CE_SCRATCH_BYTES` (32M),
//! `FERROCX_CE_STAGE` (auto), `FERROCX_CE_CHECK_CALLS` (as
//! `FERROCX_CHECK_CALLS`), `FERROCX_CE_LL_BYTES` (1M).
//!
//! ## Tests
//!
//! Everything that decides is sans-IO and unit-tested without a GPU:
//! [`sync`], [`plan`], [`watch`], [`setup`], [`select`], [`config`], and
//! `sim.rs`, which runs the barrier operations and copies of 2 to 8
//! simulated ranks in random interleavings for all five collectives × in and
//! out of place × every root, sequences of mixed collectives with the eager
//! values wrapping around, graphs replayed between eager collectives,
//! mutated programs that must fail, and a killed rank that the watchdog's
//! logic must name and whose survivors its release value must unblock;
//! [`plan`]'s tests run every reduction (1–6 ranks, windows or staged,
//! one- and two-shot, in and out of place) element by element and check that
//! no rank writes what another touches between the barriers.
//! `tests/table.rs` drives `comm_init` through the C table on threads. The
//! CUDA side ([`driver`], [`flags`], [`issue`], [`watchdog`], [`comm`]) is
//! exercised by the core's GPU scenarios (`tests/tests/device.rs`: the copy
//! collective matrix on device windows, the reduction matrix on windows and
//! staged, CUDA graphs replayed, window cycles, a rank killed mid-collective
//! in a copy collective and in a reduction kernel).

pub mod chain;
pub mod comm;
pub mod config;
pub mod direct;
pub mod driver;
pub mod flags;
pub mod issue;
pub mod notes;
pub mod p2p;
pub mod plan;
pub mod select;
pub mod setup;
#[cfg(test)]
mod sim;
pub mod sync;
pub mod watch;
pub mod watchdog;

use ferrocx_sdk::abi::{
    FX_COLL_CAP_CUDA_MEM, FX_COLL_CAP_GRAPHS, FX_COLL_CAP_P2P_SELF, FX_COLL_CAP_WINDOWS,
};
use ferrocx_sdk::collective::{CollDesc, Collective, CommInfo, Oob, P2pDesc, WindowDesc};
use ferrocx_sdk::{Host, PluginResult};
use std::ffi::c_void;

ferrocx_sdk::register_builtin_collective!(Ce);

pub use comm::CeComm;
pub use config::Config;
pub use select::Window;

/// The plugin context.
pub struct Ce {
    host: Host,
    cfg: Config,
}

impl Collective for Ce {
    type Comm = CeComm;
    type Window = Window;
    const NAME: &'static str = "ce";
    const CAPS: u64 =
        FX_COLL_CAP_CUDA_MEM | FX_COLL_CAP_WINDOWS | FX_COLL_CAP_GRAPHS | FX_COLL_CAP_P2P_SELF;

    fn init(host: Host) -> PluginResult<Self> {
        Ok(Ce {
            host,
            cfg: Config::from_host(&host)?,
        })
    }

    fn comm_init(&self, info: &CommInfo, oob: Oob) -> PluginResult<CeComm> {
        CeComm::init(self.host, self.cfg, info, oob)
    }

    fn comm_destroy(&self, comm: CeComm) -> PluginResult<()> {
        comm.destroy()
    }

    fn can_run(&self, comm: &CeComm, coll: &CollDesc<'_, Window>) -> i32 {
        comm.can_run(coll)
    }

    fn describe(&self, comm: &CeComm, coll: &CollDesc<'_, Window>) -> Option<String> {
        comm.describe(coll)
    }

    fn window_register(
        &self,
        comm: &mut CeComm,
        desc: &WindowDesc,
    ) -> PluginResult<Option<Window>> {
        comm.window_register(desc)
    }

    fn window_deregister(&self, comm: &mut CeComm, win: Window) -> PluginResult<()> {
        comm.window_deregister(win)
    }

    unsafe fn launch(
        &self,
        comm: &mut CeComm,
        coll: &CollDesc<'_, Window>,
        stream: *mut c_void,
    ) -> PluginResult<()> {
        // SAFETY: the same contract, passed on.
        unsafe { comm.launch(coll, stream) }
    }

    fn p2p_can_run(&self, comm: &CeComm, desc: &P2pDesc) -> i32 {
        comm.p2p_can_run(desc)
    }

    unsafe fn p2p_launch(
        &self,
        comm: &mut CeComm,
        desc: &P2pDesc,
        stream: *mut c_void,
    ) -> PluginResult<()> {
        // SAFETY: the same contract, passed on.
        unsafe { comm.p2p_launch(desc, stream) }
    }

    fn launch_bounded(&self, comm: &CeComm) -> bool {
        comm.launch_bounded()
    }

    fn status(&self, comm: &CeComm) -> PluginResult<()> {
        comm.status()
    }
}
