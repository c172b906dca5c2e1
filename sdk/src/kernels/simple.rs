//! The Simple exchange kernel: a mid-size collective in one kernel on the
//! user's stream, moving its data in chunks through slot rings in the peers'
//! mapped memory, one flag per chunk (as NCCL's Simple protocol), so the
//! data crosses NVLink once, pipelined over the blocks, with no barrier,
//! staging copy or host thread between the ranks. The LL kernel ([`super::ll`])
//! halves the link's bandwidth (a flag beside every 4 bytes); this one pays
//! a fence per chunk instead.
//!
//! ## Protocol
//!
//! Every rank has a *Simple region* in device memory that every peer maps
//! ([`region_bytes`]): for every writer `w` a ring of [`SLOTS`] slots of
//! `slot` bytes with one *head* word per slot (written by `w`), for every
//! reader `r` one *free* word per slot of this rank's ring in `r`'s region
//! (written by `r`), and this rank's two counters per peer (chunks sent to
//! it, chunks received from it, over the communicator's life).
//!
//! The `g`-th chunk a rank ever sends to `q` goes into slot `g mod SLOTS` of
//! its ring in `q`'s region: the writer first waits until `q`'s free word of
//! that slot says chunk `g − SLOTS` was consumed (`≥ g − SLOTS + 1`), writes
//! the bytes, fences, and sets the head word to `g + 1`; `q` waits for the
//! head (an acquiring load), reads the bytes, and once the whole block's
//! reads returned (a block barrier) sets the free word to `g + 1`, with no
//! fence (as NCCL's receive post: a load that returned cannot see a later
//! write). The
//! counts are 64-bit and grow from call to call, so no call reuses a slot
//! before its last reader let go of it, and no head or free word ever
//! repeats: no parity, no cleaning, no limit on calls.
//!
//! A call's segment of `seg` bytes is cut into chunks of `chunk` bytes
//! ([`chunk_bytes`], the same on every rank for the same `seg`, slot and
//! mode). Half the
//! grid sends, half receives, so a rank's sends and its folds or copies
//! overlap: sending block `b` takes chunks `b, b + half, …` and writes each
//! into every peer's ring; receiving block `b` waits for the same chunks of
//! every peer and folds or copies them into the output. Every wait points
//! at a smaller chunk index (a slot's previous use) or at a send of the same
//! chunk, so with every block resident (one wave, as the LL kernel) the call
//! always progresses. The last block to finish adds the call's chunks to
//! the counters.
//!
//! Modes are [`super::ll`]'s (fold, gather, broadcast), with the same
//! arguments. A broadcast with a `send_stride` is a scatter: the root sends
//! segment `q` of its input to rank `q` (and keeps segment `root`). In a broadcast the non-roots send one empty chunk to every
//! peer, so every rank reads at least one head of every peer in every call
//! (ce's call notes, written before the first chunk, are then visible to
//! every peer once its call completed).
//!
//! A gather to the root ([`MODE_ROOT_GATHER`]) is the mirror of a
//! broadcast: every other rank sends the root its segment and one empty
//! chunk to the others; the root sends empty chunks only and places the
//! segments as a gather does.
//!
//! A fourth mode, [`MODE_CHAIN`], is a broadcast passed along the ranks from
//! the root (root, root + 1, …): the root sends each chunk to the next rank
//! only, and every rank's receiving block that copied a chunk into its output
//! sends it on to the next rank, so the root's data leaves it once and every
//! link carries it once, pipelined by chunk (the one-kernel broadcast sends it
//! from the root to every peer; scatter + all_gather takes two kernels). The
//! empty chunks still go to every other peer. A forward waits only for the
//! next rank's frees of earlier chunks, and the last rank forwards nothing,
//! so the chain cannot wait on itself.
//!
//! A fifth, [`MODE_TWO_SHOT`], is an all_reduce as a reduce_scatter and an
//! all_gather in one kernel: the sending blocks send part `q` of the input to
//! rank `q` (its chunk `c` at ring position `2c`); a receiving block folds
//! chunk `c` of this rank's part into its place in the output, sends the
//! folded chunk to every peer (at `2c + 1`), then copies the peers' folded
//! chunk `c` into their places. Interleaved so, a credit waits for the
//! peer's use of an earlier chunk of the same kind, never for a later one:
//! a call may lap the rings (a part of any size is one kernel; before
//! session 21 the folded parts came after all the fold's chunks, which held
//! a call to one lap). In place it needs no marks: rank
//! `r`'s folded chunk `c` of part `r`, which this rank copies over its input's
//! part `r`, exists only once this rank's sender delivered chunk `c` of that
//! part to `r`.
//!
//! ## Direct modes
//!
//! Where every rank's buffers lie in symmetric windows, every peer's buffer
//! is mapped here too ([`SimpleArgs::peer_in`], [`SimpleArgs::peer_out`]),
//! and the data need not pass through the rings at all:
//! [`MODE_DIRECT_FOLD`] (all_reduce) reads every peer's input straight over
//! the link and folds it in registers with this rank's own;
//! [`MODE_DIRECT_GATHER`] (all_gather) and [`MODE_DIRECT_BROADCAST`] write
//! this rank's (the root's) segment straight into every peer's output. The
//! rings carry only two empty chunks per pair and call: chunk 0, sent by
//! block 0 at the start, says "my input is ready and my output may be
//! written"; chunk 1, sent by the last block done with its share (a count
//! in this rank's words), says "I no longer touch your buffers". Every block
//! waits for every peer's chunk 0 before its share and for every chunk 1
//! before it ends, so no rank's kernel ends while a peer still reads its
//! input or writes its output. An all_reduce in place cannot write its
//! output while the peers still read it as their input: it folds into
//! [`SimpleArgs::scratch`] and copies the result over once every chunk 1
//! arrived. No data slot is used, no head per data chunk, no copy out of a
//! ring: one read (or write) over the link per byte, and two barriers.
//! Chunk 0 carries [`DIRECT_MAGIC`] and the sender's send and receive
//! addresses in its own process ([`SimpleArgs::own`]); every block compares
//! the side the mode reaches with where this rank's window says that peer's
//! buffer is ([`SimpleArgs::expect`]) before touching it, so windows that
//! are not symmetric for this call (a rank in place beside one out of place,
//! a buffer at another offset, in another window or in none) or a peer on
//! another route fail the call with [`ERR_WINDOW`], naming the peer, instead
//! of reading or writing the wrong bytes.
//!
//! User buffers need only element alignment: 16-byte accesses where the
//! address allows, 8-byte or single bytes elsewhere; the rings are 16-byte
//! aligned. Where the output overlaps the input ([`SimpleArgs::overlap`]:
//! all_reduce and alltoall in place) a sending block *marks* each chunk it
//! sent to every peer in this rank's own region, and the receiving block
//! waits for the mark before it writes that chunk's output.
//!
//! ## Waiting, timeout, abort
//!
//! As the LL kernel: the control words ([`super::ll::CTL_WORDS`]) are
//! shared — the abort word ends every wait of this and later calls, a wait
//! past `timeout_ns` records [`super::ll::ERR_TIMEOUT`] with the peer waited
//! for and raises the abort word; `ctl[1]` counts finished blocks. The call
//! count (`ctl[0]`) is the LL kernel's alone. Two Simple kernels on one
//! region must never run at once (callers order them on one stream).

use std::ffi::c_void;

/// A broadcast passed along the ranks from the root (the Simple kernel's
/// own mode, beside [`super::ll`]'s fold, gather and broadcast).
pub const MODE_CHAIN: i32 = 3;

/// A two-shot all_reduce in one kernel (the Simple kernel's own mode): the
/// fold of a reduce_scatter into this rank's part of the output, then each
/// folded chunk sent to every peer and the peers' copied into place.
pub const MODE_TWO_SHOT: i32 = 4;

