/*
 * ferrocx_devnet.h — the ferrocx device-networking plugin ABI, version 1, and
 * the hook-by-hook reference for it (sdk/src/abi/devnet.rs is the Rust
 * mirror; sdk/tests/header_layout.rs compiles this file and checks every
 * size, offset and constant against Rust).
 *
 * A device-networking plugin lets threads of the user's own kernels post
 * network work (put, put with signal, fetch-add, quiet) without a CPU on the
 * post path, as NVSHMEM's IBGDA does. The host side, through this table,
 * sets up what those kernels write into: per-peer queues in GPU-visible
 * memory, the windows they name, the paths to every peer and their health.
 * The device side is the plugin's own header (plugins/ibgda ships
 * ferrocx_ibgda.h): `device_view` hands the kernel a pointer whose layout
 * that header defines. The core never reads it.
 *
 * A plugin is a shared library exporting
 *
 *     const fx_devnet_v1_t *ferrocx_devnet_v1(void);
 *
 * returning a table that lives as long as the library is loaded. A library
 * may export this beside ferrocx_transport_v1 and ferrocx_collective_v1. The
 * table follows the rules of the transport table (ferrocx_plugin.h): the
 * header {abi_version, struct_size, name, caps}; the core rejects an unknown
 * version, a struct_size smaller than this version's, an empty name and a
 * NULL required hook, naming the file, the symbol and the numbers; fields are
 * only ever appended and older tables are adapted. fx_comm_info_t,
 * fx_comm_oob_t and fx_window_desc_t are those of ferrocx_collective.h.
 *
 * LIFECYCLE
 *
 *   init(host, &ctx)                      once per plugin context
 *   comm_init(ctx, info, oob, &comm)      collective: every rank of a communicator
 *   window_register(comm, desc, &id)      collective: every rank, same order
 *   device_view(comm, &view)              the pointer a kernel takes
 *   status(comm), stats(comm, &s)         any time
 *   window_deregister(comm, id)           collective
 *   comm_destroy(comm)                    every window deregistered first
 *   finalize(ctx)                         after every comm is destroyed
 *
 * HOOKS. All return an FX_* code except describe and last_error (lengths).
 *
 *   init(host, &ctx)          required. `host` (log, getenv, timeout, abort
 *                             flag) stays valid until finalize returns.
 *   finalize(ctx)             required.
 *   comm_init(ctx, info, oob, &comm)
 *                             required. Collective. Sets up this rank's side:
 *                             queues, paths to every peer, threads. `oob`
 *                             (all_gather, barrier) stays valid until
 *                             comm_destroy returns; use it only in comm_init
 *                             and window_(de)register. FX_UNSUPPORTED = this
 *                             plugin cannot serve this communicator (no GPU,
 *                             peers it cannot reach); the message says why.
 *   comm_destroy(comm)        required. Stops the plugin's threads and
 *                             releases everything. Kernels that post must
 *                             have finished.
 *   window_register(comm, desc, &id)
 *                             required. A symmetric window (every rank the
 *                             same size, the same order), as the core mapped
 *                             it (desc->peer_bases[r]: rank r's window in this
 *                             process, NULL where not mapped). *id is the
 *                             number a kernel names the window by: 0 for the
 *                             first window of the comm, then 1, 2, ... in
 *                             registration order on every rank. A plugin
 *                             that cannot reach some peer's window fails
 *                             with FX_UNSUPPORTED naming the peer.
 *   window_deregister(comm, id)
 *                             required. Collective. No request naming the
 *                             window may be in flight.
 *   device_view(comm, &view)  required. The device address (a CUdeviceptr)
 *                             of the plugin's view for kernels of this rank:
 *                             what its device header's functions take. Valid
 *                             until comm_destroy; windows registered later
 *                             appear in it (the view is updated in place).
 *   status(comm)              required. FX_OK, or the error that a peer or
 *                             path met (FX_REMOTE: a peer is unreachable on
 *                             every path; last_error names the peer and each
 *                             path's fault). Requests already failed with an
 *                             error completion in the kernel's queue; status
 *                             is the host's view of the same.
 *   stats(comm, &stats)       required. Counters since comm_init (below).
 *   describe(comm, buf, len)  required. One line for logs and fxinfo: which
 *                             handler carries the requests and why it was
 *                             chosen, the paths, the knobs in effect. Returns
 *                             the full length (snprintf-like, NUL-terminated
 *                             when len > 0).
 *   last_error(buf, len)      optional. As in ferrocx_plugin.h (per thread).
 *
 * THREADING. The core serializes the hooks of one comm. The plugin's own
 * threads (a proxy that consumes the queues) are its own; they park when idle.
 */
#ifndef FERROCX_DEVNET_H
#define FERROCX_DEVNET_H

#include "ferrocx_collective.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FX_DEVNET_ABI_VERSION_1 1u
#define FX_DEVNET_SYMBOL_V1 "ferrocx_devnet_v1"

/* Capability bits of a devnet table (header field caps). */
#define FX_DEVNET_CAP_CUDA_MEM (1ull << 0) /* windows in CUDA device memory */
#define FX_DEVNET_CAP_HOST_MEM (1ull << 1) /* windows in host memory */

/* Counters since comm_init, for tests, logs and fxinfo. */
typedef struct fx_devnet_stats {
  uint64_t requests;          /* requests taken from the kernels' queues */
  uint64_t completed;         /* completed with status OK */
  uint64_t failed;            /* completed with an error status */
  uint64_t failovers;         /* re-posts of a request on the other path */
  uint64_t paths_down;        /* (me, peer) paths marked bad */
  uint64_t paths_restored;    /* paths taken back after their recovery window */
  uint64_t peers_unreachable; /* peers declared unreachable on every path */
  uint64_t reserved[9];       /* zero: room for counters added within v1 */
} fx_devnet_stats_t;

typedef struct fx_devnet_v1 {
  uint32_t abi_version; /* FX_DEVNET_ABI_VERSION_1 */
  uint32_t struct_size; /* sizeof(fx_devnet_v1_t) */
  char name[FX_NAME_BYTES];
  uint64_t caps;        /* FX_DEVNET_CAP_* */

  int32_t (*init)(const fx_host_v1_t *host, void **ctx);
  int32_t (*finalize)(void *ctx);
  int32_t (*comm_init)(void *ctx, const fx_comm_info_t *info, const fx_comm_oob_t *oob, void **comm);
  int32_t (*comm_destroy)(void *comm);
  int32_t (*window_register)(void *comm, const fx_window_desc_t *desc, uint32_t *id);
  int32_t (*window_deregister)(void *comm, uint32_t id);
  int32_t (*device_view)(void *comm, uint64_t *view);
  int32_t (*status)(void *comm);
  int32_t (*stats)(void *comm, fx_devnet_stats_t *stats);
  size_t (*describe)(void *comm, char *buf, size_t len);
  size_t (*last_error)(char *buf, size_t len);
} fx_devnet_v1_t;

typedef const fx_devnet_v1_t *(*fx_devnet_v1_entry_t)(void);

#ifdef __cplusplus
}
#endif
#endif /* FERROCX_DEVNET_H */
