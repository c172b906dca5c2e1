/*
 * ferrocx_collective.h — the ferrocx collective plugin ABI, version 1, and
 * the hook-by-hook reference for it (docs/PLUGINS.md explains how to write a
 * plugin and points here; sdk/src/abi/collective.rs is the Rust mirror).
 *
 * A collective plugin runs whole collectives itself (the copy-engine
 * collectives of plugins/ce, a vendor library wrapped). It is a shared library
 * exporting
 *
 *     const fx_collective_v1_t *ferrocx_collective_v1(void);
 *
 * returning a table that lives as long as the library is loaded. A library
 * may export this and ferrocx_transport_v1 both. The table follows the rules
 * of the transport table (ferrocx_plugin.h): the header {abi_version,
 * struct_size, name, caps}; the core rejects an unknown version, a
 * struct_size smaller than this version's, an empty name and a NULL required
 * hook, naming the file, the symbol and the numbers; fields are only ever
 * appended and older tables are adapted. Result codes, log levels, memory
 * kinds, fx_host_v1_t and fx_peer_info_t are those of ferrocx_plugin.h.
 *
 * This file mirrors sdk/src/abi/collective.rs exactly;
 * sdk/tests/header_layout.rs compiles it and checks every size, offset and
 * constant against Rust.
 *
 * LIFECYCLE
 *
 *   init(host, &ctx)                         once per plugin context
 *   comm_init(ctx, info, oob, &comm)         once per communicator, on every rank
 *   window_register(comm, desc, &win)        collective: every rank, same order
 *   can_run(comm, coll) -> priority          per call, before launch
 *   launch(comm, coll, stream)               the calls this plugin won
 *   p2p_can_run(comm, desc) -> priority      optional: per device send/receive
 *   p2p_launch(comm, desc, stream)           the sends/receives this plugin won
 *   launch_bounded(comm) -> 0|1              optional: right after a device launch
 *   describe(comm, coll, buf, len) -> len    optional: the path a call would take
 *   status(comm)                             optional: asynchronous errors
 *   window_deregister(comm, win)             collective
 *   comm_destroy(comm)                       every window deregistered first
 *   finalize(ctx)                            after every comm is destroyed
 *
 * SELECTION. For every collective call the core asks each loaded collective
 * plugin's can_run and compares the answers with the priority of its own
 * algorithms (FX_COLL_CORE_PRIORITY); the highest wins and ties go to the
 * core. can_run must give the same answer on every rank for the same call
 * (decide from the descriptor and from what every rank knows, such as window
 * registration, never from local timing), or ranks run different
 * implementations and the call fails. Windows are symmetric: a caller whose
 * buffers lie in windows names them at the same offsets on every rank, also
 * on a side a rank does not use (a broadcast's send buffer at non-roots, a
 * gather's receive buffer at non-roots), as with NCCL's symmetric memory; a
 * plugin that needs windows may decline (0) a descriptor without them.
 *
 * HOOKS. All return an FX_* code except can_run (a priority) and last_error
 * (a length). Optional hooks may be NULL.
 *
 *   init(host, &ctx)          required. As in ferrocx_plugin.h: `host` (log,
 *                             getenv, timeout, abort flag) stays valid until
 *                             finalize returns.
 *   finalize(ctx)             required.
 *   comm_init(ctx, info, oob, &comm)
 *                             required. `info` describes the communicator and
 *                             every rank (valid during the call: copy what you
 *                             keep). `oob` carries the core's out-of-band
 *                             collectives (all_gather, barrier) for setup; it
 *                             stays valid until comm_destroy returns. They are
 *                             collective (every rank, same order) and slow (a
 *                             round trip through the bootstrap): for setup in
 *                             comm_init and window_(de)register, or inside a
 *                             host-memory launch that needs no speed; never
 *                             inside a launch that returns before the
 *                             collective ran (a stream's work).
 *                             FX_UNSUPPORTED = this plugin has nothing for this
 *                             communicator (it is then never asked again).
 *   comm_destroy(comm)        required. Release everything of the communicator.
 *   can_run(comm, coll)       required. Priority for running `coll`: 0 = cannot,
 *                             higher = preferred. Never an error code.
 *   window_register(comm, desc, &win)
 *                             optional. A symmetric window: every rank
 *                             registers `bytes` bytes (the same on every rank)
 *                             in the same order. The core has already mapped
 *                             the peers' windows where it can: desc->peer_bases
 *                             [r] is rank r's window as this process sees it
 *                             (NULL when not mapped), so rank r's byte at
 *                             offset o is peer_bases[r] + o, with no exchange
 *                             per operation. *win is the plugin's handle,
 *                             handed back in fx_coll_desc_t. Leave *win NULL
 *                             with FX_OK when the plugin has no use for this
 *                             window.
 *   window_deregister(comm, win)
 *                             optional (required with window_register).
 *                             Collective. The peers' mappings stay valid until
 *                             it returns on this rank.
 *   launch(comm, coll, stream)
 *                             required. Run `coll`. Host memory (stream NULL):
 *                             complete before returning. CUDA memory: queue
 *                             the whole collective on `stream` (a CUstream; NULL
 *                             is the legacy default stream) and return; the
 *                             stream's later work sees the result. Bounded by
 *                             host->timeout_ms and the abort flag like every
 *                             wait (a stream that can wait forever needs a
 *                             watchdog that releases it).
 *   status(comm)              optional. FX_OK, or the error that broke the
 *                             communicator asynchronously (a watchdog released
 *                             a stream), with its message for last_error. Once
 *                             broken, launch fails too.
 *   last_error(buf, len)      optional. As in ferrocx_plugin.h (per thread).
 *   p2p_can_run(comm, desc)   optional (with p2p_launch; both added within
 *                             v1 in 2026-11: a table built before ends before
 *                             them, struct_size == FX_COLLECTIVE_V1_MIN_SIZE,
 *                             and has neither; a table with one of the two is
 *                             rejected). Priority for running the ONE op of
 *                             `desc` (nops == 1; stream-ordered device memory,
 *                             and host memory whether the caller blocks or
 *                             not): 0 = cannot; above FX_COLL_CORE_PRIORITY
 *                             to be chosen (ties go to the core, then to the
 *                             earlier plugin). Decide from that op's own
 *                             fields (kind, peer, bytes, memory kind, the
 *                             FX_COLL_CAPTURING flag) and the communicator
 *                             alone, never from the rest of its group: a send
 *                             and the receive it meets are asked on two ranks
 *                             and must get the same answer, so the two ends of
 *                             a message always run on the same side. For host
 *                             memory the core remembers the answer per (kind,
 *                             peer, bytes) for the communicator's life.
 *   p2p_launch(comm, desc, stream)
 *                             optional (with p2p_can_run). Every op of one
 *                             group that this plugin won, in one call, in the
 *                             order the caller posted them (ops with one peer
 *                             in one direction meet the peer's in that order).
 *                             CUDA memory: queue them on `stream` and return at
 *                             once (the core made `stream` wait for the ops'
 *                             other streams, and makes those wait for it
 *                             after). Host memory (stream NULL): complete
 *                             them all before returning, progressing them
 *                             together, bounded like launch; a send may
 *                             complete before its receive is posted. A
 *                             receive that meets a send of another size:
 *                             FX_INVALID_ARGUMENT, "mismatched sizes: ..."
 *                             (the communicator stays usable). CUDA memory:
 *                             a send meets a receive of exactly its bytes; a
 *                             difference is the caller's error (report it as
 *                             "mismatched calls: ..." where it can be seen).
 *                             Plugins launch in list order, the same on every
 *                             rank: device ops before the rest of the group
 *                             takes the core's path; host ops after the core
 *                             queued the rest on its engine.
 *   launch_bounded(comm)      optional (added within v1 on 2026-11-27, after
 *                             p2p_launch: a table built before ends before
 *                             it). Asked from the launching thread right after
 *                             a CUDA-memory launch or p2p_launch returned FX_OK:
 *                             1 when what that call queued (and everything of
 *                             this plugin it waits for) ends by itself within
 *                             host->timeout_ms even if a peer never comes (a
 *                             kernel that gives up on the device and records
 *                             why for status), so no host thread of the plugin
 *                             has to act for the stream to move on; 0 when the
 *                             stream may wait for one (a watchdog's release, a
 *                             proxy). NULL: always 0. The core tells callers
 *                             which calls may wait for a host thread, so that
 *                             one about to hold the driver (a synchronous copy
 *                             to pageable memory) waits for those first.
 *   describe(comm, coll, buf, len)
 *                             optional (added within v1 on 2026-11-27, after
 *                             launch_bounded). The path this plugin takes for
 *                             coll, in a few words (its protocol or route:
 *                             ce says "LL", "Simple", "Simple direct",
 *                             "staged", ...), decided as can_run decides:
 *                             written into buf as NUL-terminated text of at
 *                             most len bytes (cut short where longer); returns
 *                             the full text's length, 0 for nothing to say.
 *                             Asked for inspection only (fxinfo's selection
 *                             table, Communicator::collective_choice), never
 *                             on a call's path. NULL: the table names the
 *                             plugin alone.
 *
 * OWNERSHIP. The plugin owns ctx, comm and win. The buffers of a descriptor
 * are the caller's and valid until the collective completed (host) or the
 * stream passed it (CUDA). Window memory stays allocated until
 * window_deregister returns on every rank.
 *
 * THREADING. The core serializes the hooks of one comm (can_run and launch
 * come from the thread that issued the call). Different comms may be used
 * from different threads at once.
 */
