//! The point-to-point kernel: a group of device sends and receives (at most
//! one of each per peer) in one kernel on the user's stream, each message in
//! one of two formats chosen by its size alone (so both ends choose alike):
//!
//! * **LL lines** (messages up to a limit the ranks agree on, see
//!   [`P2pSide::new`]): the message as 16-byte lines of 8 data bytes and two
//!   copies of a 32-bit flag ([`super::ll`]'s line), a header line (its byte
//!   count) first, written into a ring of lines that the receiver owns for
//!   this sender, with no fence and no head word: the receiver polls the
//!   lines themselves. Below about a megabyte this saves each chunk's system
//!   fence and head round trip, at half the link's bandwidth.
//! * **Simple chunks** (larger ones): the Simple kernel's slot rings
//!   ([`super::simple`]) — a region of their own, so point-to-point traffic
//!   never meets a collective's — and the same protocol: per-writer rings of
//!   [`super::simple::SLOTS`] slots, a head word per slot written by the
//!   sender, a free word written back by the receiver, 64-bit per-peer counts
//!   as credits.
//!
//! What differs from the collectives:
//! * each peer has its own send and receive (address, bytes, format):
//!   [`P2pArgs::send`] and [`P2pArgs::recv`], indexed by rank, empty where
//!   there is none;
//! * every chunk carries a 16-byte header before its data ([`HEADER`]: the
//!   message's byte count, the chunk's index in it and, in the index's upper
//!   32 bits, how many LL lines the sender had sent the pair before this
//!   message), and every LL message a header line (its byte count, and how
//!   many chunks the sender had sent the pair before it), which the receiver
//!   compares with its own receive and its own counts: a send that meets a
//!   receive of another size fails the receiver with [`ERR_SIZE`] naming the
//!   sender, and the sender with [`ERR_SIZE_SENT`] naming the receiver
//!   (written into its control words, which share the regions' mapping),
//!   instead of shifting every later message of the pair. The counts catch
//!   messages of the two formats taken in another order than sent (a sender
//!   runs ahead: lines X then chunks Y sent, receives posted for Y's size then
//!   X's would otherwise each find a header of their size). A receive's LL
//!   data lines are written while its header is checked: on a mismatch the
//!   receive buffer is undefined (never written past its size);
//! * a receive whose size picks the other format than the send's (one end
//!   below the LL limit, the other above) is the same mismatch: a receiver
//!   waiting for lines also watches the chunk ring's next head word, and one
//!   waiting for a chunk the line ring's next header, and the other format's
//!   sign fails the receive with [`ERR_SIZE`] at once (a right message in its
//!   own format, sent earlier, is visible by then: one more look tells them
//!   apart; the counts above decide the rest);
//! * a message of 0 bytes is one empty chunk or a lone header line, so it
//!   still matches;
//! * a send to the rank itself (`send[rank]`, met by `recv[rank]` of as many
//!   bytes, always in chunks) is a copy by the sending blocks, chunk by chunk,
//!   through no ring.
//!
//! ## The line rings
//!
//! Every rank's LL part ([`ll_part_bytes`], at [`P2pArgs::ll_off`] in each
//! buffer) holds three words per peer — lines sent to it, lines received
//! from it, and how many lines of this rank's ring in that peer's part the
//! peer has consumed (its *credit*, written by the peer) — then one ring of
//! [`P2pArgs::ll_lines`] lines per writer. The pair's lines are numbered from
//! the communicator's start: line `L` goes to slot `L mod R` with the flag
//! `1 + (L div R) mod (2³² − 1)`, its lap, which never matches the slot's
//! previous content (the lap before, or zero) for 2³² − 1 laps. A sender
//! waits until its credit says the reader consumed every line up to
//! `L + lines − R` (the lines its message overwrites), then writes. The
//! reader's last receiving block done with its lines writes the credits (a
//! fourth word counts those blocks), before its chunks: a sender waiting for
//! room never waits for the rest of the reader's kernel, which may include a
//! send of its own that only the sender's next call takes. The counters
//! advance at the kernel's end (its last block).
//! Rings hold two of the largest LL messages ([`ring_lines`]): a send
//! finishes before its receive while the ring has room.
//!
//! Sending blocks take chunks `b, b + half, …` of each peer's message in
//! turn (and lines `b × blockDim + t, …` of each LL message first),
//! receiving blocks the same of each peer's; every wait points at a slot's
//! previous use, a credit the peer's receiving blocks give back once done
//! with their lines (which wait only for lines sent), or a line the peer
//! writes after waiting for no more than that, so with every block resident
//! the kernel progresses whenever the peers' kernels run. (One count for all
//! of a kernel's receiving blocks: a credit also waits for that kernel's
//! lines from other peers.) A send needs no receive to be
//! running: it completes once the peer's ring has room (128 slots, or the
//! line ring).

