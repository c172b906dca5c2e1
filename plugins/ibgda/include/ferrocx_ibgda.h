/*
 * ferrocx ibgda device API, first part: the request records a GPU thread
 * writes, posting them into a request queue, and waiting on a signal word.
 *
 * Usable from CUDA C++ compiled by nvcc or NVRTC (no other header needed) and,
 * for the record encoders only, from host C or C++ (the tests compile it on
 * the host and compare the bytes with the Rust proxy's decoder,
 * plugins/ibgda/src/queue/record.rs, which documents the layout).
 *
 * The completion side: taking completions (`fxg_cq_poll`, also host C, tested
 * against the Rust proxy's encoder), waiting for one request's completion,
 * and a quiet that waits. The view (`struct fxg_view`) a kernel gets from
 * the host side (`device_view`): its queues to every peer and its signal
 * words. For the mlx5 handler, which does not exist yet (docs/IBGDA.md): the
 * WQE writers and doorbell, the CQ poll, and the path health rules on the GPU
 * (the proxy handler keeps health on the host); host C checks them against
 * the Rust encoders, parser and state machine.
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

/* A ring: a 128-byte header, then the entries. The producer index is kept by
   a completion ring's producer (the proxy) only: GPU producers do not keep a
   request ring's (atomics on host memory across PCIe are not portable), and
   consumers go by stamps. */
#define FXG_RING_PRODUCER 0
#define FXG_RING_SLOTS 8
#define FXG_RING_ENTRY_BYTES 12
#define FXG_RING_CONSUMER 64
#define FXG_RING_HEADER_BYTES 128

/* A completion entry: 32 bytes (plugins/ibgda/src/queue/completion.rs). */
#define FXG_CQE_BYTES 32
#define FXG_CQE_REQ_ID 8
#define FXG_CQE_VALUE 16
#define FXG_CQE_PEER 24
#define FXG_CQE_STATUS 28
#define FXG_CQE_PATHS 29

#define FXG_STATUS_OK 0
#define FXG_STATUS_PEER_UNREACHABLE 1
#define FXG_STATUS_BAD_RECORD 2
#define FXG_STATUS_UNKNOWN_PEER 3
/* What fxg_wait_completion and fxg_quiet return when they ran out of time. */
#define FXG_STATUS_TIMEOUT 255

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
   `value` on the 8-byte word at byte `signal` of the peer's signal words. */
FXG_FN void fxg_encode_put_signal(fxg_u8* r, fxg_u32 window, fxg_u64 dst, fxg_u64 src, fxg_u32 bytes,
                                  fxg_u64 signal, fxg_u64 value, fxg_u32 op) {
    fxg_encode_put(r, window, dst, src, bytes);
    r[FXG_REC_KIND] = FXG_KIND_PUT_SIGNAL;
    r[FXG_REC_SIGNAL_OP] = (fxg_u8)op;
    fxg_put_u64(r, FXG_REC_SIGNAL, signal);
    fxg_put_u64(r, FXG_REC_VALUE, value);
}

/* Atomic fetch-add of `add` on the 8-byte word at `dst` of `window` at the
   peer (FXG_SIGNALS: its signal words, the only atomic target of the proxy
   handler). */
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

/* Little-endian fields of a completion (byte loads: any host). */
FXG_FN fxg_u64 fxg_get_u64(const volatile fxg_u8* b, fxg_u32 at) {
    fxg_u64 v = 0;
    for (fxg_u32 k = 0; k < 8; ++k) v |= (fxg_u64)b[at + k] << (8 * k);
    return v;
}

FXG_FN fxg_u32 fxg_get_u32(const volatile fxg_u8* b, fxg_u32 at) {
    fxg_u32 v = 0;
    for (fxg_u32 k = 0; k < 4; ++k) v |= (fxg_u32)b[at + k] << (8 * k);
    return v;
}

#ifdef FXG_DEVICE
#define FXG_FENCE() __threadfence_system()
#else
#define FXG_FENCE() ((void)0)
#endif

/* One completion as the proxy wrote it. */
struct fxg_completion {
    fxg_u64 req_id;
    fxg_u64 value;
    fxg_u32 peer;
    fxg_u8 status;
    fxg_u8 paths;
};

/* Take the next completion of the completion ring `cq`: 1 with `*out` filled
   once its stamp (index + 1) has landed, else 0 (nothing taken). Then the
   consumer index moves on, which gives the proxy room. One consumer per ring
   (a thread that owns the queue's completions). */
FXG_FN int fxg_cq_poll(fxg_u8* cq, struct fxg_completion* out) {
    /* Whole 8-byte loads only: the ring sits in host memory, where every
       load is a bus round trip (the shape word holds slots and entry size),
       and a torn index could read as going backwards. Both sides are
       little-endian. */
    const fxg_u64 shape = *(const volatile fxg_u64*)(cq + FXG_RING_SLOTS);
    const fxg_u32 slots = (fxg_u32)shape;
    const fxg_u32 entry = (fxg_u32)(shape >> 32);
    volatile fxg_u64* consumer = (volatile fxg_u64*)(cq + FXG_RING_CONSUMER);
    const fxg_u64 c = *consumer;
    const volatile fxg_u8* e = cq + FXG_RING_HEADER_BYTES + (c % slots) * (fxg_u64)entry;
    if (*(const volatile fxg_u64*)(e + FXG_REC_STAMP) != c + 1ull) return 0;
    FXG_FENCE(); /* the body after the stamp */
    const fxg_u64 tail = *(const volatile fxg_u64*)(e + FXG_CQE_PEER);
    out->req_id = *(const volatile fxg_u64*)(e + FXG_CQE_REQ_ID);
    out->value = *(const volatile fxg_u64*)(e + FXG_CQE_VALUE);
    out->peer = (fxg_u32)tail;
    out->status = (fxg_u8)(tail >> 32);
    out->paths = (fxg_u8)(tail >> 40);
    FXG_FENCE(); /* read before the slot is handed back */
    *consumer = c + 1ull;
    return 1;
}

