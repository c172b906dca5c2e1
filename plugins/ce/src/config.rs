//! Tunables of the ce plugin, read once at `init` through `Host::env`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_CE_PRIORITY` | `200` | what `can_run` answers for a collective ce can run (0 = never; the core's own algorithms bid 100, ties go to the core) |
//! | `FERROCX_CE_BATCH` | `8` | copies per batch when a collective is split by intra-batch barriers (≥ 1) |
//! | `FERROCX_CE_BATCH_BYTES` | `512M` | a collective whose busiest rank copies more than `FERROCX_CE_BATCH` blocks and at least this many bytes is split into batches of `FERROCX_CE_BATCH` copies with a barrier between batches |
//! | `FERROCX_CE_MEMCPY_BATCH` | `1` | `1`: queue a batch's copies with one `cuMemcpyBatchAsync` where the driver has it (≥ 12.8) and the stream allows it; `0`: always one `cuMemcpyAsync` per copy |
//! | `FERROCX_CE_REDUCE` | `1` | `1`: also run all_reduce and reduce_scatter on windows (reduction kernels read the peers' windows, copy engines spread the results); `0`: copy collectives only |
//! | `FERROCX_CE_ONESHOT_BYTES` | `32M` | at 2 ranks, an all_reduce on windows up to this many bytes (and the scratch) runs one-shot (every rank folds every rank's whole input: it reads n−1 inputs, two-shot reads 2(n−1)/n of one, so at n ranks the limit is this × 2/n), larger ones two-shot; measured crossover on two H100s: 32–64 MiB. Without windows all_reduce is staged, always one-shot |
//! | `FERROCX_CE_CHECK_CALLS` | `FERROCX_CHECK_CALLS` (`1`) | `1`: each rank writes a note of every eager call (its number, collective, type, operator, count, root) into its peers' flag buffers with its ready flag, and the watchdog compares them once the call completed: a mismatch breaks the communicator with the core's "mismatched calls" error, both calls named, on every rank (`notes.rs`); `0`: not checked |
//! | `FERROCX_CE_STAGE` | `auto` | stage calls whose buffers are not in windows (and alltoall while it fits) through the scratch: `1` yes, `0` no, `auto` unless ce's check alone is off (`FERROCX_CE_CHECK_CALLS=0` with `FERROCX_CHECK_CALLS` on): the core's path these calls would otherwise take checks them |
//! | `FERROCX_CE_LL_BYTES` | `1M` | all_reduce and reduce_scatter (not avg), all_gather, alltoall, broadcast, gather and scatter whose block is at most this many bytes run as one LL kernel ([`ferrocx_sdk::kernels::ll`]: the data goes into the peers' mapped memory with the flag in it; no barrier, no staging, no windows needed); at most 1 MiB; it sizes the LL areas (2 × nranks × 2 × this bytes of device memory per rank, in the flag buffer); `0`: never. Every rank must set the same value |
//! | `FERROCX_CE_LL128_BYTES` | `auto` | the same collectives whose block is above the first bound and up to the second run as one LL128 kernel ([`ferrocx_sdk::kernels::ll128`]: the LL kernel's protocol in 128-byte lines of 120 data bytes and an 8-byte flag, so 1.07× the bytes instead of 2×), before the LL kernel's limit is asked: `auto` per collective and rank count (`select::LL128_TABLE`), a number N for blocks above `FERROCX_CE_LL_BYTES` up to N (at most 4 MiB), `0` never. Only where every rank has a GPU of its own and every pair of them has native peer atomics (NVLink; PCIe peers lack them, and a peer GPU hidden by `CUDA_VISIBLE_DEVICES` cannot be asked): the kernel relies on NVLink carrying a warp's 128-byte store whole, as NCCL's LL128 does. It sizes the LL128 areas (2 × nranks × 128/120 × the largest block, in the flag buffer, only where every rank has a GPU of its own). Every rank must set the same value; a rank whose GPU lacks NVLink to a peer turns the kernel off for the communicator |
//! | `FERROCX_CE_SIMPLE_BYTES` | `auto` | the same collectives whose block is above the LL kernel's limit and at most this many bytes (all_reduce: block × nranks ≤ 2 × this, as one-shot; above 2 ranks, beyond that, two-shot while block / nranks ≤ this; `auto`: each collective's measured limit at 2 ranks and above, `select::SIMPLE_TABLE`, two-shot all_reduce to `select::TWO_SHOT_AUTO_BYTES`) run as one Simple kernel ([`ferrocx_sdk::kernels::simple`]: chunks through slot rings in the peers' mapped memory, a flag per chunk; no barrier, no staging, no windows needed); `0`: never. Every rank must set the same value |
//! | `FERROCX_CE_SIMPLE_SLOT` | `auto` | bytes of one slot of the Simple kernel's rings (and the point-to-point kernel's), the largest chunk (a multiple of 16, 32 B–16 MiB; how the Simple kernel cuts segments into chunks of at most a slot: `FERROCX_CE_SIMPLE_CHUNK`); `auto`: 128 KiB for the Simple kernel at 2 ranks, 256 KiB at 3 and 4, 64 KiB above and for the point-to-point kernel. The rings take nranks × 128 × this bytes of device memory per rank (in the flag buffer, only where the kernel may run). Every rank must set the same value |
//! | `FERROCX_CE_SIMPLE_CHUNK` | `auto` | the Simple kernel's largest chunk (a multiple of 16, at least 16 bytes; a value above the slot means the slot; not the point-to-point kernel's): a segment is cut into about 64 chunks of at most this many bytes (at least 4 KiB where the slot and this value allow); `auto`: at most 64 KiB below 256 MiB segments (a broadcast's below 16 MiB), whole slots above; at 2 ranks whole slots from 16 MiB segments (not the direct modes: `simple::TWO_RANK_WHOLE_SLOT_SEG`); a chain's (broadcast above 2 ranks) from 16 MiB about 128 chunks, within the slot ([`ferrocx_sdk::kernels::simple::chunk_bytes`]). Every rank must set the same value |
//! | `FERROCX_CE_P2P_BYTES` | `16M` | device sends and receives of at most this many bytes (each decided alone, by its size, so both ends agree) run as ce's point-to-point kernel ([`ferrocx_sdk::kernels::p2p`]: the Simple kernel's rings, a region of their own, every chunk headed by its message's size, which the receive checks) on the caller's stream, one kernel per group (more where a group has several messages to one peer the same way); larger ones, and any on a stream being captured, take the core's path. A send may finish before its receive is posted while the peer's ring has room (128 slots: 8 MiB of 64 KiB slots; a larger send waits for its receive); `0`: never. The rings take nranks × 128 × `FERROCX_CE_SIMPLE_SLOT` bytes of device memory per rank. A send through ce must meet a receive of device memory of exactly its size (else both ranks fail with the core's mismatch error). Every rank must set the same value |
//! | `FERROCX_CE_P2P_LL_BYTES` | `64K` | of those, messages of at most this many bytes (again by size alone) travel as LL lines (8 data bytes and their flag per 16-byte line, polled by the receiver: no fence, no head word per chunk), larger ones as chunks; at most 16 MiB. Each rank's line rings hold two of the largest (nranks × 4 × this bytes of device memory per rank). A send and a receive on either side of this limit are a size mismatch like any other. `0`: always chunks. Every rank must set the same value |
//! | `FERROCX_CE_SIMPLE_BLOCKS` | `auto` | most sending blocks of one Simple kernel (as many receive); fewer where a call has fewer chunks or the GPU holds fewer at once; `auto`: 128 for reduce_scatter, all_gather and alltoall above 2 ranks (not in the direct modes), 64 otherwise (`select::simple_blocks`). This rank's alone (chunks do not depend on it) |
//! | `FERROCX_CE_SIMPLE_SPREAD` | `1` | above 2 ranks, out of place: a Simple kernel's sending blocks take one (chunk, peer) pair each, a chunk's pairs on consecutive blocks (a gather's receiving blocks too), so every peer's link is busy at once; `0`: a block sends each chunk to every peer in turn. This rank's alone |
//! | `FERROCX_CE_DIRECT_BYTES` | `auto` | all_reduce (not avg), all_gather and broadcast on windows whose block is above the LL kernel's limit and at most this many bytes run as the Simple kernel's direct modes (the data read from the peers' input windows or written into their output windows, two empty chunks per pair as barriers; an all_reduce also needs the block to fit the scratch, which an in-place call folds into): `auto` per collective and rank count (`select::DIRECT_TABLE`: at 2 ranks all_gather above 4 MiB to 64 MiB; no broadcast, no all_reduce), a number for every collective from the LL limit up, `0` never. Agreed like `FERROCX_CE_ONESHOT_BYTES` (a rank that differs turns it off, with a warning) |
//! | `FERROCX_CE_SCRATCH_BYTES` | `32M` | per rank, device memory ce allocates beside its flags and every peer maps, for staged collectives: calls whose buffers are not in windows (and alltoall in place, and small in-place all_reduces) copy their input there first and the ranks read each other's scratch; a call needing more than this stays with the core (0: no staging) |
//!
//! `FERROCX_CE_PRIORITY`, `FERROCX_CE_BATCH` and `FERROCX_CE_BATCH_BYTES`
//! decide what every rank does (its bid, how many barriers a collective
//! has), and `FERROCX_CE_LL_BYTES`, `FERROCX_CE_LL128_BYTES`, `FERROCX_CE_SIMPLE_BYTES`,
//! `FERROCX_CE_P2P_BYTES`, `FERROCX_CE_P2P_LL_BYTES`,
//! `FERROCX_CE_SIMPLE_SLOT` and `FERROCX_CE_SIMPLE_CHUNK` the flag buffers' layout and the kernels' routes, so `comm_init`
//! checks that every rank read the same values and sits the communicator
//! out, naming the variable, when they differ.
//! `FERROCX_CE_REDUCE` and `FERROCX_CE_ONESHOT_BYTES` are agreed the same
//! way, but a disagreement only turns the reductions off (with a warning).