/// An all_reduce on windows read straight from the peers' inputs (the
/// Simple kernel's own mode): see "Direct modes" above.
pub const MODE_DIRECT_FOLD: i32 = 5;

/// An all_gather on windows written straight into the peers' outputs.
pub const MODE_DIRECT_GATHER: i32 = 6;

/// A broadcast on windows written by the root straight into the peers'
/// outputs.
pub const MODE_DIRECT_BROADCAST: i32 = 7;

/// [`super::ll::MODE_ROOT_GATHER`] runs here too: every other rank's
/// segment to the root (placed as a gather's), one empty chunk to every
/// other peer; the root sends empty chunks only.
pub use super::ll::MODE_ROOT_GATHER;

/// `ctl[3]` of a direct mode whose peer's buffer is not where this rank's
/// window says it is (the peer, plus one, in bits 32–63): the windows are
/// not symmetric for this call, or the peer runs another route.
pub const ERR_WINDOW: u64 = 5;

/// The first word of a direct mode's start chunk ("FXDIRECT"): a ring
/// mode's data chunk met instead (a peer on another route) does not pass.
pub const DIRECT_MAGIC: u64 = 0x4658_4449_5245_4354;

/// Whether `mode` is one of the direct modes.
pub fn is_direct(mode: i32) -> bool {
    (MODE_DIRECT_FOLD..=MODE_DIRECT_BROADCAST).contains(&mode)
}

/// Slots of one ring (one per writer in every rank's region).
pub const SLOTS: usize = 128;

/// Default bytes of one slot: the largest chunk.
pub const DEFAULT_SLOT: usize = 64 << 10;

/// Chunks are cut so that about this many blocks share a segment.
pub const TARGET_BLOCKS: usize = 64;

/// The smallest chunk worth a flag (unless the slot is smaller).
pub const MIN_CHUNK: usize = 4 << 10;

/// Bytes of the words before the data: heads, frees (`nranks × SLOTS`
/// each), marks (`SLOTS`), the counters (`2 × nranks`) and the direct
/// modes' count of blocks done with their share, 256-byte aligned.
pub fn words_bytes(nranks: usize) -> usize {
    (((2 * nranks + 1) * SLOTS + 2 * nranks + 1) * 8).div_ceil(256) * 256
}

/// Bytes of one rank's region at `nranks` ranks with slots of `slot` bytes
/// (`None` on overflow).
pub fn region_bytes(nranks: usize, slot: usize) -> Option<usize> {
    nranks
        .checked_mul(SLOTS)?
        .checked_mul(slot)?
        .checked_add(words_bytes(nranks))
}

/// Segments from this size on use whole slots as chunks; smaller ones at
/// most [`DEFAULT_SLOT`] even in larger slots. On 2 H100s, all_reduce of
/// 256 MiB–1 GiB blocks took 10–12 % less time in 128 KiB chunks than in
/// 64 KiB ones (1 GiB: 2995 vs 3379 µs at 128 blocks), while 16–64 MiB took
/// 1–5 % more (`bench/results/2026-11-27-x2-checks/run6`,
/// `…/2026-11-26-h100x2-simple/run3`).
pub const LARGE_SEG: usize = 256 << 20;

/// [`LARGE_SEG`] of a broadcast (mode [`super::ll::MODE_BROADCAST`]; a
/// chain's: [`CHAIN_CHUNKS`]): it only copies, so nothing is gained by finer chunks, and each
/// chunk costs its sender a fence. On 2 H100s, whole 128 KiB slots took
/// broadcast of 16, 32 and 64 MiB 59.7 / 101.8 / 193.0 µs against 62.8 /
/// 107.5 / 207.4 in 64 KiB chunks (NCCL 65.1 / 112.5 / 208.5 in the same
/// call, `bench/results/2026-11-27-session16/run1`).
pub const LARGE_BROADCAST_SEG: usize = 16 << 20;

/// At 2 ranks the Simple kernel's ring modes (not the direct modes) cut
/// segments from this size into whole slots (ce's 128 KiB at 2 ranks)
/// rather than 64 KiB below [`LARGE_SEG`]. On 2 of 4 H200s
/// (`bench/results/2026-11-28-session27/x4-two`, two alternations, µs out of
/// place, 64 KiB / 128 KiB chunks, by total size): all_reduce 32 MiB 115 /
/// 109, 64 MiB 216–217 / 202–203, 128 MiB 422 / 388–389; reduce_scatter 64 MiB
/// 116–118 / 109, 256 MiB 424–428 / 391; all_gather 128 MiB 216–223 /
/// 204–206; alltoall 256 MiB 430–431 / 394–395; in place alike; 16 MiB
/// segments even, 8 MiB ones slower (reduce_scatter and alltoall of 16 MiB
/// 37–39 / 41–53). At 4 ranks 128 KiB and 256 KiB chunks were no faster
/// than 64 KiB below 256 MiB segments but for the chain
/// (`…/x4-chunk`): all_reduce 64 MiB 322 / 327 / 359–372.
pub const TWO_RANK_WHOLE_SLOT_SEG: usize = 16 << 20;

/// Chunks of a chain's segment from [`LARGE_BROADCAST_SEG`] on (at most a
/// whole slot each). A chain's chunk crosses every hop in turn, so each
/// chunk is paid in fill and drain once per hop, and in a fence and a flag
/// per chunk: on 4 H200s (`bench/results/2026-11-28-session27/x4-chunk`, two
/// alternations, µs out of place; 64 KiB chunks / 128 KiB / 256 KiB, NCCL in
/// the same call) 16 MiB 82–91 / 73–76 / 86–94 (70), 32 MiB 126–136 /
/// 115–118 / 113–114 (118), 64 MiB 244–253 / 214 / 204–216 (212), 128 MiB
/// 479–488 / 410–418 / 406–407 (398); 32 KiB chunks and 128 blocks were far
/// slower (64 MiB 326 and 324–326) — so 128 chunks: 128 KiB at 16 MiB,
/// whole 256 KiB slots from 32 MiB.
pub const CHAIN_CHUNKS: usize = 2 * TARGET_BLOCKS;

/// The chunk for a segment of `seg` bytes of a call of `mode` with slots of
/// `slot` bytes (a multiple of 16): about [`TARGET_BLOCKS`] chunks, each a
/// multiple of 16 bytes, at least [`MIN_CHUNK`] and at most a slot (below
/// [`LARGE_SEG`], or [`LARGE_BROADCAST_SEG`] for a broadcast, at most
/// [`DEFAULT_SLOT`]; a chain from [`LARGE_BROADCAST_SEG`] on: about
/// [`CHAIN_CHUNKS`]; at 2 ranks whole slots from [`TWO_RANK_WHOLE_SLOT_SEG`]
/// but in the direct modes) at `nranks` ranks. Every rank of a call has the
/// same four.
pub fn chunk_bytes(seg: usize, slot: usize, mode: i32, nranks: usize) -> usize {
    if nranks == 2 && seg >= TWO_RANK_WHOLE_SLOT_SEG && !is_direct(mode) {
        return chunk_within(seg, slot);
    }
    if mode == MODE_CHAIN && seg >= LARGE_BROADCAST_SEG {
        return chunk_about(seg, slot, CHAIN_CHUNKS);
    }
    let large = if mode == super::ll::MODE_BROADCAST {
        LARGE_BROADCAST_SEG
    } else {
        LARGE_SEG
    };
    let most = if seg >= large {
        slot
    } else {
        slot.min(DEFAULT_SLOT)
    };
    chunk_within(seg, most)
}

