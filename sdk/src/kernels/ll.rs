//! The LL exchange kernel: a small collective in one kernel on the user's
//! stream, moving its data through the peers' mapped memory with the flag
//! in the data ("low latency", as NCCL's LL protocol), so no barrier, fence
//! or host thread stands between the ranks.
//!
//! ## Protocol
//!
//! Every rank has an *LL region* in device memory that every peer maps: two
//! parities × `nranks` writers × one *area* of 16-byte lines. A line carries 8
//! bytes of data as two halves `{data: u32, flag: u32}`, written with one
//! 16-byte volatile store and read with one 16-byte volatile load; each 8-byte
//! half is written atomically, so a reader that sees the call's flag in both
//! halves has both data words, with no fence.
//!
//! Call `s` (a 64-bit count kept on the device in the rank's control words,
//! [`CTL_WORDS`], so graph replays advance it too) uses parity `s & 1` and
//! the flag `1 + s mod (2³² − 2)`, never 0 (the region starts zeroed) and
//! different from call `s − 2`'s, the last to use that parity. In every call
//! every rank writes at least one line to every peer and reads at least one
//! from every peer (a rank with no data for a peer sends one *ack* line), so
//! a rank that starts call `s + 2` has finished `s + 1`, which read a line
//! each peer wrote in its own call `s + 1`, which that peer started only
//! after it finished reading call `s`: the area is free again. Two parities
//! suffice.
//!
//! Modes ([`LlArgs::mode`]):
//! * [`MODE_FOLD`] (all_reduce, reduce_scatter): rank `me` sends its input at
//!   `q × send_stride` to rank `q` (`seg` bytes); each rank folds every
//!   rank's segment for it in rank order (its own from its input), so every
//!   rank gets the same bits, with the module's `fx_op`, and writes `out`.
//! * [`MODE_GATHER`] (all_gather, alltoall): as fold, but rank `r`'s
//!   segment lands at `out + r × out_stride`.
//! * [`MODE_BROADCAST`]: the root sends its input to every rank and the
//!   others send it an ack line; every rank writes the root's data to `out`.
//!   With a `send_stride` (scatter) rank `q` gets the root's segment at
//!   `q × send_stride`.
//! * [`MODE_ROOT_GATHER`] (gather): every rank but the root sends its input
//!   to the root, and ack lines to the others (the root to everyone); the
//!   root places rank `r`'s segment at `out + r × out_stride`, the others
//!   write nothing (their `out` may be 0).
//!
//! Reads and writes of the user's buffers take 8 bytes at a time where the
//! address allows it and single bytes elsewhere, so any element alignment
//! works. Each thread writes and reads the same lines, so a rank in place
//! (its output over its input) reads each input line before it writes that
//! output line.
//!
//! ## Waiting, timeout, abort
//!
//! A thread waiting for a line looks at the abort word (`ctl[2]`, raised by
//! the host, e.g. ce's watchdog when a peer died or the call overran
//! `FERROCX_TIMEOUT`) and the clock every 1024 polls. Past
//! [`LlArgs::timeout_ns`] from the kernel's start it raises the abort word and
//! records [`ERR_TIMEOUT`] in `ctl[3]`; a raised abort word makes every wait of
//! this and later calls give up at once. The kernel then ends (its output is
//! undefined): a wait never traps the stream.
//!
//! The last block to finish advances the count (`ctl[0]`) and resets the
//! block counter (`ctl[1]`); every block read the count before it counted
//! itself done, and the next call's kernel starts after this one ended.
//!
//! The grid is at most one wave (every block resident at once), since the
//! blocks of two ranks wait for each other's lines. Two LL kernels on one
//! set of regions must never run at once (they share the count): callers
//! order them, across streams and graph replays too (ce's launch chain).
//! After [`MAX_CALLS`] calls a set of regions is spent: a later call moves
//! nothing and records [`ERR_SPENT`].

use std::ffi::c_void;

/// Most ranks one call can have.
pub const MAX_RANKS: usize = 16;

/// Control words (`u64`) per rank: count, blocks done, abort, error.
pub const CTL_WORDS: usize = 4;

/// Index of the abort word in the control words.
pub const CTL_ABORT: usize = 2;

/// Index of the error word.
pub const CTL_ERROR: usize = 3;

/// `ctl[3]`: a wait ran past the timeout (the peer waited for, plus one, in
/// bits 32–63).
pub const ERR_TIMEOUT: u64 = 1;