use ferrocx_sdk::abi::FX_COLL_CORE_PRIORITY;
use ferrocx_sdk::{env, Host, PluginError, PluginResult};

/// Default bid: above the core's.
pub const DEFAULT_PRIORITY: i32 = 2 * FX_COLL_CORE_PRIORITY;
/// Largest block the LL kernel can take: what one LL area holds.
pub const LL_MAX_BYTES: usize = 1 << 20;
/// Default `FERROCX_CE_LL_BYTES`.
pub const DEFAULT_LL_BYTES: usize = 1 << 20;
/// `FERROCX_CE_SIMPLE_BYTES=auto` (the default): each collective's measured
/// limit (`select::SIMPLE_TABLE`).
pub const SIMPLE_AUTO: usize = usize::MAX;
/// `FERROCX_CE_DIRECT_BYTES=auto` (the default): each collective's measured
/// range (`select::DIRECT_TABLE`).
pub const DIRECT_AUTO: usize = usize::MAX;
/// `FERROCX_CE_SIMPLE_BLOCKS=auto` (the default): per collective and rank
/// count (`select::simple_blocks`).
pub const SIMPLE_BLOCKS_AUTO: usize = usize::MAX;
/// `FERROCX_CE_LL128_BYTES=auto` (the default): each collective's measured
/// range (`select::LL128_TABLE`).
pub const LL128_AUTO: usize = usize::MAX;
/// Largest block `FERROCX_CE_LL128_BYTES` may name (its areas take 2 ×
/// nranks × 128/120 × this).
pub const LL128_MAX_BYTES: usize = 4 << 20;
/// Default `FERROCX_CE_P2P_BYTES`. On 2 H100s the kernel took 8 MiB in 48
/// µs and 16 MiB in 76 against the core's 107 and 114, and 32 MiB in 136–138
/// against 134 (`bench/results/2026-11-27-x2-checks/run2`). A send up to
/// a ring's worth (128 slots: 8 MiB of 64 KiB slots) finishes before its
/// receive is posted; a larger one waits for it, as on NCCL (such sends and
/// receives must be grouped when both ranks send first).
pub const DEFAULT_P2P_BYTES: usize = 16 << 20;
/// Default `FERROCX_CE_P2P_LL_BYTES`. On two H200s (BENCH.md, sessions 11
/// and 12) lines took 2–4 µs off chunks from 128 KiB to 512 KiB; below 128
/// KiB both are bound by the host's cost per call. On two H100s
/// (`bench/results/2026-11-27-session14/run2`, µs, 512K / 1M / 2M limits)
/// 1 MiB took 21.3 / 18.5 / 18.3 and 2 MiB 24.6 / 26.3 / 25.2: lines pay at
/// 1 MiB, not at 2. Once the chunks' polls acquire (no fence per chunk), on
/// two H200s (`bench/results/2026-11-27-session15/run6`, `run7`, µs, lines /
/// chunks, three and two alternations): 8 B–64 KiB even (9.3–11.3 both),
/// 128 KiB 10.8–11.0 / 10.5, 256 KiB 12.3–12.9 / 11.4–11.7, 512 KiB 14.4–14.5
/// / 12.2–12.6, 1 MiB 18.1–18.6 / 14.6–14.8 — so lines to 64 KiB only.
pub const DEFAULT_P2P_LL_BYTES: usize = 64 << 10;
/// Largest `FERROCX_CE_P2P_LL_BYTES` (its rings take 4 × this per peer).
pub const P2P_LL_MAX_BYTES: usize = 16 << 20;
/// `FERROCX_CE_SIMPLE_CHUNK=auto` (the default): the SDK's
/// `simple::chunk_bytes` rule.
pub const SIMPLE_CHUNK_AUTO: usize = usize::MAX;
/// Largest `FERROCX_CE_SIMPLE_SLOT`.
pub const SIMPLE_SLOT_MAX: usize = 16 << 20;
/// `FERROCX_CE_SIMPLE_SLOT=auto` (the default): [`AUTO_SLOT_TWO_RANKS`] for
/// the Simple kernel at 2 ranks, [`AUTO_SLOT_FOUR_RANKS`] at 3 and 4, the
/// SDK's `DEFAULT_SLOT` (64 KiB) above and for the point-to-point kernel.
pub const SIMPLE_SLOT_AUTO: usize = usize::MAX;
/// The Simple kernel's slot at 2 ranks under `auto`: whole-slot chunks of
/// segments from `simple::LARGE_SEG` were 10–12 % faster at 256 MiB–1 GiB
/// on 2 H100s (`bench/results/2026-11-27-x2-checks/run6`); since session 27
/// from `simple::TWO_RANK_WHOLE_SLOT_SEG`.
pub const AUTO_SLOT_TWO_RANKS: usize = 128 << 10;
/// The Simple kernel's slot at 3 and 4 ranks under `auto`: on 4 H200s
/// reduce_scatter of 1 GiB (256 MiB blocks, whole-slot chunks) took 2628 µs
/// with 256 KiB slots against 2934 with 64 KiB (NCCL 2433); smaller blocks
/// and all_reduce, broadcast at 1–256 MiB moved within the spread
/// (`bench/results/2026-11-27-session13/run2`, `t/`). The rings are 128 slots
/// per peer: 32 MiB each. Above 4 ranks not measured: 64 KiB.
pub const AUTO_SLOT_FOUR_RANKS: usize = 256 << 10;
/// Default copies per batch (NCCL's intra-batch sync frequency).
pub const DEFAULT_BATCH: usize = 8;
/// Default size from which a collective is split into batches (NCCL's threshold).
pub const DEFAULT_BATCH_BYTES: usize = 512 << 20;
/// Default largest all_reduce run one-shot at 2 ranks.
pub const DEFAULT_ONESHOT_BYTES: usize = 32 << 20;
/// Default scratch for staged collectives.
pub const DEFAULT_SCRATCH_BYTES: usize = 32 << 20;