#ifndef FERROCX_COLLECTIVE_H
#define FERROCX_COLLECTIVE_H

#include "ferrocx_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FX_COLL_ABI_VERSION_1 1u
#define FX_COLL_SYMBOL_V1 "ferrocx_collective_v1"

/* The priority of the core's own algorithms: beat it to be chosen. */
#define FX_COLL_CORE_PRIORITY 100

/* Collectives (NCCL's order). */
#define FX_COLL_BROADCAST 0
#define FX_COLL_REDUCE 1
#define FX_COLL_ALL_GATHER 2
#define FX_COLL_REDUCE_SCATTER 3
#define FX_COLL_ALL_REDUCE 4
#define FX_COLL_ALL_TO_ALL 5
#define FX_COLL_GATHER 6
#define FX_COLL_SCATTER 7

/* Element types. */
#define FX_TYPE_I8 0
#define FX_TYPE_U8 1
#define FX_TYPE_I32 2
#define FX_TYPE_U32 3
#define FX_TYPE_I64 4
#define FX_TYPE_U64 5
#define FX_TYPE_F16 6
#define FX_TYPE_BF16 7
#define FX_TYPE_F32 8
#define FX_TYPE_F64 9
/* OCP FP8 (NCCL's ncclFloat8e4m3 / ncclFloat8e5m2), added within v1: a plugin
 * built before them sees types it does not know and must decline (can_run 0). */
