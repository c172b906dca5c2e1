//! The LL128 exchange kernel: the LL kernel's protocol ([`super::ll`]) in
//! 128-byte lines that carry 120 bytes of data and an 8-byte flag, so a call
//! moves 1.07× its bytes instead of the LL kernel's 2× — for the blocks
//! between the LL kernel's and the Simple kernel's (as NCCL's LL128).
//!
//! ## Protocol
//!
//! The LL kernel's, line for line: the same arguments ([`super::ll::LlArgs`],
//! `region_off` and `area` naming this kernel's region), the same control
//! words (the call count, so LL and LL128 calls on one communicator number
//! their calls together, and the abort and error words), the same parities,
//! flags, modes, ack lines, note, timeout and abort. What differs is the line:
//! 8 lanes of one warp carry one line, lane `q` its bytes `16q..16q+16`;
//! lane 7's last 8 bytes are the flag (the call's 32-bit flag in both
//! halves). A warp writes its four lines with one 16-byte store per lane and
//! reads them with one 16-byte load per lane, after `__syncwarp()`, and takes
//! a line whose flag arrived as arrived whole.
//!
//! That last step is not in the PTX memory model: it holds because a warp's
//! aligned 128-byte store crosses NVLink as one write and a warp's aligned
//! 128-byte load reads one version of the line. NCCL's LL128 relies on the
//! same and enables it only where every path is NVLink; so does ce (every
//! rank on its own GPU, every pair with native peer atomics, which PCIe
//! peers lack — the driver API names no link type, so that is the proxy).
//! Ranks sharing a GPU never run it: two SMs' accesses to one line meet in L2
//! in 32-byte sectors. A region holds only LL128 lines, so data never lies
//! where a flag is read.
//!
//! Like the LL kernel, the grid is at most one wave (4 MiB takes a whole
//! wave of an H100): its blocks wait for each other's ranks, so another
//! kernel holding SMs meanwhile can stall it — until the timeout, which
//! ends it with an error, never a hang.
//!
//! The user's buffers are read and written 8 bytes at a time where aligned
//! (`fx_ll_get` / `fx_ll_put`, any alignment works), each lane the same words
//! in both loops (in place stays correct, as in the LL kernel).

/// Bytes of one line.
pub const LINE: usize = 128;

/// Data bytes one line carries.
pub const LINE_DATA: usize = 120;

/// Lines a block of `seg` bytes takes (at least one: the ack).
pub fn lines(seg: usize) -> usize {
    seg.div_ceil(LINE_DATA).max(1)
}

/// Bytes of one area for segments of up to `seg` bytes.
pub fn area_bytes(seg: usize) -> usize {
    lines(seg) * LINE
}

/// Threads the kernel wants for a segment of `seg` bytes: 8 per line.
pub fn threads(seg: usize) -> usize {
    lines(seg) * 8
}

/// The CUDA C of the kernel (after the LL kernel's source, whose helpers and
/// `fx_ll_args` it uses), entry point `FX_LL128_NAME`.
pub const SOURCE: &str = r#"
FX_FN void fx_l8_store(unsigned long long addr, unsigned long long x, unsigned long long y) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" :: "l"(addr), "l"(x), "l"(y) : "memory");
}

FX_FN void fx_l8_load(unsigned long long addr, unsigned long long* x, unsigned long long* y) {
    asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(*x), "=l"(*y) : "l"(addr) : "memory");
}