/* ---- The view a kernel takes (the host ABI's device_view) ----------------
 *
 * `fxg_view` is what `DevNet::device_view` (Rust) / the devnet table's
 * device_view hook returns for this rank: a device address the kernel takes
 * as a parameter. It says where this rank's queues to every peer are and
 * where its own signal words are. Written once by the plugin's host side
 * (plugins/ibgda/host/src/view.rs); a kernel only reads it.
 *
 * Windows: a put names a window by the number devnet window registration
 * gave it (0, 1, ... in registration order, the same on every rank) and
 * offsets in it (src in this rank's window, dst in the peer's). Signals and
 * fetch-adds act on the peer's SIGNAL WORDS (`FERROCX_IBGDA_SIGNAL_BYTES`
 * per rank, 64 KiB by default; offsets in bytes, 8-aligned): a put_signal's
 * `signal` offset and a fetch_add's `dst` with window FXG_SIGNALS. A kernel
 * reads its own signal words through `fxg_signals(view)`.
 *
 * Data a put brought is visible once its signal is: after
 * fxg_signal_wait_until returns, read it with volatile (or .cv) loads if
 * this kernel may have cached those lines before. */
#define FXG_VIEW_MAGIC 0x56475846u /* "FXGV" */
#define FXG_VIEW_HEADER_BYTES 64
#define FXG_VIEW_PEER_BYTES 32
/* The window number that names the signal words (fetch-adds act there). */
#define FXG_SIGNALS 0xffffffffu

struct fxg_view {
    fxg_u32 magic;   /* FXG_VIEW_MAGIC */
    fxg_u32 version; /* 1 */
    fxg_u32 rank;
    fxg_u32 nranks;
    fxg_u64* signals;     /* this rank's signal words (mapped host memory) */
    fxg_u64 signal_bytes;
    fxg_u64 reserved[4];
    /* then nranks entries of struct fxg_peer (this rank's own is zero) */
};

struct fxg_peer {
    fxg_u8* sq;       /* the request ring to this peer */
    fxg_u64* claimed; /* 2 words of device memory: the producers' claim
                         counter, and the consumer index as last read */
    fxg_u8* cq;       /* its completion ring */
    fxg_u64 reserved;
};

FXG_FN const struct fxg_peer* fxg_peer_of(const struct fxg_view* v, fxg_u32 peer) {
    return (const struct fxg_peer*)((const fxg_u8*)v + FXG_VIEW_HEADER_BYTES) + peer;
}

/* This rank's signal words. */
FXG_FN volatile fxg_u64* fxg_signals(const struct fxg_view* v) {
    return (volatile fxg_u64*)v->signals;
}

/* The completion ring of this rank's queue to `peer` (one consumer: the
   thread that owns the queue's completions). */
FXG_FN fxg_u8* fxg_cq_to(const struct fxg_view* v, fxg_u32 peer) {
    return fxg_peer_of(v, peer)->cq;
}

/* ---- mlx5 send WQEs: the mlx5 handler's GPU side -------------------------
 *
 * NOT BUILT AROUND YET, AND NEVER READ BY A NIC (no RDMA hardware here): the
 * handler that creates the queue pairs and maps their send queue, doorbell
 * record and UAR for the GPU does not exist (docs/IBGDA.md). What is here is
 * what a GPU thread will write, byte for byte the layout of the mlx5 PRM as
 * rdma-core's mlx5dv.h describes it and as plugins/ibgda/src/wqe.rs encodes it
 * (tests/device_header.rs compares the two on every field). Multi-byte fields
 * are big-endian; each WQE here fits one 64-byte basic block. */
#define FXG_MLX5_BB_BYTES 64
#define FXG_MLX5_OPCODE_RDMA_WRITE 0x08u
#define FXG_MLX5_OPCODE_RDMA_WRITE_IMM 0x09u
#define FXG_MLX5_OPCODE_ATOMIC_FA 0x12u
/* fm_ce_se bits: a CQE for this WQE, a solicited event, a fence. */
#define FXG_MLX5_CQ_UPDATE (2u << 2)
#define FXG_MLX5_SOLICITED (1u << 1)
#define FXG_MLX5_FENCE (4u << 5)

FXG_FN void fxg_be32(fxg_u8* b, fxg_u32 at, fxg_u32 v) {
    for (fxg_u32 k = 0; k < 4; ++k) b[at + k] = (fxg_u8)(v >> (24 - 8 * k));
}

FXG_FN void fxg_be64(fxg_u8* b, fxg_u32 at, fxg_u64 v) {
    for (fxg_u32 k = 0; k < 8; ++k) b[at + k] = (fxg_u8)(v >> (56 - 8 * k));
}

/* The control segment of WQE number `idx` (its low 16 bits) of QP `qpn`, the
   rest of the block zeroed. */