#define FX_TYPE_F8E4M3 10
#define FX_TYPE_F8E5M2 11

/* Reduction operators (ignored by collectives that do not reduce). */
#define FX_OP_SUM 0
#define FX_OP_PROD 1
#define FX_OP_MIN 2
#define FX_OP_MAX 3
#define FX_OP_AVG 4

/* fx_coll_desc_t.flags */
/* In place: send == recv == one buffer, as in NCCL: all_gather's input and
 * reduce_scatter's output at offset rank * count elements; at the root of
 * gather (input) and scatter (output) at rank * count too, at other ranks at
 * offset 0; all_reduce, broadcast, reduce and alltoall use it as a whole. */
#define FX_COLL_IN_PLACE (1u << 0)
#define FX_COLL_SEND_WINDOW (1u << 1) /* send lies in send_win at send_offset */
#define FX_COLL_RECV_WINDOW (1u << 2) /* recv lies in recv_win at recv_offset */
#define FX_COLL_CAPTURING (1u << 3)  /* the stream is being captured into a CUDA graph */

/* Capability bits of a collective table (header field caps). The core asks
 * can_run only about calls on a memory kind the table declares, and status only
 * of a table that declares FX_COLL_CAP_CUDA_MEM (host work cannot fail after
 * launch returned). */