/// About [`TARGET_BLOCKS`] chunks of `seg` bytes, each a multiple of 16
/// bytes, at least [`MIN_CHUNK`] and at most `most` (a multiple of 16).
pub fn chunk_within(seg: usize, most: usize) -> usize {
    chunk_about(seg, most, TARGET_BLOCKS)
}

/// About `target` chunks of `seg` bytes, as [`chunk_within`].
fn chunk_about(seg: usize, most: usize, target: usize) -> usize {
    let want = seg.div_ceil(target).next_multiple_of(16);
    want.max(MIN_CHUNK).min(most).max(16)
}

/// Chunks of a segment (at least one: a broadcast's empty chunk).
pub fn chunks(seg: usize, chunk: usize) -> usize {
    seg.div_ceil(chunk.max(1)).max(1)
}

/// The kernel's one parameter, passed by value (`#[repr(C)]`, as the CUDA C
/// `fx_sp_args` below). The fields shared with [`super::ll::LlArgs`] mean
/// the same.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleArgs {
    /// Device memory holding `nranks` addresses: rank `r`'s buffer as this
    /// process reaches it (the LL kernel's table).
    pub bases: u64,
    /// Offset of the Simple region in each buffer.
    pub region_off: u64,
    /// Offset in each peer's buffer where this rank's note goes (0: none).
    pub note_off: u64,
    /// The note's words.
    pub note: [u32; 4],
    /// This rank's input.
    pub input: u64,
    /// This rank's output.
    pub output: u64,
    /// This rank's control words (the LL kernel's).
    pub ctl: u64,
    /// Bytes between the input segments for consecutive ranks.
    pub send_stride: u64,
    /// Bytes between the output places of consecutive ranks' segments.
    pub out_stride: u64,
    /// Data bytes per segment (at least 1).
    pub seg: u64,
    /// Bytes per chunk ([`chunk_bytes`]).
    pub chunk: u64,
    /// Bytes per slot (a multiple of 16, at least `chunk`).
    pub slot: u64,
    /// Longest wait, from the kernel's start.
    pub timeout_ns: u64,
    /// This rank.
    pub rank: i32,
    /// Ranks.
    pub nranks: i32,
    /// [`super::ll::MODE_FOLD`], `MODE_GATHER`, `MODE_BROADCAST`,
    /// [`MODE_CHAIN`] or [`MODE_TWO_SHOT`].
    pub mode: i32,
    /// The root (broadcast).
    pub root: i32,
    /// 1 where the output overlaps the input (in place): a receiving block
    /// writes a chunk only after this rank sent it (the marks).
    pub overlap: i32,
    /// 1: above 2 ranks and out of place, a sending block takes one (chunk,
    /// peer) pair at a time, the pairs of one chunk on consecutive blocks
    /// (and so, in a gather, do the receiving blocks), so the peers' links
    /// are busy at once rather than one after another; 0: a block sends a
    /// chunk to every peer in turn. This rank's alone (which block moves a
    /// chunk does not change the protocol).
    pub spread: i32,
    /// The direct modes: this rank's scratch (at least `seg` bytes), which an
    /// all_reduce in place folds into; 0 out of place.
    pub scratch: u64,
    /// The direct modes: rank `r`'s input (its window at this call's offset)
    /// as mapped into this process, for every rank below `nranks`.
    pub peer_in: [u64; super::ll::MAX_RANKS],
    /// The direct modes: rank `r`'s output as mapped into this process.
    pub peer_out: [u64; super::ll::MAX_RANKS],
    /// The direct modes: this rank's send and receive buffers as this
    /// process addresses them, which chunk 0 carries to the peers.
    pub own: [u64; 2],
    /// The direct modes: rank `r`'s buffer on the side the mode reaches (a
    /// fold's send, a copy's receive) as rank `r`'s own process addresses
    /// it, where this rank's window says it is: what `r`'s chunk 0 must name.
    pub expect: [u64; super::ll::MAX_RANKS],
}

impl SimpleArgs {
    /// The Simple kernel's arguments for the call `ll` describes (the fields
    /// the two kernels share mean the same), its region at `region_off`,
    /// chunks of `chunk` bytes in slots of `slot`, and whether the output
    /// overlaps the input.
    pub fn from_ll(
        ll: &super::ll::LlArgs,
        region_off: u64,
        chunk: u64,
        slot: u64,
        overlap: bool,
    ) -> SimpleArgs {
        SimpleArgs {
            bases: ll.bases,
            region_off,
            note_off: ll.note_off,
            note: ll.note,
            input: ll.input,
            output: ll.output,
            ctl: ll.ctl,
            send_stride: ll.send_stride,
            out_stride: ll.out_stride,
            seg: ll.seg,
            chunk,
            slot,
            timeout_ns: ll.timeout_ns,
            rank: ll.rank,
            nranks: ll.nranks,
            mode: ll.mode,
            root: ll.root,
            overlap: overlap as i32,
            spread: 0,
            scratch: 0,
            peer_in: [0; super::ll::MAX_RANKS],
            peer_out: [0; super::ll::MAX_RANKS],
            own: [0; 2],
            expect: [0; super::ll::MAX_RANKS],
        }
    }

    /// Chunks of the segment.
    pub fn chunks(&self) -> u64 {
        chunks(self.seg as usize, self.chunk as usize) as u64
    }

    /// Work items of one side: chunks, times the peers where spread (the
    /// direct modes: chunks, half per side of the grid).
    pub fn items(&self) -> u64 {
        if is_direct(self.mode) {
            return self.chunks().div_ceil(2);
        }
        let per = if self.spreads() {
            self.nranks as u64 - 1
        } else {
            1
        };
        self.chunks() * per
    }

    /// Whether the kernel spreads (the flag, above 2 ranks, out of place:
    /// an in-place chunk's mark needs one block to have sent it to every
    /// peer; not a chain, whose root sends to one peer).
    pub fn spreads(&self) -> bool {
        self.spread != 0 && self.nranks > 2 && self.overlap == 0 && self.mode != MODE_CHAIN
    }

    /// As a kernel parameter list.
    pub(crate) fn params(&mut self) -> [*mut c_void; 1] {
        [self as *mut SimpleArgs as *mut c_void]
    }
}

/// The CUDA C of the kernel (after `elem_t`, `fx_op` and the LL kernel's
/// helpers), entry point `FX_SP_NAME`.
pub const SOURCE: &str = r#"
struct fx_sp_args {
    unsigned long long bases, region_off, note_off;
    unsigned int note[4];
    unsigned long long input, output, ctl, send_stride, out_stride, seg, chunk, slot, timeout_ns;
    int rank, nranks, mode, root, overlap, spread;
    unsigned long long scratch;
    unsigned long long peer_in[FX_SP_MAX_RANKS], peer_out[FX_SP_MAX_RANKS];
    unsigned long long own[2], expect[FX_SP_MAX_RANKS];
};

#define FX_SP_K FX_SP_SLOTS_ULL
typedef unsigned long long fx_sp_u;

/* Words of a region: heads[w][k], frees[r][k], marks[k], counts (sent[q], received[n + q]). */
FX_FN fx_sp_u fx_sp_head(fx_sp_u region, int w, fx_sp_u k) { return region + ((fx_sp_u)w * FX_SP_K + k) * 8ull; }
FX_FN fx_sp_u fx_sp_free(fx_sp_u region, int n, int r, fx_sp_u k) { return region + ((fx_sp_u)(n + r) * FX_SP_K + k) * 8ull; }
FX_FN fx_sp_u fx_sp_mark(fx_sp_u region, int n, fx_sp_u k) { return region + (2ull * (fx_sp_u)n * FX_SP_K + k) * 8ull; }
FX_FN fx_sp_u fx_sp_count(fx_sp_u region, int n, int i) { return region + ((2ull * (fx_sp_u)n + 1ull) * FX_SP_K + (fx_sp_u)i) * 8ull; }
FX_FN fx_sp_u fx_sp_data(fx_sp_u region, int n, fx_sp_u slot, int w, fx_sp_u k) {
    const fx_sp_u words = (((2ull * (fx_sp_u)n + 1ull) * FX_SP_K + 2ull * (fx_sp_u)n + 1ull) * 8ull + 255ull) / 256ull * 256ull;
    return region + words + ((fx_sp_u)w * FX_SP_K + k) * slot;
}