FXG_FN void fxg_mlx5_ctrl(fxg_u8* w, fxg_u32 opcode, fxg_u32 idx, fxg_u32 qpn, fxg_u32 ds,
                          fxg_u32 fm_ce_se, fxg_u32 imm) {
    for (fxg_u32 i = 0; i < FXG_MLX5_BB_BYTES; ++i) w[i] = 0;
    fxg_be32(w, 0, ((idx & 0xffffu) << 8) | opcode);
    fxg_be32(w, 4, (qpn << 8) | ds);
    w[11] = (fxg_u8)fm_ce_se;
    fxg_be32(w, 12, imm);
}

/* RDMA WRITE of `len` bytes from (laddr, lkey) to (raddr, rkey): ctrl, raddr, data. */
FXG_FN void fxg_mlx5_write(fxg_u8* w, fxg_u32 qpn, fxg_u32 idx, fxg_u32 fm_ce_se, fxg_u64 raddr,
                           fxg_u32 rkey, fxg_u64 laddr, fxg_u32 lkey, fxg_u32 len) {
    fxg_mlx5_ctrl(w, FXG_MLX5_OPCODE_RDMA_WRITE, idx, qpn, 3, fm_ce_se, 0);
    fxg_be64(w, 16, raddr);
    fxg_be32(w, 24, rkey);
    fxg_be32(w, 32, len);
    fxg_be32(w, 36, lkey);
    fxg_be64(w, 40, laddr);
}

/* RDMA WRITE WITH IMMEDIATE: the write, then `imm` to the peer's receive. */
FXG_FN void fxg_mlx5_write_imm(fxg_u8* w, fxg_u32 qpn, fxg_u32 idx, fxg_u32 fm_ce_se, fxg_u64 raddr,
                               fxg_u32 rkey, fxg_u64 laddr, fxg_u32 lkey, fxg_u32 len, fxg_u32 imm) {
    fxg_mlx5_write(w, qpn, idx, fm_ce_se, raddr, rkey, laddr, lkey, len);
    fxg_be32(w, 0, ((idx & 0xffffu) << 8) | FXG_MLX5_OPCODE_RDMA_WRITE_IMM);
    fxg_be32(w, 12, imm);
}

/* Atomic fetch-add of `add` on the 8-byte word at (raddr, rkey); the old
   value lands at (result, lkey): ctrl, raddr, atomic, data. */
FXG_FN void fxg_mlx5_fetch_add(fxg_u8* w, fxg_u32 qpn, fxg_u32 idx, fxg_u32 fm_ce_se, fxg_u64 raddr,
                               fxg_u32 rkey, fxg_u64 add, fxg_u64 result, fxg_u32 lkey) {
    fxg_mlx5_ctrl(w, FXG_MLX5_OPCODE_ATOMIC_FA, idx, qpn, 4, fm_ce_se, 0);
    fxg_be64(w, 16, raddr);
    fxg_be32(w, 24, rkey);
    fxg_be64(w, 32, add);
    fxg_be32(w, 48, 8);
    fxg_be32(w, 52, lkey);
    fxg_be64(w, 56, result);
}

/* Copy an encoded WQE into its block of a send queue of `slots` blocks. */
FXG_FN void fxg_mlx5_place(fxg_u8* sq, fxg_u32 slots, fxg_u32 idx, const fxg_u8* w) {
    fxg_u8* at = sq + (fxg_u64)(idx & (slots - 1)) * FXG_MLX5_BB_BYTES;
    for (fxg_u32 i = 0; i < FXG_MLX5_BB_BYTES; ++i) at[i] = w[i];
}

/* The doorbell record's word: the next WQE index (the producer counter),
   stored so that its bytes in memory are big-endian. */
FXG_FN fxg_u32 fxg_mlx5_dbrec(fxg_u32 next) {
    const fxg_u32 v = next & 0xffffu;
    return ((v & 0xffu) << 24) | ((v & 0xff00u) << 8);
}

/* ---- mlx5 completions: what a GPU thread reads of a CQ ------------------
 *
 * NEVER WRITTEN BY A NIC HERE EITHER (docs/IBGDA.md): the 64-byte entries of
 * a CQ as mlx5dv.h lays them out and plugins/ibgda/src/cqe.rs parses them
 * (tests/device_header.rs compares the two). An entry at consumer index `ci`
 * of a CQ of 2^log_size entries is software's when its owner bit (op_own,
 * byte 63, bit 0) equals the lap parity (ci >> log_size) & 1 and its opcode
 * (op_own's high nibble) is not INVALID; send completions are cumulative. */
#define FXG_MLX5_CQE_BYTES 64
#define FXG_MLX5_CQE_REQ_ERR 0xdu
#define FXG_MLX5_CQE_RESP_ERR 0xeu
#define FXG_MLX5_CQE_INVALID 0xfu
#define FXG_MLX5_CQE_REQ 0x0u
/* fxg_mlx5_cqe_poll's answers. */
#define FXG_MLX5_CQE_EMPTY 0
#define FXG_MLX5_CQE_DONE 1
#define FXG_MLX5_CQE_FAILED 2
/* An opcode a send CQ never carries (the path's failure). */
#define FXG_MLX5_CQE_UNEXPECTED 3

/* The entry at consumer index `ci` of the CQ at `cq` (a fresh CQ's entries
   are 0xf0: INVALID, owner 0): EMPTY while the NIC owns it; else DONE,
   FAILED or UNEXPECTED with its WQE counter and in `syndrome` the error
   syndrome (FAILED), the opcode (UNEXPECTED) or 0 (DONE). op_own is read
   first, the rest after it (a fence between, on the device). */
