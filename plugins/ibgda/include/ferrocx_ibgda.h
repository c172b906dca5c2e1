/*
 * ferrocx ibgda device API, first part: the request records a GPU thread
 * writes, posting them into a request queue, and waiting on a signal word.
 *
 * Usable from CUDA C++ compiled by nvcc or NVRTC (no other header needed) and,
 * for the record encoders only, from host C or C++ (the tests compile it on
 * the host and compare the bytes with the Rust proxy's decoder,
 * plugins/ibgda/src/queue/record.rs, which documents the layout).
 *
 * Not yet here (docs/IBGDA.md): reading the completion queue on the GPU
 * (quiet that waits, fetch-add results), the windows' handles from the host
 * ABI, and the mlx5 doorbell. Nothing of it has run on a GPU.
 */
#ifndef FERROCX_IBGDA_H
#define FERROCX_IBGDA_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FXG_FN static __device__ __forceinline__
#define FXG_DEVICE 1
#else
#define FXG_FN static inline
#endif

typedef unsigned long long fxg_u64;
typedef unsigned int fxg_u32;
typedef unsigned char fxg_u8;

/* A request entry: 64 bytes, little-endian fields. */
#define FXG_RECORD_BYTES 64
#define FXG_REC_STAMP 0
#define FXG_REC_KIND 8
#define FXG_REC_SIGNAL_OP 9
#define FXG_REC_WINDOW 12
#define FXG_REC_DST 16
#define FXG_REC_SRC 24
#define FXG_REC_BYTES 32
#define FXG_REC_SIGNAL 40
#define FXG_REC_VALUE 48

#define FXG_KIND_PUT 1
#define FXG_KIND_PUT_SIGNAL 2
#define FXG_KIND_FETCH_ADD 3
#define FXG_KIND_QUIET 4

#define FXG_SIGNAL_SET 0
#define FXG_SIGNAL_ADD 1

/* A ring: a 128-byte header, then the entries. */
#define FXG_RING_PRODUCER 0
#define FXG_RING_SLOTS 8
#define FXG_RING_ENTRY_BYTES 12
#define FXG_RING_CONSUMER 64
#define FXG_RING_HEADER_BYTES 128

/* Comparisons of fxg_signal_wait_until. */
#define FXG_CMP_EQ 0
#define FXG_CMP_NE 1
#define FXG_CMP_GE 2
#define FXG_CMP_GT 3

FXG_FN void fxg_put_u32(fxg_u8* b, fxg_u32 at, fxg_u32 v) {
    for (fxg_u32 k = 0; k < 4; ++k) b[at + k] = (fxg_u8)(v >> (8 * k));
}

FXG_FN void fxg_put_u64(fxg_u8* b, fxg_u32 at, fxg_u64 v) {
    for (fxg_u32 k = 0; k < 8; ++k) b[at + k] = (fxg_u8)(v >> (8 * k));
}

/* Zero a record's body (bytes 8..64; the stamp is the queue's). */
FXG_FN void fxg_record_clear(fxg_u8* r) {
    for (fxg_u32 i = 8; i < FXG_RECORD_BYTES; ++i) r[i] = 0;
}

/* Copy `bytes` from `src` in this rank's window `window` to `dst` in the peer's. */
FXG_FN void fxg_encode_put(fxg_u8* r, fxg_u32 window, fxg_u64 dst, fxg_u64 src, fxg_u32 bytes) {
    fxg_record_clear(r);
    r[FXG_REC_KIND] = FXG_KIND_PUT;
    fxg_put_u32(r, FXG_REC_WINDOW, window);
    fxg_put_u64(r, FXG_REC_DST, dst);
    fxg_put_u64(r, FXG_REC_SRC, src);
    fxg_put_u32(r, FXG_REC_BYTES, bytes);
}

/* A put, then (once its data is visible) `op` (FXG_SIGNAL_SET or _ADD) with
   `value` on the 8-byte signal word at `signal` of the peer's window. */
FXG_FN void fxg_encode_put_signal(fxg_u8* r, fxg_u32 window, fxg_u64 dst, fxg_u64 src, fxg_u32 bytes,
                                  fxg_u64 signal, fxg_u64 value, fxg_u32 op) {
    fxg_encode_put(r, window, dst, src, bytes);
    r[FXG_REC_KIND] = FXG_KIND_PUT_SIGNAL;
    r[FXG_REC_SIGNAL_OP] = (fxg_u8)op;
    fxg_put_u64(r, FXG_REC_SIGNAL, signal);
    fxg_put_u64(r, FXG_REC_VALUE, value);
}

/* Atomic fetch-add of `add` on the 8-byte word at `dst` of the peer's window. */
FXG_FN void fxg_encode_fetch_add(fxg_u8* r, fxg_u32 window, fxg_u64 dst, fxg_u64 add) {
    fxg_record_clear(r);
    r[FXG_REC_KIND] = FXG_KIND_FETCH_ADD;
    fxg_put_u32(r, FXG_REC_WINDOW, window);
    fxg_put_u64(r, FXG_REC_DST, dst);
    fxg_put_u64(r, FXG_REC_VALUE, add);
}