FX_FN fx_sp_u fx_sp_load(fx_sp_u at) {
    fx_sp_u v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(at) : "memory");
    return v;
}

/* An acquire at system scope: this thread's later accesses, and after a block
   barrier the whole block's, are ordered after the writes the releaser made
   before the value read. Polling with it makes an acquire fence after the
   wait needless, which would also wait for this thread's earlier writes to
   the peers (a link round trip per chunk). On 2 H200s that took 6-12 % off
   every Simple and point-to-point size from 2 to 16 MiB (all_reduce 8 MiB
   38.0-38.2 us against 41.1-41.4; bench/results/2026-11-27-session15/run2). */
FX_FN fx_sp_u fx_sp_load_acq(fx_sp_u at) {
    fx_sp_u v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(at) : "memory");
    return v;
}

/* One thread's release or acquire at system scope: after a block barrier it
   covers the whole block's accesses (the barrier orders them before it). */
FX_FN void fx_sp_fence() {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

FX_FN void fx_sp_store(fx_sp_u at, fx_sp_u v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(at), "l"(v) : "memory");
}

/* Wait until the word at `at` is at least `want`, with acquire (no fence needed
   after it); false when aborted or past the deadline. A wait for `peer` < 0 (this rank's own send, which itself waits
   for a peer and records it) gives up without recording anything. */
FX_FN bool fx_sp_wait(fx_sp_u at, fx_sp_u want, volatile fx_sp_u* ctl, fx_sp_u deadline, int peer) {
    unsigned int spins = 0;
    while (fx_sp_load_acq(at) < want) {
        if (++spins >= 256u) {
            spins = 0;
            if (ctl[2] != 0ull) return false;
            if (fx_ll_now() > deadline && peer < 0) return false;
            if (fx_ll_now() > deadline) {
                ctl[3] = 1ull | ((fx_sp_u)(peer + 1) << 32);
                ctl[2] = 1ull;
                __threadfence_system();
                return false;
            }
        }
    }
    return true;
}

/* Room for this rank's chunk g in q's ring: the slot's previous chunk (g − SLOTS) freed. */
FX_FN bool fx_sp_room(fx_sp_u own, int n, int q, fx_sp_u g, volatile fx_sp_u* ctl, fx_sp_u deadline) {
    return g < FX_SP_K || fx_sp_wait(fx_sp_free(own, n, q, g % FX_SP_K), g + 1ull - FX_SP_K, ctl, deadline, q);
}

FX_FN void fx_sp_ld16(fx_sp_u at, fx_sp_u* x, fx_sp_u* y) {
    /* Around L1: a ring slot is read again in a later lap of the same kernel. */
    asm volatile("ld.global.cg.v2.u64 {%0,%1}, [%2];" : "=l"(*x), "=l"(*y) : "l"(at) : "memory");
}

FX_FN void fx_sp_st16(fx_sp_u at, fx_sp_u x, fx_sp_u y) {
    asm volatile("st.global.v2.u64 [%0], {%1,%2};" :: "l"(at), "l"(x), "l"(y) : "memory");
}

/* 8-byte line i of a piece of len bytes at p: a ring's (aligned, around L1) or user memory's. */
FX_FN fx_sp_u fx_sp_get8(fx_sp_u p, fx_sp_u i, fx_sp_u len, bool ring) {
    if (!ring) return fx_ll_get(p, i, len);
    fx_sp_u v;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p + 8ull * i) : "memory");
    return v;
}

FX_FN void fx_sp_put8(fx_sp_u p, fx_sp_u i, fx_sp_u len, bool ring, fx_sp_u v) {
    if (ring) *(fx_sp_u*)(p + 8ull * i) = v;
    else fx_ll_put(p, i, len, v);
}

/* The block copies len bytes from src to dst (either may be a ring; a ring
   takes whole lines). 16-byte accesses, eight in flight per thread, where
   both are 16-byte aligned; 8-byte lines elsewhere and for the tail. Not
   inlined: one copy loop per module keeps NVRTC's time down. */
static __device__ __noinline__ void fx_sp_copy(fx_sp_u dst, bool dring, fx_sp_u src, bool sring, fx_sp_u len) {
    fx_sp_u done = 0ull;
    if (((dst | src) & 15ull) == 0ull) {
        const fx_sp_u units = len / 16ull;
        fx_sp_u u = threadIdx.x;
        for (; u + 7ull * blockDim.x < units; u += 8ull * blockDim.x) {
            fx_sp_u x[8], y[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) fx_sp_ld16(src + 16ull * (u + (fx_sp_u)j * blockDim.x), &x[j], &y[j]);
#pragma unroll
            for (int j = 0; j < 8; ++j) fx_sp_st16(dst + 16ull * (u + (fx_sp_u)j * blockDim.x), x[j], y[j]);
        }
        for (; u < units; u += blockDim.x) {
            fx_sp_u x, y;
            fx_sp_ld16(src + 16ull * u, &x, &y);
            fx_sp_st16(dst + 16ull * u, x, y);
        }
        done = units * 16ull;
    }
    const fx_sp_u lines = (len + 7ull) / 8ull;
    for (fx_sp_u i = done / 8ull + threadIdx.x; i < lines; i += blockDim.x)
        fx_sp_put8(dst, i, len, dring, fx_sp_get8(src, i, len, sring));
}

/* A chain's forward: the block copies len bytes from ring slot src both to
   dst (user memory) and to ring slot fwd (the next rank's), reading each
   line once where all three are 16-byte aligned (two copies elsewhere). */
static __device__ __noinline__ void fx_sp_copy_on(fx_sp_u dst, fx_sp_u fwd, fx_sp_u src, fx_sp_u len) {
    if (((dst | fwd | src) & 15ull) != 0ull) {
        fx_sp_copy(dst, false, src, true, len);
        fx_sp_copy(fwd, true, src, true, len);
        return;
    }
    const fx_sp_u units = len / 16ull;
    fx_sp_u u = threadIdx.x;
    for (; u + 7ull * blockDim.x < units; u += 8ull * blockDim.x) {
        fx_sp_u x[8], y[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) fx_sp_ld16(src + 16ull * (u + (fx_sp_u)j * blockDim.x), &x[j], &y[j]);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            fx_sp_st16(fwd + 16ull * (u + (fx_sp_u)j * blockDim.x), x[j], y[j]);
            fx_sp_st16(dst + 16ull * (u + (fx_sp_u)j * blockDim.x), x[j], y[j]);
        }
    }
    for (; u < units; u += blockDim.x) {
        fx_sp_u x, y;
        fx_sp_ld16(src + 16ull * u, &x, &y);
        fx_sp_st16(fwd + 16ull * u, x, y);
        fx_sp_st16(dst + 16ull * u, x, y);
    }
    const fx_sp_u lines = (len + 7ull) / 8ull;
    for (fx_sp_u i = units * 2ull + threadIdx.x; i < lines; i += blockDim.x) {
        const fx_sp_u v = fx_sp_get8(src, i, len, true);
        fx_sp_put8(fwd, i, len, true, v);
        fx_sp_put8(dst, i, len, false, v);
    }
}