FXG_FN int fxg_mlx5_cqe_poll(const volatile fxg_u8* cq, fxg_u32 ci, fxg_u32 log_size,
                             fxg_u32* wqe_counter, fxg_u32* syndrome) {
    const volatile fxg_u8* e = cq + (fxg_u64)(ci & ((1u << log_size) - 1u)) * FXG_MLX5_CQE_BYTES;
    const fxg_u32 op_own = e[63];
    const fxg_u32 opcode = op_own >> 4;
    if (opcode == FXG_MLX5_CQE_INVALID || (op_own & 1u) != ((ci >> log_size) & 1u))
        return FXG_MLX5_CQE_EMPTY;
#ifdef FXG_DEVICE
    __threadfence_system();
#endif
    *wqe_counter = ((fxg_u32)e[60] << 8) | (fxg_u32)e[61];
    if (opcode == FXG_MLX5_CQE_REQ_ERR || opcode == FXG_MLX5_CQE_RESP_ERR) {
        *syndrome = e[55];
        return FXG_MLX5_CQE_FAILED;
    }
    if (opcode != FXG_MLX5_CQE_REQ) {
        *syndrome = opcode;
        return FXG_MLX5_CQE_UNEXPECTED;
    }
    *syndrome = 0;
    return FXG_MLX5_CQE_DONE;
}

/* The CQ doorbell record's first word after taking the entries before
   `ci`: the 24-bit consumer index, its bytes big-endian in memory. */
FXG_FN fxg_u32 fxg_mlx5_cq_dbrec(fxg_u32 ci) {
    const fxg_u32 v = ci & 0xffffffu;
    return ((v & 0xffu) << 24) | ((v & 0xff00u) << 8) | ((v >> 8) & 0xff00u);
}

/* ---- per-(me, peer) path health: the mlx5 handler's rules on the GPU ----
 *
 * NOT USED YET (the proxy handler keeps health on the host, in
 * plugins/ibgda/src/health/path.rs's PathHealth). The same state machine in
 * C for the mlx5 handler, where GPU threads see completions, timeouts and
 * error CQEs themselves: a path with a timed-out or failed request goes
 * down (its requests are posted again on the other path); a down path comes
 * back once its recovery window passes with no new failure (the window
 * counts from the last one); a path that fails again within its window of
 * coming back flaps, and its window doubles up to max_recovery, while one
 * that stayed up a whole window starts again from recovery. One struct per
 * peer, changed by one thread at a time (the caller serializes: a per-peer
 * lock, or one owning thread). Times are nanoseconds (%globaltimer on the
 * device); sums saturate. tests/device_header.rs drives random scripts
 * through both and compares every answer. */
#define FXG_PATH_PRIMARY 0u
#define FXG_PATH_BACKUP 1u
/* fxg_health_route: both paths (or the only one) are down. */
#define FXG_PATH_NONE 2u

struct fxg_path_slot {
    fxg_u32 down, has_restored;
    fxg_u64 since, last_failure, window, restored;
};

struct fxg_health {
    struct fxg_path_slot p[2];
    fxg_u32 has_backup;
    fxg_u64 recovery, max_recovery;
};

FXG_FN fxg_u64 fxg_sat_add(fxg_u64 a, fxg_u64 b) {
    return a + b < a ? ~0ull : a + b;
}

FXG_FN void fxg_health_init(struct fxg_health* h, fxg_u32 has_backup, fxg_u64 recovery,
                            fxg_u64 max_recovery) {
    for (fxg_u32 i = 0; i < 2; ++i) {
        h->p[i].down = 0;
        h->p[i].has_restored = 0;
        h->p[i].since = h->p[i].last_failure = h->p[i].restored = 0;
        h->p[i].window = recovery;
    }
    h->has_backup = has_backup;
    h->recovery = recovery;
    h->max_recovery = max_recovery < recovery ? recovery : max_recovery;
}

/* The path new traffic takes: the primary while up, else the backup while up. */
FXG_FN fxg_u32 fxg_health_route(const struct fxg_health* h) {
    if (!h->p[0].down) return FXG_PATH_PRIMARY;
    if (h->has_backup && !h->p[1].down) return FXG_PATH_BACKUP;
    return FXG_PATH_NONE;
}

/* A failure on `path` at `now`: 1 when it took the path down, 0 when it was
   down already (its window restarts from now) or does not exist. */
FXG_FN int fxg_health_mark_bad(struct fxg_health* h, fxg_u32 path, fxg_u64 now) {
    if (path > FXG_PATH_BACKUP || (path == FXG_PATH_BACKUP && !h->has_backup)) return 0;
    struct fxg_path_slot* s = &h->p[path];
    if (s->down) {
        if (now > s->last_failure) s->last_failure = now;
        return 0;
    }
    const int flapped = s->has_restored && now < fxg_sat_add(s->restored, s->window);
    if (flapped) {
        const fxg_u64 twice = fxg_sat_add(s->window, s->window);
        s->window = twice < h->max_recovery ? twice : h->max_recovery;
    } else {
        s->window = h->recovery;
    }
    s->down = 1;
    s->since = s->last_failure = now;
    return 1;
}

/* Takes back every down path whose window has passed since its last failure:
   bit 0 the primary (the switch back), bit 1 the backup. */
FXG_FN fxg_u32 fxg_health_restore_due(struct fxg_health* h, fxg_u64 now) {
    fxg_u32 back = 0;
    for (fxg_u32 i = 0; i < (h->has_backup ? 2u : 1u); ++i) {
        struct fxg_path_slot* s = &h->p[i];
        if (s->down && now >= fxg_sat_add(s->last_failure, s->window)) {
            s->down = 0;
            s->has_restored = 1;
            s->restored = now;
            back |= 1u << i;
        }
    }
    return back;
}