extern "C" __global__ void __launch_bounds__(FX_BLOCK) FX_LL128_NAME(const fx_ll_args a) {
    volatile unsigned long long* ctl = (volatile unsigned long long*)a.ctl;
    const unsigned long long s = ctl[0] + 1ull;
    if (fx_ll_spent(ctl, s)) return;
    const unsigned int f32 = 1u + (unsigned int)(s % 0xfffffffeull);
    const unsigned long long flag = ((unsigned long long)f32 << 32) | (unsigned long long)f32;
    const unsigned long long par = s & 1ull;
    const unsigned long long deadline = fx_ll_now() + a.timeout_ns;
    const int n = a.nranks, me = a.rank;
    const unsigned long long lines = a.seg == 0ull ? 1ull : (a.seg + 119ull) / 120ull;
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned long long q = (unsigned long long)(lane & 7u);
    const unsigned long long group = (unsigned long long)(lane >> 3);
    const unsigned long long warp = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const unsigned long long step = (((unsigned long long)gridDim.x * blockDim.x) >> 5) * 4ull;
    const bool flag_lane = q == 7ull;
#define FX_L8_LINES(r) ((a.mode == 2 && (r) != a.root) ? 1ull : lines)
#define FX_L8_AREA(base, w) ((base) + ((par * (unsigned long long)n + (unsigned long long)(w)) * a.area))
    const unsigned long long* bases = (const unsigned long long*)a.bases;
    /* Lane 0 of warp 0 writes the note first; its warp's first lines follow. */
    fx_ll_note(bases, a.note_off, a.note, n, me);
    __syncwarp();
    const bool sends_data = a.mode != 2 || me == a.root;
    /* Every lane of a warp runs every iteration (the loops' bounds are the
       warp's), so each store and load below is one instruction of the whole
       warp: four whole lines. */
    for (unsigned long long i0 = warp * 4ull; i0 < FX_L8_LINES(me); i0 += step) {
        const unsigned long long i = i0 + group;
        const bool live = i < FX_L8_LINES(me);
        const unsigned long long w = 15ull * i + 2ull * q;
        for (int p = 0; p < n; ++p) {
            if (p == me) continue;
            const unsigned long long in = a.input + (unsigned long long)p * a.send_stride;
            unsigned long long x = 0ull, y = flag;
            if (live && sends_data) {
                x = fx_ll_get(in, w, a.seg);
                if (!flag_lane) y = fx_ll_get(in, w + 1ull, a.seg);
            }
            const unsigned long long at = FX_L8_AREA(bases[p] + a.region_off, me) + i * 128ull + q * 16ull;
            __syncwarp();
            if (live) fx_l8_store(at, x, y);
        }
    }
    bool ok = true;
    const unsigned long long own = bases[me] + a.region_off;
    const unsigned long long mine = a.input + (unsigned long long)me * a.send_stride;
    for (unsigned long long i0 = warp * 4ull; ok && i0 < lines; i0 += step) {
        const unsigned long long i = i0 + group;
        const bool live = i < lines;
        const unsigned long long w = 15ull * i + 2ull * q;
        unsigned long long ax = 0ull, ay = 0ull;
        for (int r = 0; ok && r < n; ++r) {
            /* A broadcast's non-roots send one ack line and have no input. */
            const bool data_from_r = a.mode != 2 || r == a.root;
            unsigned long long x = 0ull, y = 0ull;
            if (r == me) {
                if (!data_from_r) continue;
                if (live) {
                    x = fx_ll_get(mine, w, a.seg);
                    if (!flag_lane) y = fx_ll_get(mine, w + 1ull, a.seg);
                }
            } else {
                if (!data_from_r && i0 != 0ull) continue;
                const bool need = live && (data_from_r || i == 0ull);
                const unsigned long long at = FX_L8_AREA(own, r) + i * 128ull + q * 16ull;
                unsigned int spins = 0;
                for (;;) {
                    __syncwarp();
                    if (need) fx_l8_load(at, &x, &y);
                    if (__all_sync(0xffffffffu, !need || !flag_lane || y == flag)) break;
                    if (++spins >= 1024u) {
                        spins = 0;
                        bool stop = ctl[2] != 0ull;
                        /* Any lane past the deadline records it (the lanes may
                           read the clock on either side of it). */
                        if (!stop && fx_ll_now() > deadline) {
                            ctl[3] = 1ull | ((unsigned long long)(r + 1) << 32);
                            ctl[2] = 1ull;
                            __threadfence_system();
                            stop = true;
                        }
                        if (__any_sync(0xffffffffu, stop)) {
                            ok = false;
                            break;
                        }
                    }
                }
                if (!ok || !data_from_r) continue;
            }
            if (!live) continue;
            if (a.mode == 0) {
                const bool first = r == 0;
                ax = first ? x : fx_ll_op(ax, x);
                if (!flag_lane) ay = first ? y : fx_ll_op(ay, y);
            } else {
                const unsigned long long dst = a.mode == 1 ? a.output + (unsigned long long)r * a.out_stride : a.output;
                if (r != me || dst != mine) {
                    fx_ll_put(dst, w, a.seg, x);
                    if (!flag_lane) fx_ll_put(dst, w + 1ull, a.seg, y);
                }
            }
        }
        if (ok && live && a.mode == 0) {
            fx_ll_put(a.output, w, a.seg, ax);
            if (!flag_lane) fx_ll_put(a.output, w + 1ull, a.seg, ay);
        }
    }
#undef FX_L8_LINES
#undef FX_L8_AREA
    fx_ll_done(ctl, s);
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cover_the_segment_with_an_ack_for_nothing() {
        assert_eq!(lines(0), 1);
        assert_eq!(lines(1), 1);
        assert_eq!(lines(120), 1);
        assert_eq!(lines(121), 2);
        assert_eq!(area_bytes(1 << 20), (1usize << 20).div_ceil(120) * 128);
        assert_eq!(threads(240), 16);
        // Far fewer bytes than the LL kernel's lines for the same block.
        assert!(area_bytes(1 << 20) < super::super::ll::area_bytes(1 << 20) * 6 / 10);
    }
}