use std::ffi::c_void;

/// Bytes of the header in front of every chunk's data in its slot.
pub const HEADER: usize = 16;

/// `ctl[3]`: a chunk's header did not match the receive (the sender, plus
/// one, in bits 32–63), or the sender's message took the other format.
pub const ERR_SIZE: u64 = 2;

/// `ctl[3]` of the sender, written by the receiver that found [`ERR_SIZE`]
/// (the receiver, plus one, in bits 32–63), with the sender's abort word:
/// both ends of the mismatched message fail, not only the one that saw it.
pub const ERR_SIZE_SENT: u64 = 3;

/// The chunk for a message of `bytes` bytes in slots of `slot` bytes (a
/// multiple of 16, more than [`HEADER`]): the Simple kernel's sizing with
/// the header's room taken out, up to a whole slot at every size (a send
/// finishes before its receive while the ring holds it: the slot sizes that).
pub fn chunk_bytes(bytes: usize, slot: usize) -> usize {
    super::simple::chunk_within(bytes, slot.saturating_sub(HEADER).max(16))
}

/// Lines of an LL message of `bytes` bytes: its header and one per 8 bytes.
pub fn message_lines(bytes: usize) -> usize {
    1 + bytes.div_ceil(super::ll::LINE_DATA)
}

/// Whether a message of `bytes` bytes travels as LL lines under the limit
/// `ll_max` (0: never): the one rule both ends apply to their own size.
pub fn as_lines(bytes: usize, ll_max: usize) -> bool {
    ll_max > 0 && bytes <= ll_max
}

/// Lines per ring for LL messages of at most `ll_max` bytes (0: no line
/// rings): two of the largest.
pub fn ring_lines(ll_max: usize) -> usize {
    if ll_max == 0 {
        return 0;
    }
    2 * message_lines(ll_max)
}

/// Bytes of the LL words (three per rank and the receiving blocks' count),
/// 256-byte aligned: the rings follow.
pub fn ll_words_bytes(nranks: usize) -> usize {
    ((3 * nranks + 1) * 8).div_ceil(256) * 256
}

/// Bytes of one rank's LL part at `nranks` ranks with rings of `lines`
/// lines (0 without rings; `None` on overflow).
pub fn ll_part_bytes(nranks: usize, lines: usize) -> Option<usize> {
    if lines == 0 {
        return Some(0);
    }
    nranks
        .checked_mul(lines)?
        .checked_mul(super::ll::LINE)?
        .checked_add(ll_words_bytes(nranks))
}

/// One direction of the exchange with one peer (`#[repr(C)]`, the CUDA C
/// `fx_p2p_side`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct P2pSide {
    /// The user's buffer.
    pub ptr: u64,
    /// Its bytes.
    pub bytes: u64,
    /// Bytes per chunk ([`chunk_bytes`]; 0 for LL lines).
    pub chunk: u64,
    /// Chunks (0: nothing this way with this peer, or LL lines).
    pub chunks: u64,
    /// LL lines ([`message_lines`]; 0: chunks, or nothing).
    pub lines: u64,
}

impl P2pSide {
    /// A message of `bytes` bytes at `ptr`: LL lines up to `ll_max` bytes
    /// (0: never), else chunks in slots of `slot` bytes.
    pub fn new(ptr: u64, bytes: usize, slot: usize, ll_max: usize) -> P2pSide {
        if as_lines(bytes, ll_max) {
            return P2pSide {
                ptr,
                bytes: bytes as u64,
                lines: message_lines(bytes) as u64,
                ..P2pSide::default()
            };
        }
        let chunk = chunk_bytes(bytes, slot);
        P2pSide {
            ptr,
            bytes: bytes as u64,
            chunk: chunk as u64,
            chunks: super::simple::chunks(bytes, chunk) as u64,
            lines: 0,
        }
    }