/// Effective configuration of one plugin context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// `FERROCX_CE_PRIORITY`: the bid for collectives ce can run (0 = never).
    pub priority: i32,
    /// `FERROCX_CE_BATCH`: copies per batch when a collective is split.
    pub batch: usize,
    /// `FERROCX_CE_BATCH_BYTES`: bytes from which a collective is split.
    pub batch_bytes: usize,
    /// `FERROCX_CE_MEMCPY_BATCH`: use `cuMemcpyBatchAsync` where possible.
    pub memcpy_batch: bool,
    /// `FERROCX_CE_REDUCE`: run all_reduce and reduce_scatter too.
    pub reduce: bool,
    /// `FERROCX_CE_ONESHOT_BYTES`: the largest one-shot all_reduce at 2 ranks.
    pub one_shot_bytes: usize,
    /// `FERROCX_CE_SCRATCH_BYTES`: scratch for staged collectives.
    pub scratch_bytes: usize,
    /// `FERROCX_CE_STAGE` (`auto`: staging only where it costs no call check).
    pub stage: bool,
    /// `FERROCX_CE_LL_BYTES`: the largest block run by the LL kernel.
    pub ll_bytes: usize,
    /// `FERROCX_CE_LL128_BYTES`: the largest block run by the LL128 kernel
    /// ([`LL128_AUTO`]: per collective).
    pub ll128_bytes: usize,
    /// `FERROCX_CE_SIMPLE_BYTES`: the largest block run by the Simple kernel.
    pub simple_bytes: usize,
    /// `FERROCX_CE_SIMPLE_SLOT`: bytes per slot of its rings.
    pub simple_slot: usize,
    /// `FERROCX_CE_SIMPLE_CHUNK`: the Simple kernel's largest chunk
    /// ([`SIMPLE_CHUNK_AUTO`]: by segment size and mode).
    pub simple_chunk: usize,
    /// `FERROCX_CE_DIRECT_BYTES`: the largest block run by the Simple
    /// kernel's direct modes ([`DIRECT_AUTO`]: per collective).
    pub direct_bytes: usize,
    /// `FERROCX_CE_SIMPLE_BLOCKS`: most sending blocks of a Simple kernel
    /// ([`SIMPLE_BLOCKS_AUTO`]: per collective).
    pub simple_blocks: usize,
    /// `FERROCX_CE_SIMPLE_SPREAD`: above 2 ranks, a Simple kernel's blocks
    /// take one (chunk, peer) pair each ([`ferrocx_sdk::kernels::simple::SimpleArgs::spread`]).
    pub simple_spread: bool,
    /// `FERROCX_CE_P2P_BYTES`: the largest device send/receive run by the
    /// point-to-point kernel.
    pub p2p_bytes: usize,
    /// `FERROCX_CE_P2P_LL_BYTES`: the largest of those sent as LL lines.
    pub p2p_ll_bytes: usize,
    /// `FERROCX_CE_CHECK_CALLS`: notes on every eager call.
    pub check_calls: bool,
    /// `stage` holds only if ce's check ends up on (auto with the core's check on).
    pub stage_needs_check: bool,
    /// `FERROCX_CE_GRAPH_KERNELS`: calls captured into a CUDA graph may run
    /// the exchange kernels (their state lives on the device), every ce
    /// launch of the communicator then joined in one chain of events across
    /// streams and graphs (`chain.rs`).
    pub graph_kernels: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            priority: DEFAULT_PRIORITY,
            batch: DEFAULT_BATCH,
            batch_bytes: DEFAULT_BATCH_BYTES,
            memcpy_batch: true,
            reduce: true,
            one_shot_bytes: DEFAULT_ONESHOT_BYTES,
            scratch_bytes: DEFAULT_SCRATCH_BYTES,
            stage: true,
            ll_bytes: DEFAULT_LL_BYTES,
            ll128_bytes: LL128_AUTO,
            simple_bytes: SIMPLE_AUTO,
            simple_slot: SIMPLE_SLOT_AUTO,
            simple_chunk: SIMPLE_CHUNK_AUTO,
            direct_bytes: DIRECT_AUTO,
            simple_blocks: SIMPLE_BLOCKS_AUTO,
            simple_spread: true,
            p2p_bytes: DEFAULT_P2P_BYTES,
            p2p_ll_bytes: DEFAULT_P2P_LL_BYTES,
            check_calls: true,
            stage_needs_check: true,
            graph_kernels: true,
        }
    }
}