/* When the next down path is due back; ~0 when none is down (or when the
   due time saturated: such a path never comes back either way). */
FXG_FN fxg_u64 fxg_health_next_restore(const struct fxg_health* h) {
    fxg_u64 next = ~0ull;
    for (fxg_u32 i = 0; i < (h->has_backup ? 2u : 1u); ++i) {
        const struct fxg_path_slot* s = &h->p[i];
        const fxg_u64 due = fxg_sat_add(s->last_failure, s->window);
        if (s->down && due < next) next = due;
    }
    return next;
}

#ifdef FXG_DEVICE

/* One request queue as a GPU thread sees it: the ring (GPU-visible memory the
   proxy reads) and two words of device memory only producers touch:
   claimed[0] counts the claimed entries (it stands for the producer index,
   which the ring does not keep), claimed[1] caches the consumer index. */
struct fxg_queue {
    fxg_u8* ring;
    fxg_u64* claimed;
};

/* This rank's request queue to `peer`. */
FXG_FN struct fxg_queue fxg_queue_to(const struct fxg_view* v, fxg_u32 peer) {
    const struct fxg_peer* p = fxg_peer_of(v, peer);
    struct fxg_queue q;
    q.ring = p->sq;
    q.claimed = p->claimed;
    return q;
}

FXG_FN fxg_u64 fxg_now() {
    fxg_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Post the record `r` (64 bytes; its stamp bytes are ignored): claim the next
   index while the ring has room, write the body, fence, write the stamp. The
   stamp publishes the entry: the ring's producer index is not touched (the
   proxy takes entry c once its stamp says c + 1), so the ring needs no
   atomics, only whole 8-byte stores. Returns the request's index (its id in
   completions), or ~0 when the ring stayed full for `timeout_ns` (nothing was
   claimed: the queue stays usable). Any thread may call it; several at once
   take different indices. */