    /// Whether there is a message this way.
    pub fn is_some(&self) -> bool {
        self.chunks != 0 || self.lines != 0
    }

    /// Blocks of `threads` threads the message keeps busy: a block per
    /// chunk, or a thread per line.
    pub fn blocks(&self, threads: u64) -> u64 {
        self.chunks.max(self.lines.div_ceil(threads.max(1)))
    }
}

/// The kernel's one parameter, passed by value (`#[repr(C)]`, as the CUDA C
/// `fx_p2p_args`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pArgs {
    /// Device memory holding `nranks` addresses: rank `r`'s buffer as this
    /// process reaches it (the LL kernel's table).
    pub bases: u64,
    /// Offset of the point-to-point chunk region in each buffer.
    pub region_off: u64,
    /// This rank's control words (the LL kernel's).
    pub ctl: u64,
    /// Bytes per slot (a multiple of 16, more than [`HEADER`]).
    pub slot: u64,
    /// Longest wait, from the kernel's start.
    pub timeout_ns: u64,
    /// Offset of the LL part ([`ll_part_bytes`]) in each buffer.
    pub ll_off: u64,
    /// Lines per ring of the LL part (0: no LL messages).
    pub ll_lines: u64,
    /// This rank.
    pub rank: i32,
    /// Ranks.
    pub nranks: i32,
    /// What this rank sends to each rank.
    pub send: [P2pSide; super::ll::MAX_RANKS],
    /// What it receives from each.
    pub recv: [P2pSide; super::ll::MAX_RANKS],
}

impl P2pArgs {
    /// The most blocks of `threads` threads any message of the call keeps
    /// busy (at least 1).
    pub fn most_blocks(&self, threads: u64) -> u64 {
        self.send
            .iter()
            .chain(self.recv.iter())
            .map(|s| s.blocks(threads))
            .max()
            .unwrap_or(0)
            .max(1)
    }

    /// As a kernel parameter list.
    pub(crate) fn params(&mut self) -> [*mut c_void; 1] {
        [self as *mut P2pArgs as *mut c_void]
    }
}

/// The CUDA C of the kernel (after the Simple kernel's helpers), entry point
/// `FX_P2P_NAME`.
pub const SOURCE: &str = r#"
struct fx_p2p_side { unsigned long long ptr, bytes, chunk, chunks, lines; };
struct fx_p2p_args {
    unsigned long long bases, region_off, ctl, slot, timeout_ns, ll_off, ll_lines;
    int rank, nranks;
    fx_p2p_side send[FX_SP_MAX_RANKS], recv[FX_SP_MAX_RANKS];
};

/* The LL part's words: lines sent to q [q], received from r [n + r], of this
   rank's ring in r's part consumed by r [2n + r], receiving blocks of the
   running kernel done with their lines [3n]; then writer w's ring. */
FX_FN fx_sp_u fx_p2p_word(fx_sp_u part, int i) { return part + (fx_sp_u)i * 8ull; }
FX_FN fx_sp_u fx_p2p_line(fx_sp_u part, int n, fx_sp_u lines, int w, fx_sp_u at) {
    const fx_sp_u words = ((3ull * (fx_sp_u)n + 1ull) * 8ull + 255ull) / 256ull * 256ull;
    return part + words + ((fx_sp_u)w * lines + at % lines) * 16ull;
}
/* Line at's flag in rings of `lines` lines: its lap, never 0 (a zeroed ring). */
FX_FN unsigned int fx_p2p_flag(fx_sp_u at, fx_sp_u lines) {
    return 1u + (unsigned int)((at / lines) % 0xffffffffull);
}

/* Whether the line at `addr` carries `flag` (its data into *v). */
FX_FN bool fx_p2p_has(fx_sp_u addr, unsigned int flag, fx_sp_u* v) {
    unsigned int d0, f0, d1, f1;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(addr) : "memory");
    *v = (fx_sp_u)d0 | ((fx_sp_u)d1 << 32);
    return f0 == flag && f1 == flag;
}

/* Wait for one format's sign from `peer` while watching the other's: with
   `lines`, the line at `line` carrying `flag` (its data into *v), else the
   head word at `head` reaching `want`. 1: it came; 2: the other sign came
   instead (a size mismatch); 0: aborted or past the deadline. */