/// LL calls one set of regions may carry: the flag of a parity repeats
/// after 2³² − 2 calls, when a line that no call of that parity rewrote since
/// would read as fresh (NCCL cleans its LL buffers periodically instead).
/// The host counts its launches and stops routing to the kernel there; graph
/// replays it cannot count, so a kernel whose call lies past this records
/// [`ERR_SPENT`] and moves nothing.
pub const MAX_CALLS: u64 = (1 << 32) - 4;

/// `ctl[3]`: a call past [`MAX_CALLS`] (replays of captured calls counted).
pub const ERR_SPENT: u64 = 6;

/// Data bytes one 16-byte line carries.
pub const LINE_DATA: usize = 8;

/// Bytes of one line.
pub const LINE: usize = 16;

/// Fold the segments with the module's operator.
pub const MODE_FOLD: i32 = 0;
/// Place rank `r`'s segment at `out + r × out_stride`.
pub const MODE_GATHER: i32 = 1;
/// The root's input to everyone.
pub const MODE_BROADCAST: i32 = 2;
/// Every rank's input to the root, placed as [`MODE_GATHER`] places it (the
/// Simple kernel runs it too; numbered past the Simple kernel's own modes,
/// which share the numbering).
pub const MODE_ROOT_GATHER: i32 = 8;

/// Bytes of one area for segments of up to `seg` bytes (at least one line:
/// the ack).
pub fn area_bytes(seg: usize) -> usize {
    seg.div_ceil(LINE_DATA).max(1) * LINE
}

/// The kernel's one parameter, passed by value (`#[repr(C)]`, as the CUDA C
/// `fx_ll_args` below).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlArgs {
    /// Device memory holding `nranks` addresses: rank `r`'s buffer (its LL
    /// region at `region_off`, the note slot at `note_off`) as this process
    /// reaches it, this rank's own at `rank`. A table in memory rather than
    /// an array parameter, so the kernel indexes it without unrolling.
    pub bases: u64,
    /// Offset of the LL region (two parities × `nranks` areas of `area`
    /// bytes) in each buffer.
    pub region_off: u64,
    /// Offset in each peer's buffer where this rank's note of the call goes
    /// (0: no note).
    pub note_off: u64,
    /// The note's words (ce's call check), written to every peer first.
    pub note: [u32; 4],
    /// This rank's input.
    pub input: u64,
    /// This rank's output.
    pub output: u64,
    /// This rank's control words ([`CTL_WORDS`]).
    pub ctl: u64,
    /// Bytes between the input segments for consecutive ranks (0: one
    /// segment for all).
    pub send_stride: u64,
    /// Bytes between the output places of consecutive ranks' segments
    /// ([`MODE_GATHER`]).
    pub out_stride: u64,
    /// Data bytes per segment.
    pub seg: u64,
    /// Bytes of one area.
    pub area: u64,
    /// Longest wait, from the kernel's start.
    pub timeout_ns: u64,
    /// This rank.
    pub rank: i32,
    /// Ranks.
    pub nranks: i32,
    /// [`MODE_FOLD`], [`MODE_GATHER`], [`MODE_BROADCAST`] or [`MODE_ROOT_GATHER`].
    pub mode: i32,
    /// The root ([`MODE_BROADCAST`], [`MODE_ROOT_GATHER`]).
    pub root: i32,
}

impl LlArgs {
    /// Lines each thread-line index covers: the longest segment a rank sends.
    pub fn lines(&self) -> u64 {
        self.seg.div_ceil(LINE_DATA as u64).max(1)
    }

    /// As a kernel parameter list.
    pub(crate) fn params(&mut self) -> [*mut c_void; 1] {
        [self as *mut LlArgs as *mut c_void]
    }
}

/// The CUDA C of the kernel (after `elem_t` and `fx_op`), entry point
/// `FX_LL_NAME`.
pub const SOURCE: &str = r#"
struct fx_ll_args {
    unsigned long long bases, region_off, note_off;
    unsigned int note[4];
    unsigned long long input, output, ctl, send_stride, out_stride, seg, area, timeout_ns;
    int rank, nranks, mode, root;
};

FX_FN unsigned long long fx_ll_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Line i of a segment of seg bytes at p (the bytes past its end read as 0). */
FX_FN unsigned long long fx_ll_get(unsigned long long p, unsigned long long i, unsigned long long seg) {
    const unsigned long long at = i * 8ull;
    if (at >= seg) return 0ull;
    if (((p + at) & 7ull) == 0ull && at + 8ull <= seg) return *(const unsigned long long*)(p + at);
    unsigned long long v = 0ull;
    const unsigned long long n = seg - at < 8ull ? seg - at : 8ull;
    for (unsigned long long k = 0; k < n; ++k)
        v |= (unsigned long long)(*(const unsigned char*)(p + at + k)) << (8ull * k);
    return v;
}