#define FX_COLL_CAP_HOST_MEM (1ull << 0)
#define FX_COLL_CAP_CUDA_MEM (1ull << 1)
#define FX_COLL_CAP_WINDOWS (1ull << 2)  /* uses window_register */
#define FX_COLL_CAP_GRAPHS (1ull << 3)   /* launch may be captured into a CUDA graph */
/* launch on host memory checks the call itself: it compares the call's fingerprint
 * (seq, coll, dtype, op, count, root) with every rank it exchanges data with before
 * using their data, and fails a difference with a message that starts
 * "mismatched calls: " (e.g. "mismatched calls: rank 0 called all_reduce(float, sum, 8)
 * as op #3, rank 1 called broadcast(float, 8, root 0) as op #3"); the core then skips
 * its own check before the call (FERROCX_CHECK_CALLS). */
#define FX_COLL_CAP_CHECKS_CALLS (1ull << 4)
/* p2p_can_run may be asked about ops with the rank itself (peer == this rank) on CUDA
 * memory: a device group's sends to itself, each met by the receive from itself posted
 * in the same place among the group's receives from itself, with as many bytes. A plugin
 * that wins both runs the pair as a local copy inside its launch (and refuses a launch
 * whose self sends and receives do not pair). Without the bit the core copies them itself
 * and asks only about other ranks. Added within v1 (2026-11-27). */
#define FX_COLL_CAP_P2P_SELF (1ull << 5)
/* can_run's answer for a host-memory call in no window depends only on the call's shape
 * (coll, dtype, op, root, count, flags) and the communicator, never on the buffers'
 * addresses or seq: the core may remember it per shape and not ask again while the
 * communicator lives (only when every plugin that takes host memory declares it).
 * Added within v1 (2026-11-28). */
#define FX_COLL_CAP_SHAPE_BIDS (1ull << 6)

/* What comm_init learns about the communicator. */
typedef struct fx_comm_info {
  int32_t rank;
  int32_t nranks;
  int32_t local_rank;
  int32_t cuda_device;  /* this rank's device ordinal, -1 when none */
  uint64_t comm_hash;   /* equal on every rank of the communicator */
  const fx_peer_info_t *peers; /* nranks entries, valid during comm_init */
} fx_comm_info_t;

/* The core's out-of-band collectives, for setup (see comm_init). */
typedef struct fx_comm_oob {
  void *oob_ctx;
  /* Every rank's `len` bytes (the same len on every rank) into all[nranks*len], rank order. */
  int32_t (*all_gather)(void *oob_ctx, const void *mine, size_t len, void *all);
  /* Returns once every rank called it. */
  int32_t (*barrier)(void *oob_ctx);
} fx_comm_oob_t;

/* A symmetric window, as window_register sees it. */
typedef struct fx_window_desc {
  void *base;      /* this rank's window */
  uint64_t bytes;  /* its size, the same on every rank */
  int32_t mem_kind; /* FX_MEM_HOST or FX_MEM_CUDA */
  uint32_t reserved;
  /* nranks entries: rank r's window mapped into this process, NULL when the
   * core could not map it (host memory of another process, another host);
   * peer_bases[rank] == base. */
  void *const *peer_bases;
  /* nranks entries: rank r's window address in rank r's own process (for
   * plugins that reach peers by address, such as process_vm_writev). */
  const uint64_t *peer_addrs;
} fx_window_desc_t;