/* The block folds chunk `lo`/`len` of every rank in rank order (its own from
   `mine`, the peers' from `in` + `off`: their ring slots, or with `rings` false
   their own buffers, read over the link) into `out`. Not inlined, as the copy.
   `in` is shared memory: an array built per call in a thread's own memory would
   live in local memory, its address being passed here. */
static __device__ __noinline__ void fx_sp_fold(fx_sp_u out, fx_sp_u mine, const fx_sp_u* in, fx_sp_u off, int n, int me, fx_sp_u len, bool rings) {
    fx_sp_u done = 0ull;
    fx_sp_u align = out | mine;
    for (int r = 0; !rings && r < n; ++r)
        if (r != me) align |= in[r] + off;
    if ((align & 15ull) == 0ull) {
        const fx_sp_u units = len / 16ull;
        fx_sp_u u = threadIdx.x;
        /* Four units per thread. The first rank's loads go straight into the
           accumulators, so the next rank's are issued before any returns (a
           copy out of the first rank's registers waited for them): the first
           two ranks' loads are in flight at once (all of them at 2 ranks; a
           later rank's wait for the folds before them). On 2 H100s, 3-5 % off
           all_reduce at 2-8 MiB (bench/results/2026-11-27-session16/run1;
           8 units were slower). */
        for (; u + 3ull * blockDim.x < units; u += 4ull * blockDim.x) {
            fx_sp_u ax[4], ay[4];
            {
                const fx_sp_u p = 0 == me ? mine : in[0] + off;
#pragma unroll
                for (int j = 0; j < 4; ++j) fx_sp_ld16(p + 16ull * (u + (fx_sp_u)j * blockDim.x), &ax[j], &ay[j]);
            }
            for (int r = 1; r < n; ++r) {
                const fx_sp_u p = r == me ? mine : in[r] + off;
                fx_sp_u x[4], y[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) fx_sp_ld16(p + 16ull * (u + (fx_sp_u)j * blockDim.x), &x[j], &y[j]);
#pragma unroll
                for (int j = 0; j < 4; ++j) { ax[j] = fx_ll_op(ax[j], x[j]); ay[j] = fx_ll_op(ay[j], y[j]); }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) fx_sp_st16(out + 16ull * (u + (fx_sp_u)j * blockDim.x), ax[j], ay[j]);
        }
        for (; u < units; u += blockDim.x) {
            fx_sp_u ax = 0ull, ay = 0ull;
            for (int r = 0; r < n; ++r) {
                fx_sp_u x, y;
                fx_sp_ld16((r == me ? mine : in[r] + off) + 16ull * u, &x, &y);
                if (r == 0) { ax = x; ay = y; }
                else { ax = fx_ll_op(ax, x); ay = fx_ll_op(ay, y); }
            }
            fx_sp_st16(out + 16ull * u, ax, ay);
        }
        done = units * 16ull;
    }
    const fx_sp_u lines = (len + 7ull) / 8ull;
    for (fx_sp_u i = done / 8ull + threadIdx.x; i < lines; i += blockDim.x) {
        fx_sp_u acc = 0ull;
        for (int r = 0; r < n; ++r) {
            const fx_sp_u v = r == me ? fx_sp_get8(mine, i, len, false) : fx_sp_get8(in[r] + off, i, len, rings);
            acc = r == 0 ? v : fx_ll_op(acc, v);
        }
        fx_sp_put8(out, i, len, false, acc);
    }
}