/* Write line i of a segment of seg bytes at p (only bytes inside it). */
FX_FN void fx_ll_put(unsigned long long p, unsigned long long i, unsigned long long seg, unsigned long long v) {
    const unsigned long long at = i * 8ull;
    if (at >= seg) return;
    if (((p + at) & 7ull) == 0ull && at + 8ull <= seg) { *(unsigned long long*)(p + at) = v; return; }
    const unsigned long long n = seg - at < 8ull ? seg - at : 8ull;
    for (unsigned long long k = 0; k < n; ++k)
        *(unsigned char*)(p + at + k) = (unsigned char)(v >> (8ull * k));
}

FX_FN void fx_ll_store(unsigned long long addr, unsigned long long v, unsigned int flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::
        "l"(addr), "r"((unsigned int)v), "r"(flag), "r"((unsigned int)(v >> 32)), "r"(flag) : "memory");
}

/* Wait for the line at addr to carry flag; false when aborted or past the deadline. */
FX_FN bool fx_ll_wait(unsigned long long addr, unsigned int flag, volatile unsigned long long* ctl,
                      unsigned long long deadline, int peer, unsigned long long* v) {
    unsigned int spins = 0;
    for (;;) {
        unsigned int d0, f0, d1, f1;
        asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
            : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(addr) : "memory");
        if (f0 == flag && f1 == flag) { *v = (unsigned long long)d0 | ((unsigned long long)d1 << 32); return true; }
        if (++spins >= 1024u) {
            spins = 0;
            if (ctl[2] != 0ull) return false;
            if (fx_ll_now() > deadline) {
                ctl[3] = 1ull | ((unsigned long long)(peer + 1) << 32);
                ctl[2] = 1ull;
                __threadfence_system();
                return false;
            }
        }
    }
}

/* Whether rank r sends rank q data in this mode (else one ack line): a
   broadcast's or scatter's root to everyone, every rank to a gather's root. */
FX_FN bool fx_ll_data(int mode, int root, int r, int q) {
    if (mode == 2) return r == root;
    if (mode == 8) return q == root;
    return true;
}

FX_FN unsigned long long fx_ll_op(unsigned long long x, unsigned long long y) {
    union { unsigned long long u; elem_t e[8 / sizeof(elem_t)]; } p, q, r;
    p.u = x;
    q.u = y;
#pragma unroll
    for (int k = 0; k < (int)(8 / sizeof(elem_t)); ++k) r.e[k] = fx_op(p.e[k], q.e[k]);
    return r.u;
}

/* Whether call s lies past the last one a set of regions may carry (0xfffffffc:
   MAX_CALLS; its flags would repeat): then the error word says so (6:
   ERR_SPENT), the abort word is raised, and the kernel moves nothing. */
FX_FN bool fx_ll_spent(volatile unsigned long long* ctl, unsigned long long s) {
    if (s <= 0xfffffffcull) return false;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        atomicCAS((unsigned long long*)&ctl[3], 0ull, 6ull);
        ctl[2] = 1ull;
        __threadfence_system();
    }
    return true;
}

/* The call's note (ce's call check) into every peer's slot at note_off (0:
   none) by thread 0 of the grid, then a fence: a peer that read anything
   this thread wrote after it (the LL kernels' first lines, the Simple
   kernel's first heads) has the note. */
FX_FN void fx_ll_note(const unsigned long long* bases, unsigned long long note_off,
                      const unsigned int* note, int n, int me) {
    if (blockIdx.x != 0 || threadIdx.x != 0 || note_off == 0ull) return;
    for (int q = 0; q < n; ++q) {
        if (q == me) continue;
        volatile unsigned int* at = (volatile unsigned int*)(bases[q] + note_off);
        at[0] = note[0];
        at[1] = note[1];
        at[2] = note[2];
        at[3] = note[3];
    }
    __threadfence_system();
}

/* The end of an LL or LL128 call: the last block to finish advances the
   count to s and resets the blocks-done counter (every block read the count
   before it counted itself done). */
FX_FN void fx_ll_done(volatile unsigned long long* ctl, unsigned long long s) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned long long before = atomicAdd((unsigned long long*)&ctl[1], 1ull);
        __threadfence();
        if (before == (unsigned long long)gridDim.x - 1ull) {
            ctl[1] = 0ull;
            ctl[0] = s;
            __threadfence();
        }
    }
}