impl Config {
    /// Bytes per slot of the Simple kernel's rings at `nranks` ranks, 0 where
    /// it never runs (`FERROCX_CE_SIMPLE_BYTES=0`, reductions off — the kernel
    /// lives in their modules — or more ranks than it takes).
    pub fn simple_rings(&self, nranks: usize) -> usize {
        let runs =
            self.simple_bytes > 0 && self.reduce && nranks <= ferrocx_sdk::kernels::ll::MAX_RANKS;
        match (runs, self.simple_slot) {
            (false, _) => 0,
            (true, SIMPLE_SLOT_AUTO) if nranks <= 2 => AUTO_SLOT_TWO_RANKS,
            (true, SIMPLE_SLOT_AUTO) if nranks <= 4 => AUTO_SLOT_FOUR_RANKS,
            (true, SIMPLE_SLOT_AUTO) => ferrocx_sdk::kernels::simple::DEFAULT_SLOT,
            (true, slot) => slot,
        }
    }

    /// The Simple kernel's chunk for a segment of `seg` bytes of `mode` in
    /// slots of `slot` bytes at `nranks` ranks: the SDK's rule, or at most
    /// `FERROCX_CE_SIMPLE_CHUNK`.
    pub fn simple_chunk_of(&self, seg: usize, slot: usize, mode: i32, nranks: usize) -> usize {
        use ferrocx_sdk::kernels::simple;
        match self.simple_chunk {
            SIMPLE_CHUNK_AUTO => simple::chunk_bytes(seg, slot, mode, nranks),
            most => simple::chunk_within(seg, most.min(slot)),
        }
    }

