//! The point-to-point kernel: a group of device sends and receives (at most
//! one of each per peer) in one kernel on the user's stream, through the
//! Simple kernel's slot rings ([`super::simple`]) — a region of their own,
//! so point-to-point traffic never meets a collective's, and the same
//! protocol: per-writer rings of [`super::simple::SLOTS`] slots, a head word
//! per slot written by the sender, a free word written back by the receiver,
//! 64-bit per-peer counts as credits.
//!
//! What differs from the collectives:
//! * each peer has its own send and receive (address, bytes, chunk, chunks):
//!   [`P2pArgs::send`] and [`P2pArgs::recv`], indexed by rank, `chunks == 0`
//!   where there is none;
//! * every chunk carries a 16-byte header before its data ([`HEADER`]: the
//!   message's byte count and the chunk's index in it), which the receiver
//!   compares with its own receive before it uses the data: a send that
//!   meets a receive of another size fails the receiver with [`ERR_SIZE`]
//!   naming the sender, and the sender with [`ERR_SIZE_SENT`] naming the
//!   receiver (written into its control words, which share the regions'
//!   mapping), instead of shifting every later message of the pair;
//! * a message of 0 bytes is one empty chunk, so it still matches;
//! * a send to the rank itself (`send[rank]`, met by `recv[rank]` of as many
//!   bytes) is a copy by the sending blocks, chunk by chunk, through no ring.
//!
//! Sending blocks take chunks `b, b + half, …` of each peer's message in
//! turn, receiving blocks the same of each peer's; every wait points at a
//! slot's previous use, so with every block resident the kernel progresses
//! whenever the peers' kernels run. A send needs no receive to be running:
//! it completes once the peer's ring has room (128 slots).

use std::ffi::c_void;

/// Bytes of the header in front of every chunk's data in its slot.
pub const HEADER: usize = 16;

/// `ctl[3]`: a chunk's header did not match the receive (the sender, plus
/// one, in bits 32–63).
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

/// One direction of the exchange with one peer (`#[repr(C)]`, the CUDA C
/// `fx_p2p_side`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct P2pSide {
    /// The user's buffer.
    pub ptr: u64,
    /// Its bytes.
    pub bytes: u64,
    /// Bytes per chunk ([`chunk_bytes`]).
    pub chunk: u64,
    /// Chunks (0: nothing this way with this peer).
    pub chunks: u64,
}