/* One collective call. */
typedef struct fx_coll_desc {
  int32_t coll;     /* FX_COLL_* */
  int32_t dtype;    /* FX_TYPE_* */
  int32_t op;       /* FX_OP_* */
  int32_t root;     /* rooted collectives; 0 otherwise */
  uint64_t count;   /* elements, as NCCL counts them for coll */
  int32_t mem_kind; /* FX_MEM_HOST or FX_MEM_CUDA */
  uint32_t flags;   /* FX_COLL_IN_PLACE, _SEND_WINDOW, _RECV_WINDOW, _CAPTURING */
  const void *send; /* NULL where this rank sends nothing */
  void *recv;       /* NULL where this rank receives nothing */
  void *send_win;   /* this plugin's window handle, when FX_COLL_SEND_WINDOW */
  void *recv_win;   /* when FX_COLL_RECV_WINDOW */
  uint64_t send_offset; /* bytes from the send window's base */
  uint64_t recv_offset; /* bytes from the receive window's base */
  uint64_t seq;     /* the communicator's collective sequence number, equal on every rank */
} fx_coll_desc_t;

/* Point-to-point op kinds (added within v1, 2026-11, with the p2p hooks). */
#define FX_P2P_SEND 0
#define FX_P2P_RECV 1

/* One send or receive of a point-to-point group. */
typedef struct fx_p2p_op {
  int32_t kind;   /* FX_P2P_SEND or FX_P2P_RECV */
  int32_t peer;   /* the other rank (this rank: FX_COLL_CAP_P2P_SELF) */
  uint64_t bytes; /* a send meets a receive of exactly as many */
  void *buf;      /* NULL only when bytes is 0 */
} fx_p2p_op_t;

/* A group of point-to-point operations. */
typedef struct fx_p2p_desc {
  const fx_p2p_op_t *ops; /* nops operations, in the order the caller posted them */
  uint32_t nops;
  int32_t mem_kind;       /* FX_MEM_HOST or FX_MEM_CUDA (every op's) */
  uint32_t flags;         /* FX_COLL_CAPTURING or 0 */
  uint32_t reserved;      /* 0 */
} fx_p2p_desc_t;

typedef struct fx_collective_v1 {
  uint32_t abi_version; /* FX_COLL_ABI_VERSION_1 */
  uint32_t struct_size; /* sizeof(fx_collective_v1_t) */
  char name[FX_NAME_BYTES];
  uint64_t caps;        /* FX_COLL_CAP_* */

  int32_t (*init)(const fx_host_v1_t *host, void **ctx);
  int32_t (*finalize)(void *ctx);
  int32_t (*comm_init)(void *ctx, const fx_comm_info_t *info, const fx_comm_oob_t *oob, void **comm);
  int32_t (*comm_destroy)(void *comm);
  int32_t (*can_run)(void *comm, const fx_coll_desc_t *coll);
  int32_t (*window_register)(void *comm, const fx_window_desc_t *desc, void **win);
  int32_t (*window_deregister)(void *comm, void *win);
  int32_t (*launch)(void *comm, const fx_coll_desc_t *coll, void *stream);
  int32_t (*status)(void *comm);
  size_t (*last_error)(char *buf, size_t len);
  /* Added within v1 (2026-11): tables built before end here, struct_size ==
   * FX_COLLECTIVE_V1_MIN_SIZE. */
  int32_t (*p2p_can_run)(void *comm, const fx_p2p_desc_t *desc);
  int32_t (*p2p_launch)(void *comm, const fx_p2p_desc_t *desc, void *stream);
  /* Added within v1 (2026-11-27): tables built before end here. */
  int32_t (*launch_bounded)(void *comm);
  /* Added within v1 (2026-11-27): tables built before end here. */
  size_t (*describe)(void *comm, const fx_coll_desc_t *coll, char *buf, size_t len);
} fx_collective_v1_t;

/* The smallest struct_size the core accepts: a table built before the p2p
 * hooks were added within v1 (2026-11), which has neither. */
#define FX_COLLECTIVE_V1_MIN_SIZE offsetof(fx_collective_v1_t, p2p_can_run)

typedef const fx_collective_v1_t *(*fx_collective_v1_entry_t)(void);

#ifdef __cplusplus
}
#endif
#endif /* FERROCX_COLLECTIVE_H */