FX_FN int fx_p2p_wait(bool lines, fx_sp_u line, unsigned int flag, fx_sp_u head, fx_sp_u want,
                      volatile fx_sp_u* ctl, fx_sp_u deadline, int peer, fx_sp_u* v) {
    unsigned int spins = 0;
    for (;;) {
        if (lines ? fx_p2p_has(line, flag, v) : fx_sp_load_acq(head) >= want) return 1;
        if (++spins < 256u) continue;
        spins = 0;
        if (ctl[2] != 0ull) return 0;
        if (fx_ll_now() > deadline) {
            ctl[3] = 1ull | ((fx_sp_u)(peer + 1) << 32);
            ctl[2] = 1ull;
            __threadfence_system();
            return 0;
        }
        fx_sp_u w;
        if (lines ? fx_sp_load(head) >= want : fx_p2p_has(line, flag, &w)) {
            /* The peer's kernel that wrote the other sign started after the
               one that sent this receive's message (if any) ended: one more
               look, after an acquire, finds that message. */
            fx_sp_fence();
            if (lines ? fx_p2p_has(line, flag, v) : fx_sp_load_acq(head) >= want) return 1;
            return 2;
        }
    }
}

/* The receive from r does not match r's send: this rank fails with
   FX_P2P_ERR_SIZE naming r, r with FX_P2P_ERR_SIZE_SENT naming this rank
   (r's control words sit at the same offset in its buffer), both aborted. */
FX_FN void fx_p2p_mismatch(volatile fx_sp_u* ctl, const fx_sp_u* bases, int me, int r) {
    ctl[3] = FX_P2P_ERR_SIZE | ((fx_sp_u)(r + 1) << 32);
    ctl[2] = 1ull;
    volatile fx_sp_u* peer_ctl = (volatile fx_sp_u*)(bases[r] + ((fx_sp_u)ctl - bases[me]));
    peer_ctl[3] = FX_P2P_ERR_SIZE_SENT | ((fx_sp_u)(me + 1) << 32);
    __threadfence_system();
    peer_ctl[2] = 1ull;
    __threadfence_system();
}