    /// Bytes per slot of the point-to-point kernel's rings at `nranks`
    /// ranks, 0 where it never runs (`FERROCX_CE_P2P_BYTES=0`, reductions
    /// off — the kernel lives in a reduction module — a single rank, or more
    /// ranks than it takes).
    pub fn p2p_rings(&self, nranks: usize) -> usize {
        let runs = self.p2p_bytes > 0
            && self.reduce
            && (2..=ferrocx_sdk::kernels::ll::MAX_RANKS).contains(&nranks);
        match (runs, self.simple_slot) {
            (false, _) => 0,
            (true, SIMPLE_SLOT_AUTO) => ferrocx_sdk::kernels::simple::DEFAULT_SLOT,
            (true, slot) => slot,
        }
    }

    /// The largest message the point-to-point kernel sends as LL lines at
    /// `nranks` ranks (0: none, or no point-to-point kernel): what sizes its
    /// line rings.
    pub fn p2p_lines_max(&self, nranks: usize) -> usize {
        if self.p2p_rings(nranks) == 0 {
            return 0;
        }
        self.p2p_lines_limit()
    }

    /// The line limit as far as the variables alone say (`FERROCX_CE_P2P_LL_BYTES`
    /// within `FERROCX_CE_P2P_BYTES`; 0 with the kernel off): what the ranks agree on.
    pub fn p2p_lines_limit(&self) -> usize {
        if self.p2p_bytes == 0 {
            0
        } else {
            self.p2p_ll_bytes.min(self.p2p_bytes)
        }
    }

    /// Read the variables through the core's environment view.
    pub fn from_host(host: &Host) -> PluginResult<Self> {
        Self::from_lookup(|name| host.env(name))
    }