impl P2pSide {
    /// A message of `bytes` bytes at `ptr` in slots of `slot` bytes.
    pub fn new(ptr: u64, bytes: usize, slot: usize) -> P2pSide {
        let chunk = chunk_bytes(bytes, slot);
        P2pSide {
            ptr,
            bytes: bytes as u64,
            chunk: chunk as u64,
            chunks: super::simple::chunks(bytes, chunk) as u64,
        }
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
    /// Offset of the point-to-point region in each buffer.
    pub region_off: u64,
    /// This rank's control words (the LL kernel's).
    pub ctl: u64,
    /// Bytes per slot (a multiple of 16, more than [`HEADER`]).
    pub slot: u64,
    /// Longest wait, from the kernel's start.
    pub timeout_ns: u64,
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
    /// The most chunks of any message of the call (at least 1).
    pub fn most_chunks(&self) -> u64 {
        self.send
            .iter()
            .chain(self.recv.iter())
            .map(|s| s.chunks)
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
struct fx_p2p_side { unsigned long long ptr, bytes, chunk, chunks; };
struct fx_p2p_args {
    unsigned long long bases, region_off, ctl, slot, timeout_ns;
    int rank, nranks;
    fx_p2p_side send[FX_SP_MAX_RANKS], recv[FX_SP_MAX_RANKS];
};

extern "C" __global__ void __launch_bounds__(FX_BLOCK) FX_P2P_NAME(const fx_p2p_args a) {
    volatile fx_sp_u* ctl = (volatile fx_sp_u*)a.ctl;
    __shared__ int ok_s;
    __shared__ fx_sp_u sent_s[FX_SP_MAX_RANKS], got_s[FX_SP_MAX_RANKS];
    /* The sides, copied with constant indices (no local memory), read by rank. */
    __shared__ fx_p2p_side send_s[FX_SP_MAX_RANKS], recv_s[FX_SP_MAX_RANKS];
    const fx_sp_u deadline = fx_ll_now() + a.timeout_ns;
    const int n = a.nranks, me = a.rank;
    const fx_sp_u* bases = (const fx_sp_u*)a.bases;
    const fx_sp_u own = bases[me] + a.region_off;
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
        }
    }
    __syncthreads();
    bool ok = true;
    if (sender) {
        /* This rank's own block (a send to itself and its receive, as many
           bytes): copied straight, no ring, no flags. */
        const fx_p2p_side ss = send_s[me], sr = recv_s[me];
        if (ss.ptr != sr.ptr) {
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
                    bool good = g < FX_SP_K || fx_sp_wait(fx_sp_free(own, n, q, k), g + 1ull - FX_SP_K, ctl, deadline, q);
                    if (good) fx_sp_fence();
                    ok_s = good;
                }
                __syncthreads();
                ok = ok_s != 0;
                if (!ok) break;
                const fx_sp_u at = fx_sp_data(peer, n, a.slot, me, k);
                if (threadIdx.x == 0) fx_sp_st16(at, s.bytes, c);
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
            for (fx_sp_u c = first; ok && c < s.chunks; c += half) {
                const fx_sp_u lo = c * s.chunk;
                const fx_sp_u len = s.bytes - lo < s.chunk ? s.bytes - lo : s.chunk;
                const fx_sp_u g = got_s[r] + c;
                const fx_sp_u k = g % FX_SP_K;
                const fx_sp_u at = fx_sp_data(own, n, a.slot, r, k);
                if (threadIdx.x == 0) {
                    bool good = fx_sp_wait(fx_sp_head(own, r, k), g + 1ull, ctl, deadline, r);
                    if (good) {
                        fx_sp_fence();
                        fx_sp_u bytes, index;
                        fx_sp_ld16(at, &bytes, &index);
                        if (bytes != s.bytes || index != c) {
                            ctl[3] = FX_P2P_ERR_SIZE | ((fx_sp_u)(r + 1) << 32);
                            ctl[2] = 1ull;
                            /* The sender's control words, at the same offset in its buffer:
                               its error word first, then its abort word. */
                            volatile fx_sp_u* peer_ctl = (volatile fx_sp_u*)(bases[r] + (a.ctl - bases[me]));
                            peer_ctl[3] = FX_P2P_ERR_SIZE_SENT | ((fx_sp_u)(me + 1) << 32);
                            __threadfence_system();
                            peer_ctl[2] = 1ull;
                            __threadfence_system();
                            good = false;
                        }
                    }
                    ok_s = good;
                }
                __syncthreads();
                ok = ok_s != 0;
                if (!ok) break;
                if (len > 0ull) fx_sp_copy(s.ptr + lo, false, at + 16ull, true, len);
                /* The reads are done before the writer may reuse the slot. */
                __syncthreads();
                if (threadIdx.x == 0) {
                    fx_sp_fence();
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
            }
            __threadfence();
        }
    }
}
"#;

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
                let s = P2pSide::new(0x1000, bytes, slot);
                assert!(
                    s.chunk as usize + HEADER <= slot,
                    "{bytes} in {slot}: {s:?}"
                );
                assert_eq!(s.chunk % 16, 0);
                assert!(s.chunks >= 1, "an empty message is one chunk");
                assert!(
                    (s.chunks - 1) * s.chunk < bytes.max(1) as u64
                        && bytes as u64 <= s.chunks * s.chunk,
                    "{bytes}: {s:?}"
                );
            }
        }
    }

    #[test]
    fn args_match_the_c_struct() {
        // Five 8-byte fields, two ints, then 2 × 16 sides of four 8-byte fields.
        assert_eq!(
            std::mem::size_of::<P2pArgs>(),
            5 * 8 + 2 * 4 + 2 * super::super::ll::MAX_RANKS * 32
        );
        let mut a = P2pArgs {
            bases: 0,
            region_off: 0,
            ctl: 0,
            slot: 4096,
            timeout_ns: 0,
            rank: 0,
            nranks: 3,
            send: [P2pSide::default(); super::super::ll::MAX_RANKS],
            recv: [P2pSide::default(); super::super::ll::MAX_RANKS],
        };
        assert_eq!(
            a.most_chunks(),
            1,
            "nothing to move still launches one pair"
        );
        a.send[1] = P2pSide::new(1, 100_000, 4096);
        a.recv[2] = P2pSide::new(1, 300_000, 4096);
        assert_eq!(a.most_chunks(), a.recv[2].chunks);
    }
}