extern "C" __global__ void __launch_bounds__(FX_BLOCK) FX_LL_NAME(const fx_ll_args a) {
    volatile unsigned long long* ctl = (volatile unsigned long long*)a.ctl;
    const unsigned long long s = ctl[0] + 1ull;
    if (fx_ll_spent(ctl, s)) return;
    const unsigned int flag = 1u + (unsigned int)(s % 0xfffffffeull);
    const unsigned long long par = s & 1ull;
    const unsigned long long deadline = fx_ll_now() + a.timeout_ns;
    const int n = a.nranks, me = a.rank;
    const unsigned long long lines = (a.seg + 7ull) / 8ull == 0ull ? 1ull : (a.seg + 7ull) / 8ull;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
#define FX_LL_AREA(base, w) ((base) + ((par * (unsigned long long)n + (unsigned long long)(w)) * a.area))
    const unsigned long long* bases = (const unsigned long long*)a.bases;
    fx_ll_note(bases, a.note_off, a.note, n, me);
    /* Lines this rank sends: its data's, or one ack line where it has none
       for anyone (a broadcast's or scatter's non-root, a gather's root). */
    const bool sends_any = a.mode == 2 ? me == a.root : a.mode == 8 ? me != a.root : true;
    for (unsigned long long i = tid; i < (sends_any ? lines : 1ull); i += stride) {
        for (int q = 0; q < n; ++q) {
            if (q == me) continue;
            const bool data = fx_ll_data(a.mode, a.root, me, q);
            if (!data && i >= 1ull) continue;
            const unsigned long long v = data ? fx_ll_get(a.input + (unsigned long long)q * a.send_stride, i, a.seg) : 0ull;
            fx_ll_store(FX_LL_AREA(bases[q] + a.region_off, me) + i * 16ull, v, flag);
        }
    }
    bool ok = true;
    const unsigned long long own = bases[me] + a.region_off;
    const unsigned long long mine = a.input + (unsigned long long)me * a.send_stride;
    /* A gather's other ranks receive acks only: their first line. */
    const unsigned long long takes = (a.mode == 8 && me != a.root) ? 1ull : lines;
    for (unsigned long long i = tid; ok && i < takes; i += stride) {
        unsigned long long acc = 0ull;
        for (int r = 0; r < n; ++r) {
            const bool data_from_r = fx_ll_data(a.mode, a.root, r, me);
            unsigned long long v;
            if (r == me) {
                if (!data_from_r) continue;
                v = fx_ll_get(mine, i, a.seg);
            } else {
                if (!data_from_r && i >= 1ull) continue;
                if (!fx_ll_wait(FX_LL_AREA(own, r) + i * 16ull, flag, ctl, deadline, r, &v)) {
                    ok = false;
                    break;
                }
                if (!data_from_r) continue;
            }
            if (a.mode == 0) {
                acc = r == 0 ? v : fx_ll_op(acc, v);
            } else if (a.mode == 1 || a.mode == 8) {
                const unsigned long long dst = a.output + (unsigned long long)r * a.out_stride;
                if (r != me || dst != mine) fx_ll_put(dst, i, a.seg, v);
            } else if (r != me || a.output != mine) {
                fx_ll_put(a.output, i, a.seg, v);
            }
        }
        if (ok && a.mode == 0) fx_ll_put(a.output, i, a.seg, acc);
    }
#undef FX_LL_AREA
    fx_ll_done(ctl, s);
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_past_the_limit_stop_with_their_own_error_code() {
        // The CUDA C spells the limit and the code as literals.
        assert!(SOURCE.contains(&format!("s <= {MAX_CALLS:#x}ull")));
        assert!(SOURCE.contains(&format!("0ull, {ERR_SPENT}ull)")));
        // Both kernels that share the call count check it first.
        for src in [SOURCE, super::super::ll128::SOURCE] {
            assert!(src.contains("+ 1ull;\n    if (fx_ll_spent(ctl, s)) return;"));
        }
        let codes = [
            ERR_TIMEOUT,
            super::super::p2p::ERR_SIZE,
            super::super::p2p::ERR_SIZE_SENT,
            super::super::graph_wait::ERR_BARRIER,
            super::super::simple::ERR_WINDOW,
            ERR_SPENT,
        ];
        let distinct: std::collections::BTreeSet<u64> = codes.iter().copied().collect();
        assert_eq!(distinct.len(), codes.len(), "{codes:?}");
    }
}