FXG_FN fxg_u64 fxg_post(const struct fxg_queue q, const fxg_u8* r, fxg_u64 timeout_ns) {
    const fxg_u64 shape = *(const volatile fxg_u64*)(q.ring + FXG_RING_SLOTS);
    const fxg_u32 slots = (fxg_u32)shape;
    const fxg_u32 entry = (fxg_u32)(shape >> 32);
    volatile fxg_u64* consumer = (volatile fxg_u64*)(q.ring + FXG_RING_CONSUMER);
    /* claimed[1] caches the consumer index in device memory: the index in
       the ring (host memory, a bus round trip) is read only when the cached
       one says the ring is full. A cached value is one the index really had,
       so it is never ahead of it: at worst the ring looks full too early and
       the index is read again. */
    volatile fxg_u64* seen = (volatile fxg_u64*)(q.claimed + 1);
    const fxg_u64 start = fxg_now();
    fxg_u64 i = *(volatile fxg_u64*)q.claimed;
    for (;;) {
        if (i - *seen >= (fxg_u64)slots) {
            const fxg_u64 c = *consumer;
            if (c > *seen) *seen = c;
            if (i - c >= (fxg_u64)slots) {
                if (fxg_now() - start > timeout_ns) return ~0ull;
                i = *(volatile fxg_u64*)q.claimed;
                continue;
            }
        }
        const fxg_u64 got = atomicCAS(q.claimed, i, i + 1ull);
        if (got == i) break;
        i = got;
    }
    fxg_u8* e = q.ring + FXG_RING_HEADER_BYTES + (i % slots) * (fxg_u64)entry;
    for (fxg_u32 at = 8; at < FXG_RECORD_BYTES; at += 8) {
        fxg_u64 v = 0;
        for (fxg_u32 k = 0; k < 8; ++k) v |= (fxg_u64)r[at + k] << (8 * k);
        *(volatile fxg_u64*)(e + at) = v;
    }
    __threadfence_system();
    *(volatile fxg_u64*)(e + FXG_REC_STAMP) = i + 1ull;
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

/* Post a quiet marker; its completion comes after every earlier request's. */
FXG_FN fxg_u64 fxg_post_quiet(const struct fxg_queue q, fxg_u64 timeout_ns) {
    fxg_u8 r[FXG_RECORD_BYTES];
    fxg_encode_quiet(r);
    return fxg_post(q, r, timeout_ns);
}

/* Take completions of `cq` until request `id`'s: its status (and `*out`),
   or FXG_STATUS_TIMEOUT after `timeout_ns`. The completions of other requests
   taken on the way are dropped, their worst status kept in `*others` (0 when
   all were OK): wait for a fetch-add's result before a later quiet. */
FXG_FN int fxg_wait_completion(fxg_u8* cq, fxg_u64 id, struct fxg_completion* out, int* others,
                               fxg_u64 timeout_ns) {
    const fxg_u64 start = fxg_now();
    *others = FXG_STATUS_OK;
    for (;;) {
        struct fxg_completion c;
        if (fxg_cq_poll(cq, &c)) {
            if (c.req_id == id) {
                *out = c;
                return c.status;
            }
            if (c.status != FXG_STATUS_OK && *others == FXG_STATUS_OK) *others = c.status;
        } else if (fxg_now() - start > timeout_ns) {
            return FXG_STATUS_TIMEOUT;
        }
    }
}

/* Quiet: post a marker and wait until it completed, so every earlier request
   of the queue has. FXG_STATUS_OK, the first error any of them ended with
   (the completion names the peer and paths; see docs/IBGDA.md), or
   FXG_STATUS_TIMEOUT. The caller owns the queue's completions. */
FXG_FN int fxg_quiet(const struct fxg_queue q, fxg_u8* cq, fxg_u64 timeout_ns) {
    const fxg_u64 id = fxg_post_quiet(q, timeout_ns);
    if (id == ~0ull) return FXG_STATUS_TIMEOUT;
    struct fxg_completion c;
    int others = FXG_STATUS_OK;
    const int s = fxg_wait_completion(cq, id, &c, &others, timeout_ns);
    return others != FXG_STATUS_OK ? others : s;
}

/* Warp and block forms. Every thread of the warp (of the block) calls them,
   converged, with the same arguments; one thread posts (or quiets) and every
   thread gets its result, as NVSHMEM's _warp and _block calls. The block
   forms synchronize the block (__syncthreads) before and after. */
FXG_FN fxg_u32 fxg_lane() {
    fxg_u32 l;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

FXG_FN fxg_u64 fxg_put_warp(const struct fxg_queue q, fxg_u32 window, fxg_u64 dst, fxg_u64 src,
                            fxg_u32 bytes, fxg_u64 timeout_ns) {
    fxg_u64 id = 0;
    if (fxg_lane() == 0) id = fxg_put(q, window, dst, src, bytes, timeout_ns);
    return __shfl_sync(0xffffffffu, id, 0);
}

FXG_FN fxg_u64 fxg_put_signal_warp(const struct fxg_queue q, fxg_u32 window, fxg_u64 dst, fxg_u64 src,
                                   fxg_u32 bytes, fxg_u64 signal, fxg_u64 value, fxg_u32 op,
                                   fxg_u64 timeout_ns) {
    fxg_u64 id = 0;
    if (fxg_lane() == 0) id = fxg_put_signal(q, window, dst, src, bytes, signal, value, op, timeout_ns);
    return __shfl_sync(0xffffffffu, id, 0);
}

FXG_FN int fxg_quiet_warp(const struct fxg_queue q, fxg_u8* cq, fxg_u64 timeout_ns) {
    int s = 0;
    if (fxg_lane() == 0) s = fxg_quiet(q, cq, timeout_ns);
    return __shfl_sync(0xffffffffu, s, 0);
}

FXG_FN int fxg_block_leader() {
    return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

FXG_FN fxg_u64 fxg_put_block(const struct fxg_queue q, fxg_u32 window, fxg_u64 dst, fxg_u64 src,
                             fxg_u32 bytes, fxg_u64 timeout_ns) {
    __shared__ fxg_u64 id;
    __syncthreads();
    if (fxg_block_leader()) id = fxg_put(q, window, dst, src, bytes, timeout_ns);
    __syncthreads();
    return id;
}

FXG_FN fxg_u64 fxg_put_signal_block(const struct fxg_queue q, fxg_u32 window, fxg_u64 dst, fxg_u64 src,
                                    fxg_u32 bytes, fxg_u64 signal, fxg_u64 value, fxg_u32 op,
                                    fxg_u64 timeout_ns) {
    __shared__ fxg_u64 id;
    __syncthreads();
    if (fxg_block_leader()) id = fxg_put_signal(q, window, dst, src, bytes, signal, value, op, timeout_ns);
    __syncthreads();
    return id;
}

FXG_FN int fxg_quiet_block(const struct fxg_queue q, fxg_u8* cq, fxg_u64 timeout_ns) {
    __shared__ int s;
    __syncthreads();
    if (fxg_block_leader()) s = fxg_quiet(q, cq, timeout_ns);
    __syncthreads();
    return s;
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

/* Ring the NIC for the WQEs up to (not including) index `next`, the last of
   them `w`: the WQEs visible, then the doorbell record, then the first 8
   bytes of the last WQE's control segment written to the UAR doorbell. */
FXG_FN void fxg_mlx5_ring(volatile fxg_u32* dbrec, volatile fxg_u64* uar, fxg_u32 next, const fxg_u8* w) {
    __threadfence_system();
    *dbrec = fxg_mlx5_dbrec(next);
    __threadfence_system();
    fxg_u64 v = 0;
    for (fxg_u32 k = 0; k < 8; ++k) v |= (fxg_u64)w[k] << (8 * k);
    *uar = v;
    __threadfence_system();
}

#endif /* FXG_DEVICE */

/* ---- the mlx5 handler's put with failover: WQE, doorbell, CQ, health -----
 *
 * NOT USED YET, NEVER RUN AGAINST A NIC (docs/IBGDA.md): what a GPU thread
 * does to put bytes to a peer over two RC QPs (the primary and the backup
 * path, one per NIC or port), the health rules above deciding which. One
 * thread owns a peer's struct at a time (the caller serializes), one put
 * per peer in flight. A put is posted signaled on the route path and waited
 * for: its CQE done, it returns FXG_MLX5_OK; no CQE within the timeout, an
 * error completion or an opcode a send CQ never carries marks the path down
 * (any error puts an RC QP in the error state) and the put is posted again
 * on the other path, except for an error the syndrome blames on the request
 * (keys, lengths), which returns FXG_MLX5_ERR_REQUEST (the path goes down
 * all the same). A path is tried once per put: with both tried or down it
 * returns FXG_MLX5_ERR_UNREACHABLE, so a put never waits past twice the
 * timeout. A path whose send queue holds `slots` WQEs never completed (a
 * silent NIC) counts as failed without posting. A put that timed out may
 * have landed too, so its bytes can arrive twice (the same bytes at the
 * same place); fxg_mlx5_put_signal_sync adds a signal SET (a fenced second
 * WRITE, which may also land twice: the same value); signal adds and atomics,
 * which must apply once, are not carried here. The CQs of down paths are drained first, so late errors push their
 * recovery back as on the host. A down path is taken back after its window;
 * an errored QP must have been reset and handed over by then (a fresh QP
 * with pi, ci and done at 0: the handshake is not built, docs/IBGDA.md),
 * else its next put fails and the window doubles. `dbrec` is the send
 * doorbell word (dbrec[1] of the QP's record); each path's CQ has at least
 * as many entries as its send queue has slots (FXG_MLX5_ERR_INVALID
 * otherwise, and for lengths of 0 or 2^31 and more).
 *
 * Host C (the tests) defines FXG_HOST_CLOCK() (nanoseconds) and
 * FXG_HOST_IDLE() (a simulated NIC's step) before including the header. */
#if defined(FXG_DEVICE) || defined(FXG_HOST_CLOCK)
#ifdef FXG_DEVICE
#define FXG_PUT_CLOCK() fxg_now()
#define FXG_PUT_IDLE() ((void)0)
#define FXG_PUT_FENCE() __threadfence_system()
#else
#define FXG_PUT_CLOCK() FXG_HOST_CLOCK()
#define FXG_PUT_IDLE() FXG_HOST_IDLE()
#define FXG_PUT_FENCE() ((void)0)
#endif

#define FXG_MLX5_OK 0
#define FXG_MLX5_ERR_REQUEST 1
#define FXG_MLX5_ERR_UNREACHABLE 2
#define FXG_MLX5_ERR_INVALID 3

/* One path: an RC QP's send queue (slots basic blocks, a power of two), its
   send doorbell word and UAR, its CQ (2^cq_log 64-byte entries) and CQ
   doorbell record, the keys of this rank's source buffer and the peer's
   window on this path's NIC, the window's address there. pi: WQEs posted;
   done: WQEs known complete (every one before it); ci: the CQ's consumer
   index. */
struct fxg_mlx5_path {
    fxg_u8* sq;
    fxg_u32 slots, qpn;
    volatile fxg_u32* dbrec;
    volatile fxg_u64* uar;
    const volatile fxg_u8* cq;
    fxg_u32 cq_log;
    volatile fxg_u32* cq_dbrec;
    fxg_u64 raddr;
    fxg_u32 rkey, lkey;
    fxg_u32 pi, done, ci;
};

struct fxg_mlx5_peer {
    struct fxg_mlx5_path path[2];
    struct fxg_health health;
    fxg_u64 timeout_ns;
};

/* The mlx5 handler's table of a view: nranks entries (this rank's own is
   zero), each owned by one thread at a time; NULL where the proxy handler
   alone serves the communicator (describe says why). The host keeps its
   address in the view's reserved[0]. Puts go from and to the first device
   window registered (the signal words before one is). */
FXG_FN struct fxg_mlx5_peer* fxg_mlx5_peers(const struct fxg_view* v) {
    return (struct fxg_mlx5_peer*)(v->reserved[0]);
}

/* Whom an error CQE's syndrome blames: 1 the request (no path could carry
   it), 0 the path (plugins/ibgda/src/cqe.rs, Syndrome::blame). */
FXG_FN int fxg_mlx5_blames_request(fxg_u32 syndrome) {
    switch (syndrome) {
    case 0x01: case 0x02: case 0x04: case 0x06: case 0x11: case 0x12: case 0x13:
        return 1;
    default:
        return 0;
    }
}

/* Write an RDMA WRITE of len bytes from src to the window at dst_off into
   path p's send queue (the queue has room: see fxg_mlx5_put_signal_sync),
   with fm_ce_se's flags, into w too; its WQE index. */
FXG_FN fxg_u32 fxg_mlx5_post_write(struct fxg_mlx5_path* p, fxg_u8* w, fxg_u64 dst_off, fxg_u64 src,
                                   fxg_u32 len, fxg_u32 fm_ce_se) {
    const fxg_u32 idx = p->pi;
    fxg_mlx5_write(w, p->qpn, idx, fm_ce_se, p->raddr + dst_off, p->rkey, src, p->lkey, len);
    fxg_mlx5_place(p->sq, p->slots, idx, w);
    p->pi = idx + 1u;
    return idx;
}

/* Ring path p's doorbell for every WQE posted, the last of them w. */
FXG_FN void fxg_mlx5_doorbell(struct fxg_mlx5_path* p, const fxg_u8* w) {
    FXG_PUT_FENCE();
    *p->dbrec = fxg_mlx5_dbrec(p->pi);
    FXG_PUT_FENCE();
    fxg_u64 v = 0;
    for (fxg_u32 k = 0; k < 8; ++k) v |= (fxg_u64)w[k] << (8 * k);
    *p->uar = v;
    FXG_PUT_FENCE();
}

/* Take path p's next CQE: 0 when none is there; else its kind and WQE
   counter widened to the posted index it stands for (the latest such below
   pi), `done` advanced past it, the CQ doorbell record updated. */
FXG_FN int fxg_mlx5_take_one(struct fxg_mlx5_path* p, fxg_u32* idx, fxg_u32* syndrome) {
    fxg_u32 wc = 0;
    const int k = fxg_mlx5_cqe_poll(p->cq, p->ci, p->cq_log, &wc, syndrome);
    if (k == FXG_MLX5_CQE_EMPTY) return 0;
    p->ci = (p->ci + 1u) & 0xffffffu;
    FXG_PUT_FENCE();
    *p->cq_dbrec = fxg_mlx5_cq_dbrec(p->ci);
    *idx = p->pi - 1u - ((p->pi - 1u - wc) & 0xffffu);
    if (*idx + 1u - p->done <= p->pi - p->done) p->done = *idx + 1u;
    return k;
}

/* Every CQE path p holds now (none awaited): errors are failures at `now`. */
FXG_FN void fxg_mlx5_drain(struct fxg_health* h, fxg_u32 path, struct fxg_mlx5_path* p, fxg_u64 now) {
    fxg_u32 idx = 0, sy = 0;
    int k;
    while ((k = fxg_mlx5_take_one(p, &idx, &sy)) != 0)
        if (k != FXG_MLX5_CQE_DONE) fxg_health_mark_bad(h, path, now);
}

/* Put len bytes from src (lkey'd on both NICs) to the peer's window at
   dst_off and, when sig_src is not 0, then set the 8-byte signal word at
   sig_off in the window to the 8 bytes at sig_src (a second WRITE, fenced
   after the data: a peer that sees the signal has the data; setting a word
   twice is harmless, adding to it would not be, so there is no add here):
   FXG_MLX5_OK, FXG_MLX5_ERR_REQUEST (syndrome in *why),
   FXG_MLX5_ERR_UNREACHABLE or FXG_MLX5_ERR_INVALID; *failovers counts the
   puts posted again on the other path. */
FXG_FN int fxg_mlx5_put_signal_sync(struct fxg_mlx5_peer* peer, fxg_u64 dst_off, fxg_u64 src, fxg_u32 len,
                                    fxg_u64 sig_off, fxg_u64 sig_src, fxg_u32* why, fxg_u32* failovers) {
    if (len == 0u || len >= 0x80000000u) return FXG_MLX5_ERR_INVALID;
    const fxg_u32 wqes = sig_src ? 2u : 1u;
    for (fxg_u32 i = 0; i < 2u; ++i) {
        const struct fxg_mlx5_path* q = &peer->path[i];
        if (i == 1u && !peer->health.has_backup) break;
        if ((q->slots & (q->slots - 1u)) != 0u || q->slots < wqes) return FXG_MLX5_ERR_INVALID;
        if ((1u << q->cq_log) < q->slots) return FXG_MLX5_ERR_INVALID;
    }
    fxg_u32 tried = 0;
    for (;;) {
        fxg_u64 now = FXG_PUT_CLOCK();
        for (fxg_u32 i = 0; i < (peer->health.has_backup ? 2u : 1u); ++i)
            if (peer->health.p[i].down) fxg_mlx5_drain(&peer->health, i, &peer->path[i], now);
        fxg_health_restore_due(&peer->health, now);
        const fxg_u32 r = fxg_health_route(&peer->health);
        if (r == FXG_PATH_NONE || (tried & (1u << r))) return FXG_MLX5_ERR_UNREACHABLE;
        if (tried) *failovers += 1u;
        tried |= 1u << r;
        struct fxg_mlx5_path* p = &peer->path[r];
        if (p->pi - p->done + wqes > p->slots) {
            /* Its queue is full of WQEs the NIC never completed. */
            fxg_health_mark_bad(&peer->health, r, now);
            continue;
        }
        fxg_u8 w[FXG_MLX5_BB_BYTES];
        fxg_u32 idx = fxg_mlx5_post_write(p, w, dst_off, src, len, sig_src ? 0u : FXG_MLX5_CQ_UPDATE);
        if (sig_src) idx = fxg_mlx5_post_write(p, w, sig_off, sig_src, 8u, FXG_MLX5_CQ_UPDATE | FXG_MLX5_FENCE);
        fxg_mlx5_doorbell(p, w);
        const fxg_u64 deadline = fxg_sat_add(now, peer->timeout_ns);
        for (;;) {
            fxg_u32 got = 0, sy = 0;
            now = FXG_PUT_CLOCK();
            const int k = fxg_mlx5_take_one(p, &got, &sy);
            /* The data WRITE of a signaled put completes with the signal's
               (unsignaled, it has no CQE of its own unless it fails). */
            if (k != 0 && (got == idx || (k != FXG_MLX5_CQE_DONE && got + 1u == idx && sig_src))) {
                if (k == FXG_MLX5_CQE_DONE) return FXG_MLX5_OK;
                fxg_health_mark_bad(&peer->health, r, now);
                if (k == FXG_MLX5_CQE_FAILED && fxg_mlx5_blames_request(sy)) {
                    *why = sy;
                    return FXG_MLX5_ERR_REQUEST;
                }
                break;
            }
            if (k != 0) {
                /* An earlier WQE's: a late completion, or a late failure. */
                if (k != FXG_MLX5_CQE_DONE) fxg_health_mark_bad(&peer->health, r, now);
                continue;
            }
            if (now >= deadline) {
                fxg_health_mark_bad(&peer->health, r, now);
                break;
            }
            FXG_PUT_IDLE();
        }
    }
}

/* fxg_mlx5_put_signal_sync without a signal. */
FXG_FN int fxg_mlx5_put_sync(struct fxg_mlx5_peer* peer, fxg_u64 dst_off, fxg_u64 src, fxg_u32 len,
                             fxg_u32* why, fxg_u32* failovers) {
    return fxg_mlx5_put_signal_sync(peer, dst_off, src, len, 0ull, 0ull, why, failovers);
}
#endif /* FXG_DEVICE || FXG_HOST_CLOCK */
#endif /* FERROCX_IBGDA_H */