    /// Read the variables through `lookup` (unset or blank → default) and check them.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> PluginResult<Self> {
        let d = Config::default();
        let priority = env::priority(&lookup, "FERROCX_CE_PRIORITY", d.priority)?;
        let batch = env::unsigned(&lookup, "FERROCX_CE_BATCH", d.batch)?;
        if batch == 0 {
            return Err(PluginError::invalid(
                "FERROCX_CE_BATCH=0: a batch holds at least one copy",
            ));
        }
        // One variable turns every call check off: ce's follows the core's.
        let core_checks = env::call_check(&lookup)?.compares();
        let check_calls = env::boolean(&lookup, "FERROCX_CE_CHECK_CALLS", core_checks)?;
        let stage_auto = match lookup("FERROCX_CE_STAGE") {
            None => true,
            Some(v) => v.trim().is_empty() || v.trim().eq_ignore_ascii_case("auto"),
        };
        let ll_bytes = env::unsigned(&lookup, "FERROCX_CE_LL_BYTES", d.ll_bytes)?;
        if ll_bytes > LL_MAX_BYTES {
            return Err(PluginError::invalid(format!(
                "FERROCX_CE_LL_BYTES={ll_bytes}: at most {LL_MAX_BYTES} (the LL areas' size)"
            )));
        }
        let ll128_bytes = match lookup("FERROCX_CE_LL128_BYTES") {
            Some(v) if v.trim().eq_ignore_ascii_case("auto") => LL128_AUTO,
            _ => env::unsigned(&lookup, "FERROCX_CE_LL128_BYTES", d.ll128_bytes)?,
        };
        if ll128_bytes != LL128_AUTO && ll128_bytes > LL128_MAX_BYTES {
            return Err(PluginError::invalid(format!(
                "FERROCX_CE_LL128_BYTES={ll128_bytes}: at most {LL128_MAX_BYTES} (or auto)"
            )));
        }
        let simple_slot = match lookup("FERROCX_CE_SIMPLE_SLOT") {
            Some(v) if v.trim().eq_ignore_ascii_case("auto") => SIMPLE_SLOT_AUTO,
            _ => env::unsigned(&lookup, "FERROCX_CE_SIMPLE_SLOT", d.simple_slot)?,
        };
        // The point-to-point kernel needs room for a chunk's header.
        if simple_slot != SIMPLE_SLOT_AUTO
            && (simple_slot < 32
                || !simple_slot.is_multiple_of(16)
                || simple_slot > SIMPLE_SLOT_MAX)
        {
            return Err(PluginError::invalid(format!(
                "FERROCX_CE_SIMPLE_SLOT={simple_slot}: a multiple of 16 bytes, from 32 to {SIMPLE_SLOT_MAX}"
            )));
        }
        let simple_chunk = match lookup("FERROCX_CE_SIMPLE_CHUNK") {
            Some(v) if v.trim().eq_ignore_ascii_case("auto") => SIMPLE_CHUNK_AUTO,
            _ => env::unsigned(&lookup, "FERROCX_CE_SIMPLE_CHUNK", d.simple_chunk)?,
        };
        if simple_chunk != SIMPLE_CHUNK_AUTO
            && (simple_chunk == 0 || !simple_chunk.is_multiple_of(16))
        {
            return Err(PluginError::invalid(format!(
                "FERROCX_CE_SIMPLE_CHUNK={simple_chunk}: a multiple of 16 bytes, at least 16 (or auto)"
            )));
        }
        let p2p_ll_bytes = env::unsigned(&lookup, "FERROCX_CE_P2P_LL_BYTES", d.p2p_ll_bytes)?;
        if p2p_ll_bytes > P2P_LL_MAX_BYTES {
            return Err(PluginError::invalid(format!(
                "FERROCX_CE_P2P_LL_BYTES={p2p_ll_bytes}: at most {P2P_LL_MAX_BYTES} (its line rings take 4 × this per peer)"
            )));
        }
        let simple_blocks = match lookup("FERROCX_CE_SIMPLE_BLOCKS") {
            Some(v) if v.trim().eq_ignore_ascii_case("auto") => SIMPLE_BLOCKS_AUTO,
            _ => env::unsigned(&lookup, "FERROCX_CE_SIMPLE_BLOCKS", d.simple_blocks)?,
        };
        if simple_blocks == 0 {
            return Err(PluginError::invalid(
                "FERROCX_CE_SIMPLE_BLOCKS=0: a kernel has at least one sending block",
            ));
        }
        Ok(Config {
            priority,
            ll_bytes,
            ll128_bytes,
            simple_bytes: match lookup("FERROCX_CE_SIMPLE_BYTES") {
                Some(v) if v.trim().eq_ignore_ascii_case("auto") => SIMPLE_AUTO,
                _ => env::unsigned(&lookup, "FERROCX_CE_SIMPLE_BYTES", d.simple_bytes)?,
            },
            simple_slot,
            simple_chunk,
            direct_bytes: match lookup("FERROCX_CE_DIRECT_BYTES") {
                Some(v) if v.trim().eq_ignore_ascii_case("auto") => DIRECT_AUTO,
                _ => env::unsigned(&lookup, "FERROCX_CE_DIRECT_BYTES", d.direct_bytes)?,
            },
            simple_blocks,
            simple_spread: env::boolean(&lookup, "FERROCX_CE_SIMPLE_SPREAD", d.simple_spread)?,
            p2p_bytes: env::unsigned(&lookup, "FERROCX_CE_P2P_BYTES", d.p2p_bytes)?,
            p2p_ll_bytes,
            batch,
            batch_bytes: env::unsigned(&lookup, "FERROCX_CE_BATCH_BYTES", d.batch_bytes)?,
            memcpy_batch: env::boolean(&lookup, "FERROCX_CE_MEMCPY_BATCH", d.memcpy_batch)?,
            reduce: env::boolean(&lookup, "FERROCX_CE_REDUCE", d.reduce)?,
            one_shot_bytes: env::unsigned(&lookup, "FERROCX_CE_ONESHOT_BYTES", d.one_shot_bytes)?,
            scratch_bytes: env::unsigned(&lookup, "FERROCX_CE_SCRATCH_BYTES", d.scratch_bytes)?,
            stage: if stage_auto {
                check_calls || !core_checks
            } else {
                env::boolean(&lookup, "FERROCX_CE_STAGE", false)?
            },
            stage_needs_check: stage_auto && core_checks,
            check_calls,
            graph_kernels: env::boolean(&lookup, "FERROCX_CE_GRAPH_KERNELS", d.graph_kernels)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(v: &[(&str, &str)]) -> PluginResult<Config> {
        Config::from_lookup(ferrocx_sdk::testing::vars(v))
    }

    #[test]
    fn defaults_names_and_limits() {
        let d = with(&[]).unwrap();
        assert_eq!(d, Config::default());
        assert_eq!(d.simple_blocks, SIMPLE_BLOCKS_AUTO);
        assert_eq!(
            with(&[("FERROCX_CE_SIMPLE_BLOCKS", "auto")])
                .unwrap()
                .simple_blocks,
            SIMPLE_BLOCKS_AUTO
        );
        assert!(d.priority > FX_COLL_CORE_PRIORITY);
        assert_eq!((d.batch, d.batch_bytes), (8, 512 << 20));
        let c = with(&[
            ("FERROCX_CE_PRIORITY", "0"),
            ("FERROCX_CE_BATCH", "3"),
            ("FERROCX_CE_BATCH_BYTES", "1M"),
            ("FERROCX_CE_MEMCPY_BATCH", "0"),
            ("FERROCX_CE_REDUCE", "0"),
            ("FERROCX_CE_ONESHOT_BYTES", "1M"),
            ("FERROCX_CE_SCRATCH_BYTES", "0"),
            ("FERROCX_CE_STAGE", "1"),
            ("FERROCX_CE_CHECK_CALLS", "1"),
            ("FERROCX_CE_LL_BYTES", "4K"),
            ("FERROCX_CE_LL128_BYTES", "2M"),
            ("FERROCX_CE_SIMPLE_BYTES", "8M"),
            ("FERROCX_CE_SIMPLE_SLOT", "4K"),
            ("FERROCX_CE_SIMPLE_CHUNK", "1K"),
            ("FERROCX_CE_SIMPLE_BLOCKS", "32"),
            ("FERROCX_CE_SIMPLE_SPREAD", "0"),
            ("FERROCX_CE_P2P_BYTES", "1M"),
            ("FERROCX_CE_P2P_LL_BYTES", "64K"),
            ("FERROCX_CE_DIRECT_BYTES", "2M"),
            ("FERROCX_CE_GRAPH_KERNELS", "0"),
        ])
        .unwrap();
        assert_eq!(
            c,
            Config {
                priority: 0,
                batch: 3,
                batch_bytes: 1 << 20,
                memcpy_batch: false,
                reduce: false,
                one_shot_bytes: 1 << 20,
                scratch_bytes: 0,
                stage: true,
                ll_bytes: 4096,
                ll128_bytes: 2 << 20,
                simple_bytes: 8 << 20,
                simple_slot: 4096,
                simple_chunk: 1024,
                direct_bytes: 2 << 20,
                simple_blocks: 32,
                simple_spread: false,
                p2p_bytes: 1 << 20,
                p2p_ll_bytes: 64 << 10,
                check_calls: true,
                stage_needs_check: false,
                graph_kernels: false,
            }
        );
        // The chunk: the SDK's rule under auto, else at most the knob and the slot.
        use ferrocx_sdk::kernels::simple::{self, MODE_CHAIN, TWO_RANK_WHOLE_SLOT_SEG};
        // The SDK's rule as it stands above 2 ranks (no 2-rank case).
        let chunk_bytes = |seg, slot, mode| simple::chunk_bytes(seg, slot, mode, 4);
        let fold = ferrocx_sdk::kernels::ll::MODE_FOLD;
        assert_eq!(d.simple_chunk, SIMPLE_CHUNK_AUTO);
        for (seg, slot) in [
            (64 << 20, 256 << 10),
            (1 << 30, 256 << 10),
            (1 << 20, 64 << 10),
        ] {
            assert_eq!(
                d.simple_chunk_of(seg, slot, fold, 4),
                chunk_bytes(seg, slot, fold)
            );
        }
        // auto at 2 ranks: whole slots from TWO_RANK_WHOLE_SLOT_SEG in the ring modes.
        let two = AUTO_SLOT_TWO_RANKS;
        assert_eq!(
            d.simple_chunk_of(TWO_RANK_WHOLE_SLOT_SEG, two, fold, 2),
            two
        );
        assert_eq!(
            d.simple_chunk_of(TWO_RANK_WHOLE_SLOT_SEG - 16, two, fold, 2),
            chunk_bytes(TWO_RANK_WHOLE_SLOT_SEG - 16, two, fold)
        );
        let direct = simple::MODE_DIRECT_GATHER;
        assert_eq!(
            d.simple_chunk_of(64 << 20, two, direct, 2),
            chunk_bytes(64 << 20, two, direct)
        );
        assert_eq!(
            d.simple_chunk_of(64 << 20, 256 << 10, fold, 4),
            chunk_bytes(64 << 20, 256 << 10, fold)
        );
        let c128 = with(&[("FERROCX_CE_SIMPLE_CHUNK", "128K")]).unwrap();
        assert_eq!(
            c128.simple_chunk_of(64 << 20, 256 << 10, MODE_CHAIN, 4),
            128 << 10
        );
        assert_eq!(c128.simple_chunk_of(1 << 30, 256 << 10, fold, 2), 128 << 10);
        assert_eq!(
            c128.simple_chunk_of(64 << 20, 64 << 10, fold, 2),
            64 << 10,
            "within the slot"
        );
        assert_eq!(
            c128.simple_chunk_of(1 << 20, 256 << 10, fold, 4),
            simple::MIN_CHUNK.max((1 << 20) / simple::TARGET_BLOCKS)
        );
        for bad in ["0", "100", "7"] {
            let e = with(&[("FERROCX_CE_SIMPLE_CHUNK", bad)]).unwrap_err();
            assert!(e.to_string().contains("FERROCX_CE_SIMPLE_CHUNK"), "{e}");
        }
        assert_eq!(
            with(&[("FERROCX_CE_SIMPLE_CHUNK", "auto")])
                .unwrap()
                .simple_chunk,
            SIMPLE_CHUNK_AUTO
        );
        // auto: staging unless ce's check alone is off (the core's path checks).
        assert!(with(&[]).unwrap().stage && with(&[]).unwrap().check_calls);
        // Rings only where the Simple kernel can run.
        let d = with(&[]).unwrap();
        let small = ferrocx_sdk::kernels::simple::DEFAULT_SLOT;
        // auto: larger slots for the Simple kernel at 2 to 4 ranks only.
        assert_eq!(d.simple_slot, SIMPLE_SLOT_AUTO);
        assert_eq!(d.simple_rings(2), AUTO_SLOT_TWO_RANKS);
        assert_eq!(d.simple_rings(3), AUTO_SLOT_FOUR_RANKS);
        assert_eq!(d.simple_rings(4), AUTO_SLOT_FOUR_RANKS);
        assert_eq!(d.simple_rings(5), small);
        assert_eq!(d.simple_rings(17), 0, "more ranks than the kernel takes");
        let set = with(&[("FERROCX_CE_SIMPLE_SLOT", "1040")]).unwrap();
        assert_eq!((set.simple_rings(2), set.simple_rings(4)), (1040, 1040));
        assert_eq!(set.p2p_rings(2), 1040);
        let auto = with(&[("FERROCX_CE_SIMPLE_SLOT", " auto ")]).unwrap();
        assert_eq!(auto.simple_slot, SIMPLE_SLOT_AUTO);
        assert_eq!(
            with(&[("FERROCX_CE_REDUCE", "0")]).unwrap().simple_rings(2),
            0
        );
        assert_eq!(
            with(&[("FERROCX_CE_SIMPLE_BYTES", "0")])
                .unwrap()
                .simple_rings(2),
            0
        );
        // The point-to-point rings: on by default, from 2 ranks to 16.
        assert_eq!(d.p2p_rings(2), small);
        assert_eq!(d.p2p_rings(1), 0, "no peer to send to");
        assert_eq!(d.p2p_rings(17), 0);
        assert_eq!(
            with(&[("FERROCX_CE_P2P_BYTES", "0")]).unwrap().p2p_rings(2),
            0
        );
        assert_eq!(
            with(&[("FERROCX_CE_SIMPLE_BYTES", "0")])
                .unwrap()
                .p2p_rings(2),
            small,
            "independent of the Simple collectives"
        );
        // LL lines: within the kernel's limit, none without the kernel.
        assert_eq!(d.p2p_lines_max(2), DEFAULT_P2P_LL_BYTES);
        assert_eq!(d.p2p_lines_max(1), 0);
        let small_p2p = with(&[("FERROCX_CE_P2P_BYTES", "4K")]).unwrap();
        assert_eq!(
            small_p2p.p2p_lines_max(4),
            4096,
            "never above the kernel's limit"
        );
        assert_eq!(
            with(&[("FERROCX_CE_P2P_BYTES", "0")])
                .unwrap()
                .p2p_lines_max(2),
            0
        );
        assert_eq!(
            with(&[("FERROCX_CE_P2P_LL_BYTES", "0")])
                .unwrap()
                .p2p_lines_max(2),
            0,
            "chunks only"
        );
        assert!(
            with(&[("FERROCX_CE_SIMPLE_SLOT", "16")]).is_err(),
            "no room for a header"
        );
        assert_eq!(with(&[]).unwrap().simple_bytes, SIMPLE_AUTO);
        let auto = with(&[("FERROCX_CE_SIMPLE_BYTES", " Auto ")]).unwrap();
        assert_eq!(auto.simple_bytes, SIMPLE_AUTO);
        assert_eq!(with(&[]).unwrap().direct_bytes, DIRECT_AUTO);
        let direct = |v| with(&[("FERROCX_CE_DIRECT_BYTES", v)]).map(|c| c.direct_bytes);
        assert_eq!(direct("auto").unwrap(), DIRECT_AUTO);
        assert_eq!(direct("8M").unwrap(), 8 << 20);
        assert_eq!(direct("0").unwrap(), 0);
        assert!(direct("lots").is_err());
        assert_eq!(with(&[]).unwrap().ll128_bytes, LL128_AUTO);
        let ll128 = |v| with(&[("FERROCX_CE_LL128_BYTES", v)]).map(|c| c.ll128_bytes);
        assert_eq!(ll128(" AUTO ").unwrap(), LL128_AUTO);
        assert_eq!(ll128("4M").unwrap(), LL128_MAX_BYTES);
        assert_eq!(ll128("0").unwrap(), 0);
        let big = ll128("5M").unwrap_err().to_string();
        assert!(
            big.contains("FERROCX_CE_LL128_BYTES") && big.contains("at most"),
            "{big}"
        );
        assert!(!with(&[("FERROCX_CE_CHECK_CALLS", "0")]).unwrap().stage);
        let off = with(&[("FERROCX_CHECK_CALLS", "0")]).unwrap();
        assert!(
            off.stage && !off.check_calls,
            "one variable turns every check off"
        );
        assert!(
            with(&[
                ("FERROCX_CHECK_CALLS", "0"),
                ("FERROCX_CE_CHECK_CALLS", "1")
            ])
            .unwrap()
            .check_calls
        );
        assert!(
            with(&[("FERROCX_CE_STAGE", "auto"), ("FERROCX_CHECK_CALLS", "off")])
                .unwrap()
                .stage
        );
        assert!(
            !with(&[("FERROCX_CE_STAGE", "0"), ("FERROCX_CHECK_CALLS", "0")])
                .unwrap()
                .stage
        );
        assert!(
            with(&[("FERROCX_CE_CHECK_CALLS", "1")]).unwrap().stage,
            "checked by ce"
        );
        assert!(
            with(&[("FERROCX_CE_STAGE", " AUTO "), ("FERROCX_CHECK_CALLS", "0")])
                .unwrap()
                .stage
        );
        ferrocx_sdk::testing::assert_rejected(
            |env| Config::from_lookup(env),
            &[
                ("FERROCX_CE_PRIORITY", "-1"),
                ("FERROCX_CE_PRIORITY", "4294967296"),
                ("FERROCX_CE_BATCH", "0"),
                ("FERROCX_CE_BATCH", "many"),
                ("FERROCX_CE_BATCH_BYTES", "1.5G"),
                ("FERROCX_CE_MEMCPY_BATCH", "maybe"),
                ("FERROCX_CE_REDUCE", "maybe"),
                ("FERROCX_CE_ONESHOT_BYTES", "-1"),
                ("FERROCX_CE_SCRATCH_BYTES", "lots"),
                ("FERROCX_CE_STAGE", "sometimes"),
                ("FERROCX_CE_CHECK_CALLS", "2"),
                ("FERROCX_CE_LL_BYTES", "1048577"),
                ("FERROCX_CE_SIMPLE_BYTES", "big"),
                ("FERROCX_CE_SIMPLE_SLOT", "0"),
                ("FERROCX_CE_SIMPLE_SLOT", "100"),
                ("FERROCX_CE_SIMPLE_SLOT", "32M"),
                ("FERROCX_CE_SIMPLE_BLOCKS", "0"),
                ("FERROCX_CE_P2P_LL_BYTES", "17M"),
                ("FERROCX_CE_P2P_LL_BYTES", "lots"),
            ],
        );
    }
}
