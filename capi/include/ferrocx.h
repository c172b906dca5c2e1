/*
 * ferrocx.h — the C API of ferrocx (libferrocx.so), for C and C++ programs
 * and for frameworks that embed a communication library through C.
 *
 *   cc prog.c $(pkg-config --cflags --libs ferrocx)
 *
 * Install: scripts/install-capi.sh PREFIX  (lib/libferrocx.so,
 * include/ferrocx.h, lib/pkgconfig/ferrocx.pc). capi/src/lib.rs is the Rust
 * side; capi/tests/capi.rs compiles this header and checks every constant
 * against it.
 *
 * Conventions:
 * - Every call returns a ferrocx_result_t (FERROCX_SUCCESS = 0) and never
 *   aborts the process. On failure, ferrocx_get_last_error() returns the
 *   calling thread's message: which rank, which call, what was wrong.
 * - Handles are opaque pointers; enums are int32_t constants.
 * - Buffers: host memory or CUDA device memory of the rank's GPU, told apart
 *   by the pointer. Device buffers: the call is queued on `stream` (a
 *   CUstream; NULL is the legacy default stream) and returns at once; the
 *   stream's later work sees the result. Host buffers: pass stream = NULL;
 *   the call returns when the buffers may be reused.
 * - In place as in NCCL: sendbuf == recvbuf, or for all_gather
 *   sendbuf == recvbuf + rank * count elements.
 * - Calls between ferrocx_group_start() and ferrocx_group_end() on one
 *   thread are queued and run together at group end (as ncclGroupStart/End):
 *   sends and receives between the same ranks in one group cannot deadlock.
 */
#ifndef FERROCX_H
#define FERROCX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERROCX_VERSION_MAJOR 0
#define FERROCX_VERSION_MINOR 1
#define FERROCX_VERSION_PATCH 0
#define FERROCX_VERSION_CODE (FERROCX_VERSION_MAJOR * 10000 + FERROCX_VERSION_MINOR * 100 + FERROCX_VERSION_PATCH)

typedef int32_t ferrocx_result_t;
#define FERROCX_SUCCESS 0
#define FERROCX_INVALID_ARGUMENT 1 /* null/misaligned buffer, bad count, rank out of range, mismatched calls */
#define FERROCX_UNSUPPORTED 2      /* e.g. device buffers without a GPU */
#define FERROCX_SYSTEM_ERROR 3     /* a system call, the CUDA driver, a plugin */
#define FERROCX_REMOTE_ERROR 4     /* a peer failed or went away */
#define FERROCX_TIMEOUT 5          /* a wait exceeded FERROCX_TIMEOUT */
#define FERROCX_DESTROYED 6        /* the communicator was finalized or aborted */
#define FERROCX_INTERNAL_ERROR 7
#define FERROCX_AUTH_ERROR 8       /* bootstrap authentication failed: FERROCX_SECRET(_FILE) differs or is missing */

/* Element types (the same numbers as the plugin ABI's FX_TYPE_*). */
#define FERROCX_INT8 0
#define FERROCX_UINT8 1
#define FERROCX_INT32 2
#define FERROCX_UINT32 3
#define FERROCX_INT64 4
#define FERROCX_UINT64 5
#define FERROCX_FLOAT16 6
#define FERROCX_BFLOAT16 7
#define FERROCX_FLOAT32 8
#define FERROCX_FLOAT64 9
#define FERROCX_FLOAT8E4M3 10 /* OCP FP8 e4m3: reductions round to nearest even and saturate to ±448 */
#define FERROCX_FLOAT8E5M2 11 /* OCP FP8 e5m2: saturate to ±57344 */

/* Reduction operators. */
#define FERROCX_SUM 0
#define FERROCX_PROD 1
#define FERROCX_MIN 2
#define FERROCX_MAX 3
#define FERROCX_AVG 4

/* ferrocx_comm_split: this rank takes part in no new communicator. */
#define FERROCX_SPLIT_NOCOLOR (-1)

#define FERROCX_UNIQUE_ID_BYTES 128