extern "C" __global__ void __launch_bounds__(FX_BLOCK) FX_SP_NAME(const fx_sp_args a) {
    volatile fx_sp_u* ctl = (volatile fx_sp_u*)a.ctl;
    __shared__ int ok_s;
    /* Where each peer's current chunk lies in this rank's ring. */
    __shared__ fx_sp_u in_s[FX_SP_MAX_RANKS];
    /* The counters, read once: nothing changes them before the last block ends. */
    __shared__ fx_sp_u sent_s[FX_SP_MAX_RANKS], recv_s[FX_SP_MAX_RANKS];
    const fx_sp_u deadline = fx_ll_now() + a.timeout_ns;
    const int n = a.nranks, me = a.rank;
    const fx_sp_u* bases = (const fx_sp_u*)a.bases;
    const fx_sp_u own = bases[me] + a.region_off;
    const fx_sp_u m = (a.seg + a.chunk - 1ull) / a.chunk;
    /* A chain (mode 3) is a broadcast passed along: root, root + 1, …, each rank
       forwarding every chunk to the next as it arrives. */
    const bool chain = a.mode == 3;
    const bool bcast = a.mode == 2 || chain;
    /* A two-shot all_reduce (mode 4): chunks c < m fold into this rank's part,
       chunks m + c carry the folded parts back to every rank. */
    const bool two = a.mode == 4;
    /* The direct modes (5 fold, 6 gather, 7 broadcast): the data goes straight
       between the windows; the rings carry two empty chunks per pair. */
    const bool direct = a.mode >= 5 && a.mode <= 7;
    /* A gather to the root (mode 8): every other rank's data to the root, one
       empty chunk to every other peer (the root sends empty chunks only). */
    const bool rgather = a.mode == 8;
#define FX_SP_POS(r) (((r) - a.root + n) % n)
    /* Chunks rank s sends rank q in this call: a broadcast's non-roots send one empty
       chunk (so every rank reads a head of every peer), a chain's data goes to the next. */
    /* A pair's ring position of chunk c: a two-shot interleaves its fold's
       chunks (2c) with the folded parts sent back (2c + 1), so a credit always
       waits for an earlier chunk of the same kind and a call may lap the ring. */
#define FX_SP_RS(c) (two ? 2ull * (c) : (c))
#define FX_SP_AG(c) (2ull * (c) + 1ull)
#define FX_SP_TO(s, q) (direct ? 2ull : two ? 2ull * m : chain ? ((FX_SP_POS(s) < n - 1 && (q) == ((s) + 1) % n) ? m : 1ull) : rgather ? (((s) != a.root && (q) == a.root) ? m : 1ull) : ((bcast && (s) != a.root) ? 1ull : m))
    const int next = (chain && FX_SP_POS(me) < n - 1) ? (me + 1) % n : -1;
    const int prev = (chain && me != a.root) ? (me + n - 1) % n : a.root;
    /* This rank's receiving blocks pass each chunk on (a chain's middle). */
    const bool fwd = next >= 0 && me != a.root;
    /* Blocks [0, half) send, [half, 2 half) receive. */
    const fx_sp_u half = gridDim.x / 2u;
    const bool sender = blockIdx.x < half;
    const fx_sp_u first = sender ? blockIdx.x : blockIdx.x - half;
    /* This rank's own sends are marked under the counts to its next rank. */
    const int q0 = (me + 1) % n;
    /* Before chunk 0's heads, which this thread writes. */
    fx_ll_note(bases, a.note_off, a.note, n, me);
    if (threadIdx.x == 0) {
        for (int q = 0; q < n; ++q) {
            sent_s[q] = fx_sp_load(fx_sp_count(own, n, q));
            recv_s[q] = fx_sp_load(fx_sp_count(own, n, n + q));
        }
    }
    __syncthreads();
    const fx_sp_u mine = a.input + (fx_sp_u)me * a.send_stride;
    bool ok = true;
    /* Spread: one (chunk, peer) pair per work item, a chunk's pairs on consecutive blocks. */
    const bool spread = a.spread != 0 && n > 2 && a.overlap == 0 && !chain;
    const fx_sp_u per = spread ? (fx_sp_u)(n - 1) : 1ull;
    if (direct) {
        /* Chunk 0 (block 0): this rank's input is ready and its output may be
           written. Every block waits for every peer's before its share. */
        if (threadIdx.x == 0) {
            bool good = true;
            if (blockIdx.x == 0) {
                for (int j = 1; good && j < n; ++j) {
                    const int q = (me + j) % n;
                    const fx_sp_u g = sent_s[q];
                    good = fx_sp_room(own, n, q, g, ctl, deadline);
                    if (!good) break;
                    /* The chunk's payload: the magic, this rank's buffers as it addresses them. */
                    const fx_sp_u at = fx_sp_data(bases[q] + a.region_off, n, a.slot, me, g % FX_SP_K);
                    fx_sp_store(at, FX_SP_DIRECT_MAGIC);
                    fx_sp_store(at + 8ull, a.own[0]);
                    fx_sp_store(at + 16ull, a.own[1]);
                    fx_sp_fence();
                    fx_sp_store(fx_sp_head(bases[q] + a.region_off, me, g % FX_SP_K), g + 1ull);
                }
            }
            for (int j = 1; good && j < n; ++j) {
                const int r = (me + n - j) % n;
                const fx_sp_u g = recv_s[r];
                good = fx_sp_wait(fx_sp_head(own, r, g % FX_SP_K), g + 1ull, ctl, deadline, r);
            }
            /* The side the mode reaches (a fold the peers' inputs, a copy their
               outputs) must be where this rank's window says it is on every peer. */
            const int side = a.mode == 5 ? 0 : 1;
            for (int j = 1; good && j < n; ++j) {
                const int r = (me + n - j) % n;
                const fx_sp_u at = fx_sp_data(own, n, a.slot, r, recv_s[r] % FX_SP_K);
                const fx_sp_u theirs = fx_sp_load(at + 8ull + 8ull * (fx_sp_u)side);
                if (fx_sp_load(at) != FX_SP_DIRECT_MAGIC || theirs != a.expect[r]) {
                    ctl[3] = FX_SP_ERR_WINDOW | ((fx_sp_u)(r + 1) << 32);
                    ctl[2] = 1ull;
                    __threadfence_system();
                    good = false;
                }
            }
            ok_s = good;
        }
        /* A fold reads the peers' inputs at in_s[r] + the chunk's offset (the
           rings carry no data in the direct modes: in_s is free). */
        if (a.mode == 5 && threadIdx.x < (unsigned)n) in_s[threadIdx.x] = a.peer_in[threadIdx.x];
        __syncthreads();
        ok = ok_s != 0;
        const bool bc = a.mode == 7;
        /* An all_reduce in place folds into the scratch (the peers still read its input). */
        const fx_sp_u dst0 = a.scratch != 0ull ? a.scratch : a.output;
        for (fx_sp_u c = blockIdx.x; ok && c < m; c += gridDim.x) {
            const fx_sp_u lo = c * a.chunk;
            const fx_sp_u len = a.seg - lo < a.chunk ? a.seg - lo : a.chunk;
            if (a.mode == 5) {
                fx_sp_fold(dst0 + lo, mine + lo, in_s, lo, n, me, len, false);
            } else if (!bc || me == a.root) {
                for (int j = 0; j < n; ++j) {
                    const int q = (me + j) % n;
                    const fx_sp_u src = a.input + (fx_sp_u)q * a.send_stride + lo;
                    const fx_sp_u dst = a.peer_out[q] + (bc ? 0ull : (fx_sp_u)me * a.out_stride) + lo;
                    if (dst != src) fx_sp_copy(dst, false, src, false, len);
                }
            }
        }
        /* Chunk 1 (the last block done with its share): this rank no longer
           touches the peers' buffers. Every block waits for every peer's. */
        __syncthreads();
        if (threadIdx.x == 0) {
            bool good = ok;
            fx_sp_fence();
            const fx_sp_u at = fx_sp_count(own, n, 2 * n);
            const fx_sp_u before = atomicAdd((fx_sp_u*)at, 1ull);
            if (before == (fx_sp_u)gridDim.x - 1ull) {
                fx_sp_store(at, 0ull);
                fx_sp_fence();
                for (int j = 1; good && j < n; ++j) {
                    const int q = (me + j) % n;
                    const fx_sp_u g = sent_s[q] + 1ull;
                    good = fx_sp_room(own, n, q, g, ctl, deadline);
                    if (good) fx_sp_store(fx_sp_head(bases[q] + a.region_off, me, g % FX_SP_K), g + 1ull);
                }
            }
            for (int j = 1; good && j < n; ++j) {
                const int r = (me + n - j) % n;
                const fx_sp_u g = recv_s[r] + 1ull;
                good = fx_sp_wait(fx_sp_head(own, r, g % FX_SP_K), g + 1ull, ctl, deadline, r);
            }
            /* Both of every peer's chunks are consumed: block 0 frees their slots. */
            if (good && blockIdx.x == 0) {
                for (int j = 1; j < n; ++j) {
                    const int r = (me + n - j) % n;
                    for (fx_sp_u t = 0ull; t < 2ull; ++t)
                        fx_sp_store(fx_sp_free(bases[r] + a.region_off, n, me, (recv_s[r] + t) % FX_SP_K), recv_s[r] + t + 1ull);
                }
            }
            ok_s = good;
        }
        __syncthreads();
        ok = ok_s != 0;
        for (fx_sp_u c = blockIdx.x; ok && a.scratch != 0ull && c < m; c += gridDim.x) {
            const fx_sp_u lo = c * a.chunk;
            const fx_sp_u len = a.seg - lo < a.chunk ? a.seg - lo : a.chunk;
            fx_sp_copy(a.output + lo, false, a.scratch + lo, false, len);
        }
    } else if (sender) {
        const bool data = rgather ? me != a.root : (!bcast || me == a.root);
        /* A broadcast's non-roots and a gather's root send empty chunks (a chain's forwards its data from its receiving blocks). */
        const fx_sp_u sm = ((bcast && me != a.root) || (rgather && me == a.root)) ? 1ull : m;
        for (fx_sp_u w = first; ok && w < sm * per && n > 1; w += half) {
            const fx_sp_u c = w / per;
            const int jlo = spread ? 1 + (int)(w % per) : 1;
            const int jhi = spread ? jlo + 1 : n;
            const fx_sp_u lo = c * a.chunk;
            const fx_sp_u len = a.seg - lo < a.chunk ? a.seg - lo : a.chunk;
            for (int j = jlo; j < jhi; ++j) {
                const int q = (me + j) % n;
                if (c >= FX_SP_TO(me, q) || (chain && me != a.root && q == next)) continue;
                const fx_sp_u g = sent_s[q] + FX_SP_RS(c);
                const fx_sp_u k = g % FX_SP_K;
                if (threadIdx.x == 0) {
                    /* The wait acquires: the peer's reads of the slot came first. */
                    ok_s = fx_sp_room(own, n, q, g, ctl, deadline);
                }
                __syncthreads();
                ok = ok_s != 0;
                if (!ok) break;
                const fx_sp_u peer = bases[q] + a.region_off;
                if (data && (!chain || q == next) && (!rgather || q == a.root)) fx_sp_copy(fx_sp_data(peer, n, a.slot, me, k), true, a.input + (fx_sp_u)q * a.send_stride + lo, false, len);
                __syncthreads();
                if (threadIdx.x == 0) {
                    fx_sp_fence();
                    fx_sp_store(fx_sp_head(peer, me, k), g + 1ull);
                }
            }
            /* Every peer has chunk c: a receiver may now write over it in place. */
            if (ok && a.overlap && threadIdx.x == 0) {
                const fx_sp_u g = sent_s[q0] + c;
                fx_sp_store(fx_sp_mark(own, n, g % FX_SP_K), g + 1ull);
            }
        }
    } else {
        /* A gather's receivers spread as its senders; a fold needs every peer's chunk at once.
           A gather's other ranks take one empty chunk from every peer. */
        const fx_sp_u rper = (a.mode == 1 || (rgather && me == a.root)) ? per : 1ull;
        const fx_sp_u rm = (rgather && me != a.root) ? 1ull : m;
        for (fx_sp_u w = first; ok && w < rm * rper; w += half) {
            const fx_sp_u c = w / rper;
            const int jlo = rper > 1ull ? 1 + (int)(w % rper) : 1;
            const int jhi = rper > 1ull ? jlo + 1 : n;
            const fx_sp_u lo = c * a.chunk;
            const fx_sp_u len = a.seg - lo < a.chunk ? a.seg - lo : a.chunk;
            /* Wait for chunk c of every peer this item takes that sends one (and, in place, for this rank's own send of it). */
            if (threadIdx.x == 0) {
                bool good = true;
                for (int j = jlo; good && j < jhi; ++j) {
                    const int r = (me + n - j) % n;
                    if (c >= FX_SP_TO(r, me)) continue;
                    const fx_sp_u g = recv_s[r] + FX_SP_RS(c);
                    in_s[r] = fx_sp_data(own, n, a.slot, r, g % FX_SP_K);
                    good = fx_sp_wait(fx_sp_head(own, r, g % FX_SP_K), g + 1ull, ctl, deadline, r);
                }
                if (good && a.overlap && n > 1 && c < FX_SP_TO(me, q0)) {
                    const fx_sp_u g = sent_s[q0] + c;
                    good = fx_sp_wait(fx_sp_mark(own, n, g % FX_SP_K), g + 1ull, ctl, deadline, -1);
                }
                /* A chain's forward needs the next rank's slot free (it waits only down the chain). */
                if (good && fwd) {
                    const fx_sp_u g = sent_s[next] + c;
                    good = fx_sp_room(own, n, next, g, ctl, deadline);
                }
                ok_s = good;
            }
            __syncthreads();
            ok = ok_s != 0;
            if (!ok) break;
            if (a.mode == 0 || two) {
                fx_sp_fold(a.output + (two ? (fx_sp_u)me * a.out_stride : 0ull) + lo, mine + lo, in_s, 0ull, n, me, len, true);
            } else if (rgather && me != a.root) {
                /* Empty chunks: nothing to write. */
            } else if (a.mode == 1 || rgather) {
                /* This rank's own chunk goes with the item of its first peer. */
                const fx_sp_u own_dst = a.output + (fx_sp_u)me * a.out_stride + lo;
                if (jlo == 1 && own_dst != mine + lo) fx_sp_copy(own_dst, false, mine + lo, false, len);
                for (int j = jlo; j < jhi; ++j) {
                    const int r = (me + n - j) % n;
                    fx_sp_copy(a.output + (fx_sp_u)r * a.out_stride + lo, false, in_s[r], true, len);
                }
            } else if (me == a.root) {
                /* The root's own segment (its whole input in a broadcast; segment `root` of it in a scatter). */
                if (a.output != mine) fx_sp_copy(a.output + lo, false, mine + lo, false, len);
            } else if (fwd) {
                const fx_sp_u g = sent_s[next] + c;
                fx_sp_copy_on(a.output + lo, fx_sp_data(bases[next] + a.region_off, n, a.slot, me, g % FX_SP_K), in_s[prev], len);
            } else {
                fx_sp_copy(a.output + lo, false, in_s[prev], true, len);
            }
            /* The reads are done before any writer may reuse the slots: every
               thread's loads returned (their values were stored) before the
               barrier, so a free needs no fence (as NCCL's receive post); only a
               forward releases data. On 2 H100s the fence cost 2-3 µs of the
               tail: all_reduce 2 MiB 16.5 µs against 19.0, 8 MiB 37.1 against
               38.5 (bench/results/2026-11-27-session16/run1). */
            __syncthreads();
            if (threadIdx.x == 0) {
                if (fwd) fx_sp_fence();
                for (int j = jlo; j < jhi; ++j) {
                    const int r = (me + n - j) % n;
                    if (c >= FX_SP_TO(r, me)) continue;
                    const fx_sp_u g = recv_s[r] + FX_SP_RS(c);
                    fx_sp_store(fx_sp_free(bases[r] + a.region_off, n, me, g % FX_SP_K), g + 1ull);
                }
                /* The forwarded chunk is in the next rank's slot (the fence above covers it). */
                if (fwd) fx_sp_store(fx_sp_head(bases[next] + a.region_off, me, (sent_s[next] + c) % FX_SP_K), sent_s[next] + c + 1ull);
            }
            if (two) {
                /* The folded chunk to every peer (ring position 2c + 1): its credit is
                   the peer's copy of an earlier folded chunk, or an earlier call's. */
                const fx_sp_u at = a.output + (fx_sp_u)me * a.out_stride + lo;
                if (threadIdx.x == 0) {
                    bool good = true;
                    for (int j = 1; good && j < n; ++j) {
                        const int q = (me + j) % n;
                        const fx_sp_u g = sent_s[q] + FX_SP_AG(c);
                        good = fx_sp_room(own, n, q, g, ctl, deadline);
                    }
                    ok_s = good;
                }
                __syncthreads();
                ok = ok_s != 0;
                if (!ok) break;
                for (int j = 1; j < n; ++j) {
                    const int q = (me + j) % n;
                    fx_sp_copy(fx_sp_data(bases[q] + a.region_off, n, a.slot, me, (sent_s[q] + FX_SP_AG(c)) % FX_SP_K), true, at, false, len);
                }
                __syncthreads();
                if (threadIdx.x == 0) {
                    fx_sp_fence();
                    bool good = true;
                    for (int j = 1; j < n; ++j) {
                        const int q = (me + j) % n;
                        const fx_sp_u g = sent_s[q] + FX_SP_AG(c);
                        fx_sp_store(fx_sp_head(bases[q] + a.region_off, me, g % FX_SP_K), g + 1ull);
                    }
                    /* Then the peers' folded chunks. */
                    for (int j = 1; good && j < n; ++j) {
                        const int r = (me + n - j) % n;
                        const fx_sp_u g = recv_s[r] + FX_SP_AG(c);
                        in_s[r] = fx_sp_data(own, n, a.slot, r, g % FX_SP_K);
                        good = fx_sp_wait(fx_sp_head(own, r, g % FX_SP_K), g + 1ull, ctl, deadline, r);
                    }
                    ok_s = good;
                }
                __syncthreads();
                ok = ok_s != 0;
                if (!ok) break;
                for (int j = 1; j < n; ++j) {
                    const int r = (me + n - j) % n;
                    fx_sp_copy(a.output + (fx_sp_u)r * a.out_stride + lo, false, in_s[r], true, len);
                }
                __syncthreads();
                if (threadIdx.x == 0) {
                    for (int j = 1; j < n; ++j) {
                        const int r = (me + n - j) % n;
                        const fx_sp_u g = recv_s[r] + FX_SP_AG(c);
                        fx_sp_store(fx_sp_free(bases[r] + a.region_off, n, me, g % FX_SP_K), g + 1ull);
                    }
                }
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const fx_sp_u before = atomicAdd((fx_sp_u*)&ctl[1], 1ull);
        __threadfence();
        if (before == (fx_sp_u)gridDim.x - 1ull) {
            ctl[1] = 0ull;
            for (int q = 0; q < n; ++q) {
                if (q == me) continue;
                fx_sp_store(fx_sp_count(own, n, q), sent_s[q] + FX_SP_TO(me, q));
                fx_sp_store(fx_sp_count(own, n, n + q), recv_s[q] + FX_SP_TO(q, me));
            }
            __threadfence();
        }
    }
#undef FX_SP_TO
#undef FX_SP_RS
#undef FX_SP_AG
#undef FX_SP_POS
}
"#;

#[cfg(test)]
pub(in crate::kernels) mod model;

#[cfg(test)]
mod tests {
    use super::super::ll::{MODE_BROADCAST, MODE_FOLD, MODE_GATHER};
    use super::*;

    /// Every segment size maps to chunks of 16-byte multiples that fit a
    /// slot, cover the segment exactly, and number about TARGET_BLOCKS.
    #[test]
    fn chunks_cover_segments_within_slots() {
        for slot in [16, 1040, 4096, DEFAULT_SLOT] {
            for seg in (1..70_000).step_by(997).chain([
                1,
                15,
                16,
                17,
                MIN_CHUNK * TARGET_BLOCKS - 1,
                MIN_CHUNK * TARGET_BLOCKS + 1,
                32 << 20,
                (32 << 20) + 3,
            ]) {
                let c = chunk_bytes(seg, slot, MODE_FOLD, 4);
                assert!(
                    c.is_multiple_of(16) && c > 0 && c <= slot,
                    "seg {seg} slot {slot}: {c}"
                );
                assert!(c >= MIN_CHUNK.min(slot), "seg {seg} slot {slot}: {c}");
                let m = chunks(seg, c);
                assert!((m - 1) * c < seg && seg <= m * c, "seg {seg}: {m} × {c}");
                if c < slot && c > MIN_CHUNK {
                    assert!(m <= TARGET_BLOCKS, "seg {seg}: {m} chunks of {c}");
                }
            }
        }
        assert_eq!(chunks(0, 64), 1, "a broadcast's empty chunk");
        // Larger slots: whole-slot chunks only from LARGE_SEG on.
        let big = 2 * DEFAULT_SLOT;
        for mode in [MODE_FOLD, MODE_GATHER, MODE_TWO_SHOT] {
            assert_eq!(chunk_bytes(LARGE_SEG - 16, big, mode, 4), DEFAULT_SLOT);
            assert_eq!(chunk_bytes(LARGE_SEG, big, mode, 4), big);
            assert_eq!(chunk_bytes(1 << 30, big, mode, 4), big);
            assert_eq!(chunk_bytes(LARGE_SEG, DEFAULT_SLOT, mode, 4), DEFAULT_SLOT);
            assert_eq!(chunk_bytes(64 << 10, big, mode, 4), MIN_CHUNK);
        }
        // At 2 ranks: whole slots from TWO_RANK_WHOLE_SLOT_SEG, not in the direct modes.
        let two = 2 * DEFAULT_SLOT;
        assert_eq!(chunk_bytes(TWO_RANK_WHOLE_SLOT_SEG, two, MODE_FOLD, 2), two);
        assert_eq!(
            chunk_bytes(TWO_RANK_WHOLE_SLOT_SEG - 16, two, MODE_FOLD, 2),
            DEFAULT_SLOT
        );
        assert_eq!(
            chunk_bytes(64 << 20, two, MODE_DIRECT_GATHER, 2),
            DEFAULT_SLOT
        );
        // A chain: as the others below LARGE_BROADCAST_SEG, about
        // CHAIN_CHUNKS chunks from there (within the slot).
        let c = MODE_CHAIN;
        let s4 = 4 * DEFAULT_SLOT;
        assert_eq!(
            chunk_bytes(LARGE_BROADCAST_SEG - 16, s4, c, 4),
            DEFAULT_SLOT
        );
        assert_eq!(
            chunk_bytes(1 << 20, s4, c, 4),
            chunk_bytes(1 << 20, s4, MODE_FOLD, 4)
        );
        assert_eq!(chunk_bytes(LARGE_BROADCAST_SEG, s4, c, 4), 128 << 10);
        assert_eq!(chunk_bytes(32 << 20, s4, c, 4), s4);
        assert_eq!(chunk_bytes(1 << 30, s4, c, 4), s4);
        assert_eq!(
            chunk_bytes(LARGE_BROADCAST_SEG, DEFAULT_SLOT, c, 4),
            DEFAULT_SLOT
        );
        for seg in (LARGE_BROADCAST_SEG..1 << 30).step_by(7_654_321) {
            for slot in [DEFAULT_SLOT, s4, 1 << 20] {
                let k = chunk_bytes(seg, slot, c, 4);
                let m = chunks(seg, k);
                assert!(
                    k.is_multiple_of(16) && k <= slot,
                    "seg {seg} slot {slot}: {k}"
                );
                assert!(
                    k == slot || m <= CHAIN_CHUNKS,
                    "seg {seg}: {m} chunks of {k}"
                );
            }
        }
        // A broadcast's whole slots start at LARGE_BROADCAST_SEG (±16 bytes).
        let b = MODE_BROADCAST;
        assert_eq!(
            chunk_bytes(LARGE_BROADCAST_SEG - 16, big, b, 4),
            DEFAULT_SLOT
        );
        assert_eq!(chunk_bytes(LARGE_BROADCAST_SEG, big, b, 4), big);
        assert_eq!(chunk_bytes(LARGE_BROADCAST_SEG + 16, big, b, 4), big);
        assert_eq!(
            chunk_bytes(LARGE_BROADCAST_SEG, DEFAULT_SLOT, b, 4),
            DEFAULT_SLOT
        );
    }

    #[test]
    fn regions_hold_the_words_and_every_writers_ring() {
        for n in 1..=16 {
            let w = words_bytes(n);
            assert_eq!(w % 256, 0);
            assert!(w >= ((2 * n + 1) * SLOTS + 2 * n + 1) * 8);
            assert_eq!(region_bytes(n, 4096), Some(w + n * SLOTS * 4096));
        }
        assert_eq!(region_bytes(usize::MAX / 2, 4096), None);
        // The shared fields carry over from the LL kernel's arguments.
        let ll = super::super::ll::LlArgs {
            bases: 1,
            region_off: 2,
            note_off: 3,
            note: [4, 5, 6, 7],
            input: 8,
            output: 9,
            ctl: 10,
            send_stride: 11,
            out_stride: 12,
            seg: 13,
            area: 14,
            timeout_ns: 15,
            rank: 16,
            nranks: 17,
            mode: 18,
            root: 19,
        };
        let sp = SimpleArgs::from_ll(&ll, 20, 21, 22, true);
        assert_eq!(
            sp,
            SimpleArgs {
                bases: 1,
                region_off: 20,
                note_off: 3,
                note: [4, 5, 6, 7],
                input: 8,
                output: 9,
                ctl: 10,
                send_stride: 11,
                out_stride: 12,
                seg: 13,
                chunk: 21,
                slot: 22,
                timeout_ns: 15,
                rank: 16,
                nranks: 17,
                mode: 18,
                root: 19,
                overlap: 1,
                spread: 0,
                scratch: 0,
                peer_in: [0; super::super::ll::MAX_RANKS],
                peer_out: [0; super::super::ll::MAX_RANKS],
                own: [0; 2],
                expect: [0; super::super::ll::MAX_RANKS],
            }
        );
        // The C struct: 12 eight-byte fields, four note words, six ints, the
        // scratch, two tables of MAX_RANKS addresses, two own addresses and a
        // third table (the ints end 8-byte aligned: no padding before the
        // scratch).
        let m = super::super::ll::MAX_RANKS;
        assert_eq!(
            std::mem::size_of::<SimpleArgs>(),
            12 * 8 + 16 + 6 * 4 + 8 + 2 * m * 8 + 2 * 8 + m * 8
        );
        assert_eq!(
            std::mem::offset_of!(SimpleArgs, scratch),
            12 * 8 + 16 + 6 * 4
        );
    }
}