/* A quiet marker: completes after every earlier request of its queue. */
FXG_FN void fxg_encode_quiet(fxg_u8* r) {
    fxg_record_clear(r);
    r[FXG_REC_KIND] = FXG_KIND_QUIET;
}

#ifdef FXG_DEVICE

/* One request queue as a GPU thread sees it: the ring (GPU-visible memory the
   proxy reads) and a claim counter in device memory that only producers touch. */
struct fxg_queue {
    fxg_u8* ring;
    fxg_u64* claimed;
};

FXG_FN fxg_u64 fxg_now() {
    fxg_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Post the record `r` (64 bytes; its stamp bytes are ignored): claim the next
   index while the ring has room, write the body, fence, write the stamp (what
   makes it visible to the consumer), then raise the producer index. Returns
   the request's index (its id in completions), or ~0 when the ring stayed full
   for `timeout_ns` (nothing was claimed: the queue stays usable). Any thread
   may call it; several at once take different indices. */
FXG_FN fxg_u64 fxg_post(const struct fxg_queue q, const fxg_u8* r, fxg_u64 timeout_ns) {
    const fxg_u32 slots = *(volatile const fxg_u32*)(q.ring + FXG_RING_SLOTS);
    const fxg_u32 entry = *(volatile const fxg_u32*)(q.ring + FXG_RING_ENTRY_BYTES);
    volatile fxg_u64* consumer = (volatile fxg_u64*)(q.ring + FXG_RING_CONSUMER);
    const fxg_u64 start = fxg_now();
    fxg_u64 i = *(volatile fxg_u64*)q.claimed;
    for (;;) {
        if (i - *consumer < (fxg_u64)slots) {
            const fxg_u64 seen = atomicCAS(q.claimed, i, i + 1ull);
            if (seen == i) break;
            i = seen;
            continue;
        }
        if (fxg_now() - start > timeout_ns) return ~0ull;
        i = *(volatile fxg_u64*)q.claimed;
    }
    fxg_u8* e = q.ring + FXG_RING_HEADER_BYTES + (i % slots) * (fxg_u64)entry;
    for (fxg_u32 at = 8; at < FXG_RECORD_BYTES; at += 8) {
        fxg_u64 v = 0;
        for (fxg_u32 k = 0; k < 8; ++k) v |= (fxg_u64)r[at + k] << (8 * k);
        *(volatile fxg_u64*)(e + at) = v;
    }
    __threadfence_system();
    *(volatile fxg_u64*)(e + FXG_REC_STAMP) = i + 1ull;
    __threadfence_system();
    atomicMax((fxg_u64*)(q.ring + FXG_RING_PRODUCER), i + 1ull);
    return i;
}

FXG_FN fxg_u64 fxg_put(const struct fxg_queue q, fxg_u32 window, fxg_u64 dst, fxg_u64 src, fxg_u32 bytes,
                       fxg_u64 timeout_ns) {
    fxg_u8 r[FXG_RECORD_BYTES];
    fxg_encode_put(r, window, dst, src, bytes);
    return fxg_post(q, r, timeout_ns);
}

FXG_FN fxg_u64 fxg_put_signal(const struct fxg_queue q, fxg_u32 window, fxg_u64 dst, fxg_u64 src,
                              fxg_u32 bytes, fxg_u64 signal, fxg_u64 value, fxg_u32 op, fxg_u64 timeout_ns) {
    fxg_u8 r[FXG_RECORD_BYTES];
    fxg_encode_put_signal(r, window, dst, src, bytes, signal, value, op);
    return fxg_post(q, r, timeout_ns);
}

FXG_FN fxg_u64 fxg_fetch_add(const struct fxg_queue q, fxg_u32 window, fxg_u64 dst, fxg_u64 add,
                             fxg_u64 timeout_ns) {
    fxg_u8 r[FXG_RECORD_BYTES];
    fxg_encode_fetch_add(r, window, dst, add);
    return fxg_post(q, r, timeout_ns);
}

/* Post a quiet marker (waiting for its completion: not yet here). */
FXG_FN fxg_u64 fxg_post_quiet(const struct fxg_queue q, fxg_u64 timeout_ns) {
    fxg_u8 r[FXG_RECORD_BYTES];
    fxg_encode_quiet(r);
    return fxg_post(q, r, timeout_ns);
}

/* Wait until the signal word compares (FXG_CMP_*) true against `value`: 0, or
   1 after `timeout_ns` (the wait never traps the kernel). */
FXG_FN int fxg_signal_wait_until(const volatile fxg_u64* signal, int cmp, fxg_u64 value, fxg_u64 timeout_ns) {
    const fxg_u64 start = fxg_now();
    for (fxg_u32 spins = 0;; ++spins) {
        const fxg_u64 v = *signal;
        const int ok = cmp == FXG_CMP_EQ ? v == value
                     : cmp == FXG_CMP_NE ? v != value
                     : cmp == FXG_CMP_GE ? v >= value
                                         : v > value;
        if (ok) {
            __threadfence_system();
            return 0;
        }
        if ((spins & 255u) == 255u && fxg_now() - start > timeout_ns) return 1;
    }
}

#endif /* FXG_DEVICE */
#endif /* FERROCX_IBGDA_H */