typedef struct ferrocx_comm *ferrocx_comm_t;
typedef struct ferrocx_unique_id {
  char internal[FERROCX_UNIQUE_ID_BYTES];
} ferrocx_unique_id_t;

/* FERROCX_VERSION_CODE of the library actually loaded. */
ferrocx_result_t ferrocx_get_version(int32_t *version);
/* Text of a result code (static). */
const char *ferrocx_get_error_string(ferrocx_result_t result);
/* The calling thread's last error message ("" when none); valid until the
 * thread's next ferrocx call. */
const char *ferrocx_get_last_error(void);

/* On one rank (say 0): an id to pass to every rank (e.g. over MPI), naming a
 * free port of this host (or FERROCX_COMM_ID when set). */
ferrocx_result_t ferrocx_get_unique_id(ferrocx_unique_id_t *id);
/* Collective over nranks processes: this one is `rank`. */
ferrocx_result_t ferrocx_comm_init_rank(ferrocx_comm_t *comm, int32_t nranks, const ferrocx_unique_id_t *id, int32_t rank);
/* From the launcher's environment: fxrun, mpirun, srun, torchrun (docs/ENV.md). */
ferrocx_result_t ferrocx_comm_init_from_env(ferrocx_comm_t *comm);
/* Collective: ranks with the same color form a new communicator, ordered by
 * key then rank; FERROCX_SPLIT_NOCOLOR gives *newcomm = NULL. */
ferrocx_result_t ferrocx_comm_split(ferrocx_comm_t comm, int32_t color, int32_t key, ferrocx_comm_t *newcomm);
/* Release everything but the handle: later calls return FERROCX_DESTROYED. */
ferrocx_result_t ferrocx_comm_finalize(ferrocx_comm_t comm);
/* Finalize (if not yet) and free the handle. */
ferrocx_result_t ferrocx_comm_destroy(ferrocx_comm_t comm);
/* Tell the peers, stop every wait, release everything, free the handle. */
ferrocx_result_t ferrocx_comm_abort(ferrocx_comm_t comm);
/* *async_error: FERROCX_SUCCESS, or the error of a stream-ordered operation
 * that failed after its call returned (its message in ferrocx_get_last_error). */
ferrocx_result_t ferrocx_comm_get_async_error(ferrocx_comm_t comm, ferrocx_result_t *async_error);
ferrocx_result_t ferrocx_comm_rank(ferrocx_comm_t comm, int32_t *rank);
ferrocx_result_t ferrocx_comm_count(ferrocx_comm_t comm, int32_t *nranks);
/* The CUDA device this rank uses, or -1. */
ferrocx_result_t ferrocx_comm_device(ferrocx_comm_t comm, int32_t *device);

ferrocx_result_t ferrocx_group_start(void);
ferrocx_result_t ferrocx_group_end(void);

ferrocx_result_t ferrocx_all_reduce(const void *sendbuf, void *recvbuf, size_t count, int32_t dtype, int32_t op, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_broadcast(const void *sendbuf, void *recvbuf, size_t count, int32_t dtype, int32_t root, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_reduce(const void *sendbuf, void *recvbuf, size_t count, int32_t dtype, int32_t op, int32_t root, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount, int32_t dtype, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount, int32_t dtype, int32_t op, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_all_to_all(const void *sendbuf, void *recvbuf, size_t count, int32_t dtype, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_gather(const void *sendbuf, void *recvbuf, size_t sendcount, int32_t dtype, int32_t root, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_scatter(const void *sendbuf, void *recvbuf, size_t recvcount, int32_t dtype, int32_t root, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_send(const void *buf, size_t count, int32_t dtype, int32_t peer, ferrocx_comm_t comm, void *stream);
ferrocx_result_t ferrocx_recv(void *buf, size_t count, int32_t dtype, int32_t peer, ferrocx_comm_t comm, void *stream);

/* Register a buffer with the transports (single copy into it); host or device memory. */
ferrocx_result_t ferrocx_register(ferrocx_comm_t comm, void *buf, size_t bytes, void **handle);
ferrocx_result_t ferrocx_deregister(ferrocx_comm_t comm, void *handle);

#ifdef __cplusplus
}
#endif
#endif /* FERROCX_H */