extern "C" __global__ void __launch_bounds__(FX_BLOCK) FX_P2P_NAME(const fx_p2p_args a) {
    volatile fx_sp_u* ctl = (volatile fx_sp_u*)a.ctl;
    __shared__ int ok_s;
    __shared__ fx_sp_u sent_s[FX_SP_MAX_RANKS], got_s[FX_SP_MAX_RANKS];
    __shared__ fx_sp_u lsent_s[FX_SP_MAX_RANKS], lgot_s[FX_SP_MAX_RANKS];
    /* The sides, copied with constant indices (no local memory), read by rank. */
    __shared__ fx_p2p_side send_s[FX_SP_MAX_RANKS], recv_s[FX_SP_MAX_RANKS];
    const fx_sp_u deadline = fx_ll_now() + a.timeout_ns;
    const int n = a.nranks, me = a.rank;
    const fx_sp_u* bases = (const fx_sp_u*)a.bases;
    const fx_sp_u own = bases[me] + a.region_off;
    const fx_sp_u own_ll = bases[me] + a.ll_off;
    const fx_sp_u R = a.ll_lines;
    const fx_sp_u half = gridDim.x / 2u;
    const bool sender = blockIdx.x < half;
    const fx_sp_u first = sender ? blockIdx.x : blockIdx.x - half;
    if (threadIdx.x == 0) {
#pragma unroll
        for (int q = 0; q < FX_SP_MAX_RANKS; ++q) {
            send_s[q] = a.send[q];
            recv_s[q] = a.recv[q];
        }
        for (int q = 0; q < n; ++q) {
            sent_s[q] = fx_sp_load(fx_sp_count(own, n, q));
            got_s[q] = fx_sp_load(fx_sp_count(own, n, n + q));
            lsent_s[q] = R == 0ull ? 0ull : fx_sp_load(fx_p2p_word(own_ll, q));
            lgot_s[q] = R == 0ull ? 0ull : fx_sp_load(fx_p2p_word(own_ll, n + q));
        }
    }
    __syncthreads();
    bool ok = true;
    if (sender) {
        /* LL messages first, every thread a line at a time: no fence, no head. */
        for (int j = 1; ok && j < n; ++j) {
            const int q = (me + j) % n;
            const fx_p2p_side s = send_s[q];
            if (s.lines == 0ull) continue;
            const fx_sp_u start = lsent_s[q];
            if (threadIdx.x == 0) {
                /* Room: q consumed every line this message overwrites. */
                const fx_sp_u end = start + s.lines;
                ok_s = end <= R || fx_sp_wait(fx_p2p_word(own_ll, 2 * n + q), end - R, ctl, deadline, q);
            }
            __syncthreads();
            ok = ok_s != 0;
            __syncthreads();
            if (!ok) break;
            const fx_sp_u peer_ll = bases[q] + a.ll_off;
            for (fx_sp_u i = first * blockDim.x + threadIdx.x; i < s.lines; i += half * blockDim.x) {
                const fx_sp_u at = start + i;
                /* The header: the size, and the chunks sent to q before this message. */
                const fx_sp_u v = i == 0ull ? (s.bytes | (sent_s[q] << 32)) : fx_ll_get(s.ptr, i - 1ull, s.bytes);
                fx_ll_store(fx_p2p_line(peer_ll, n, R, me, at), v, fx_p2p_flag(at, R));
            }
        }
        /* This rank's own block (a send to itself and its receive, as many
           bytes): copied straight, no ring, no flags. */
        const fx_p2p_side ss = send_s[me], sr = recv_s[me];
        if (ok && ss.ptr != sr.ptr) {
            for (fx_sp_u c = first; c < ss.chunks; c += half) {
                const fx_sp_u lo = c * ss.chunk;
                const fx_sp_u len = ss.bytes - lo < ss.chunk ? ss.bytes - lo : ss.chunk;
                if (len > 0ull) fx_sp_copy(sr.ptr + lo, false, ss.ptr + lo, false, len);
            }
        }
        for (int j = 1; ok && j < n; ++j) {
            const int q = (me + j) % n;
            const fx_p2p_side s = send_s[q];
            const fx_sp_u peer = bases[q] + a.region_off;
            for (fx_sp_u c = first; ok && c < s.chunks; c += half) {
                const fx_sp_u lo = c * s.chunk;
                const fx_sp_u len = s.bytes - lo < s.chunk ? s.bytes - lo : s.chunk;
                const fx_sp_u g = sent_s[q] + c;
                const fx_sp_u k = g % FX_SP_K;
                if (threadIdx.x == 0) {
                    /* The wait acquires: the peer's reads of the slot came first. */
                    ok_s = g < FX_SP_K || fx_sp_wait(fx_sp_free(own, n, q, k), g + 1ull - FX_SP_K, ctl, deadline, q);
                }
                __syncthreads();
                ok = ok_s != 0;
                if (!ok) break;
                const fx_sp_u at = fx_sp_data(peer, n, a.slot, me, k);
                /* The header: the size, the chunk's index, the lines sent to q before this message. */
                if (threadIdx.x == 0) fx_sp_st16(at, s.bytes, c | (lsent_s[q] << 32));
                if (len > 0ull) fx_sp_copy(at + 16ull, true, s.ptr + lo, false, len);
                __syncthreads();
                if (threadIdx.x == 0) {
                    fx_sp_fence();
                    fx_sp_store(fx_sp_head(peer, me, k), g + 1ull);
                }
            }
        }
    } else {
        for (int j = 1; ok && j < n; ++j) {
            const int r = (me + n - j) % n;
            const fx_p2p_side s = recv_s[r];
            if (s.lines == 0ull) continue;
            const fx_sp_u start = lgot_s[r];
            for (fx_sp_u i = first * blockDim.x + threadIdx.x; ok && i < s.lines; i += half * blockDim.x) {
                const fx_sp_u at = start + i;
                const fx_sp_u line = fx_p2p_line(own_ll, n, R, r, at);
                fx_sp_u v;
                if (i == 0ull) {
                    /* The header, watching for a chunk from r where this receive's turn is:
                       its size and the chunks r sent before it must be this receive's and
                       the chunks received from r so far (else the two formats' messages
                       were taken in another order than sent). */
                    const fx_sp_u g = got_s[r];
                    const int got = fx_p2p_wait(true, line, fx_p2p_flag(at, R), fx_sp_head(own, r, g % FX_SP_K), g + 1ull, ctl, deadline, r, &v);
                    const bool same = got == 1 && v == (s.bytes | (g << 32));
                    if (got != 0 && !same) fx_p2p_mismatch(ctl, bases, me, r);
                    ok = same;
                } else if (fx_ll_wait(line, fx_p2p_flag(at, R), ctl, deadline, r, &v)) {
                    fx_ll_put(s.ptr, i - 1ull, s.bytes, v);
                } else {
                    ok = false;
                }
            }
        }
        /* Every thread agrees before the block-wide chunk loops. */
        ok = __syncthreads_and(ok) != 0;
        /* The last receiving block done with its lines gives the senders their
           ring space back now, not at the kernel's end: a send further on in
           this kernel may be what a sender waits for. */
        if (R != 0ull && threadIdx.x == 0) {
            __threadfence();
            const fx_sp_u before = atomicAdd((fx_sp_u*)fx_p2p_word(own_ll, 3 * n), 1ull);
            if (before == (fx_sp_u)gridDim.x - half - 1ull) {
                /* Every block's reads of the line rings before the senders (other
                   GPUs) may write them again: a release at system scope. */
                __threadfence_system();
                fx_sp_store(fx_p2p_word(own_ll, 3 * n), 0ull);
                for (int q = 0; q < n; ++q)
                    if (q != me && recv_s[q].lines != 0ull)
                        fx_sp_store(fx_p2p_word(bases[q] + a.ll_off, 2 * n + me), lgot_s[q] + recv_s[q].lines);
                __threadfence_system();
            }
        }
        for (int j = 1; ok && j < n; ++j) {
            const int r = (me + n - j) % n;
            const fx_p2p_side s = recv_s[r];
            for (fx_sp_u c = first; ok && c < s.chunks; c += half) {
                const fx_sp_u lo = c * s.chunk;
                const fx_sp_u len = s.bytes - lo < s.chunk ? s.bytes - lo : s.chunk;
                const fx_sp_u g = got_s[r] + c;
                const fx_sp_u k = g % FX_SP_K;
                const fx_sp_u at = fx_sp_data(own, n, a.slot, r, k);
                if (threadIdx.x == 0) {
                    /* Watching for an LL header from r where this receive's turn is. */
                    const fx_sp_u l = lgot_s[r];
                    fx_sp_u unused;
                    const int got = R == 0ull
                        ? (fx_sp_wait(fx_sp_head(own, r, k), g + 1ull, ctl, deadline, r) ? 1 : 0)
                        : fx_p2p_wait(false, fx_p2p_line(own_ll, n, R, r, l), fx_p2p_flag(l, R), fx_sp_head(own, r, k), g + 1ull, ctl, deadline, r, &unused);
                    bool good = got == 1;
                    if (good) {
                        /* The head was read with acquire (fx_sp_wait, fx_p2p_wait). */
                        fx_sp_u bytes, index;
                        fx_sp_ld16(at, &bytes, &index);
                        /* The lines r sent before this message: those received from r so far. */
                        good = bytes == s.bytes && index == (c | (lgot_s[r] << 32));
                    }
                    if (got == 2 || (got == 1 && !good)) fx_p2p_mismatch(ctl, bases, me, r);
                    ok_s = good;
                }
                __syncthreads();
                ok = ok_s != 0;
                if (!ok) break;
                if (len > 0ull) fx_sp_copy(s.ptr + lo, false, at + 16ull, true, len);
                /* The reads are done before the writer may reuse the slot (they
                   returned before the barrier: no fence, as the Simple kernel's
                   frees; 2.3-2.6 µs off 256 KiB-2 MiB sends on 2 H100s). */
                __syncthreads();
                if (threadIdx.x == 0) {
                    fx_sp_store(fx_sp_free(bases[r] + a.region_off, n, me, k), g + 1ull);
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
                fx_sp_store(fx_sp_count(own, n, q), sent_s[q] + send_s[q].chunks);
                fx_sp_store(fx_sp_count(own, n, n + q), got_s[q] + recv_s[q].chunks);
                if (R == 0ull) continue;
                fx_sp_store(fx_p2p_word(own_ll, q), lsent_s[q] + send_s[q].lines);
                fx_sp_store(fx_p2p_word(own_ll, n + q), lgot_s[q] + recv_s[q].lines);
            }
            __threadfence();
        }
    }
}
"#;

#[cfg(test)]
mod model;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_leave_room_for_the_header() {
        for slot in [32, 1040, super::super::simple::DEFAULT_SLOT] {
            for bytes in [
                0,
                1,
                15,
                16,
                17,
                4096,
                65_536,
                65_537,
                4 << 20,
                (4 << 20) + 3,
            ] {
                let s = P2pSide::new(0x1000, bytes, slot, 0);
                assert!(
                    s.chunk as usize + HEADER <= slot,
                    "{bytes} in {slot}: {s:?}"
                );
                assert_eq!(s.chunk % 16, 0);
                assert_eq!(s.lines, 0, "chunks, not lines");
                assert!(s.chunks >= 1, "an empty message is one chunk");
                assert!(
                    (s.chunks - 1) * s.chunk < bytes.max(1) as u64
                        && bytes as u64 <= s.chunks * s.chunk,
                    "{bytes}: {s:?}"
                );
            }
        }
    }

    /// The format follows the size alone, boundary included (±1 byte), and
    /// the largest LL message fits its ring twice.
    #[test]
    fn lines_up_to_the_limit_chunks_above() {
        for ll_max in [8, 4096, 65_536, 1 << 20] {
            for bytes in [0, 1, 8, 9, ll_max - 1, ll_max, ll_max + 1] {
                let s = P2pSide::new(0x1000, bytes, 4096, ll_max);
                if bytes <= ll_max {
                    assert_eq!((s.chunk, s.chunks), (0, 0), "{bytes} ≤ {ll_max}: {s:?}");
                    assert_eq!(s.lines as usize, 1 + bytes.div_ceil(8));
                    assert!(s.is_some(), "a 0-byte message is its header");
                } else {
                    assert_eq!(s.lines, 0, "{bytes} > {ll_max}: {s:?}");
                    assert!(s.chunks >= 1);
                }
            }
            assert_eq!(ring_lines(ll_max), 2 * message_lines(ll_max));
        }
        assert_eq!(ring_lines(0), 0);
        assert!(!P2pSide::default().is_some());
        assert_eq!(ll_part_bytes(4, 0), Some(0));
        assert_eq!(ll_part_bytes(4, 100), Some(256 + 4 * 100 * 16));
        assert_eq!(ll_words_bytes(16), 512, "49 words, 256-byte aligned");
        assert_eq!(ll_words_bytes(10), 256, "31 words");
        assert_eq!(ll_words_bytes(11), 512, "34 words");
        assert_eq!(ll_part_bytes(usize::MAX / 8, 100), None);
    }

    /// The kernel finds the rings past the words that [`ll_words_bytes`]
    /// sizes: the same expression in its C.
    #[test]
    fn the_kernel_places_the_rings_where_the_layout_does() {
        assert!(SOURCE.contains(
            "const fx_sp_u words = ((3ull * (fx_sp_u)n + 1ull) * 8ull + 255ull) / 256ull * 256ull;"
        ));
        for n in 1..=16usize {
            assert_eq!(ll_words_bytes(n), ((3 * n + 1) * 8).div_ceil(256) * 256);
        }
    }

    #[test]
    fn args_match_the_c_struct() {
        // Seven 8-byte fields, two ints, then 2 × 16 sides of five 8-byte fields.
        assert_eq!(
            std::mem::size_of::<P2pArgs>(),
            7 * 8 + 2 * 4 + 2 * super::super::ll::MAX_RANKS * 40
        );
        let mut a = P2pArgs {
            bases: 0,
            region_off: 0,
            ctl: 0,
            slot: 4096,
            timeout_ns: 0,
            ll_off: 0,
            ll_lines: 0,
            rank: 0,
            nranks: 3,
            send: [P2pSide::default(); super::super::ll::MAX_RANKS],
            recv: [P2pSide::default(); super::super::ll::MAX_RANKS],
        };
        assert_eq!(
            a.most_blocks(256),
            1,
            "nothing to move still launches one pair"
        );
        a.send[1] = P2pSide::new(1, 100_000, 4096, 0);
        a.recv[2] = P2pSide::new(1, 300_000, 4096, 0);
        assert_eq!(a.most_blocks(256), a.recv[2].chunks);
        // 1 MiB in lines: 131073 lines, a block per 256 of them.
        a.recv[0] = P2pSide::new(1, 1 << 20, 4096, 1 << 20);
        assert_eq!(a.most_blocks(256), 131_073u64.div_ceil(256));
    }
}
