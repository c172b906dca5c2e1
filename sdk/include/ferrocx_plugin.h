/*
 * ferrocx_plugin.h — the ferrocx transport plugin ABI, version 1, and the
 * hook-by-hook reference for it (docs/PLUGINS.md explains how to write a
 * plugin and points here; sdk/src/abi.rs is the Rust mirror).
 *
 * A plugin is a shared library exporting
 *
 *     const fx_transport_v1_t *ferrocx_transport_v1(void);
 *
 * returning a table that lives as long as the library is loaded. The core
 * rejects a table whose abi_version it does not know or whose struct_size is
 * smaller than sizeof(fx_transport_v1_t) of that version, an empty name and a
 * NULL required hook, naming the file, the symbol and the numbers. Fields are
 * only ever appended; a newer core adapts older tables (a v1 plugin keeps
 * loading when v2 exists). The host table follows the same rule: read a host
 * field only if host->struct_size covers it.
 *
 * This file mirrors sdk/src/abi.rs exactly; sdk/tests/header_layout.rs
 * compiles it and checks every size, offset, field name and constant against
 * Rust.
 *
 * LIFECYCLE, per communicator and per pair of ranks that must talk:
 *
 *   init(host, &ctx)                     once per plugin context
 *   can_connect(ctx, me, peer) -> score  0 = cannot, higher = preferred; highest wins
 *   setup(ctx, req, &conn, &my_blob)     on both ranks: the sending and the receiving end
 *      ... the core exchanges the two blobs between the processes ...
 *   connect(conn, &peer_blob)            repeated while it returns FX_IN_PROGRESS
 *   proxy_setup / proxy_connect          optional, on the core's proxy service thread
 *   isend / irecv (conn, buf, len, mh, &req)
 *   test(req, &done, &nbytes)            repeated until done (or an error)
 *   free(conn)
 *   finalize(ctx)                        after every connection and registration is gone
 *
 * A connection is one direction of one channel between two ranks: setup is
 * called with req->direction == FX_DIR_SEND on one rank and FX_DIR_RECV on
 * the other, with the same conn_id on both. Ranks may be different processes:
 * nothing but the blobs travels between the two setup and the two connect
 * calls.
 *
 * HOOKS. All return an FX_* code except can_connect (a score) and last_error
 * (a length). Optional hooks may be NULL. On any error leave a message for
 * last_error; the core turns code + message into an error naming the plugin,
 * the peer and the hook.
 *
 *   init(host, &ctx)            required. Create a context in *ctx. `host`
 *                               (log, getenv, timeout, abort flag) stays valid
 *                               until finalize returns.
 *   finalize(ctx)               required. Destroy the context; called after every
 *                               connection is freed and registration released.
 *   can_connect(ctx, me, peer)  required. Score for me -> peer: 0 = cannot, higher =
 *                               preferred. Never an error code (0 on bad arguments).
 *                               Same-host transports compare host_hash.
 *   setup(ctx, req, &conn, out) required. Create one end of a connection in *conn and
 *                               describe it for the peer in `out`: plain bytes only
 *                               (see BLOBS).
 *   connect(conn, peer_blob)    required. Finish with the peer's blob; FX_IN_PROGRESS
 *                               = call again (the peer has not caught up yet). Never
 *                               block waiting for the peer.
 *   proxy_setup(conn),          optional. Work that must run on the core's proxy
 *   proxy_connect(conn)         service thread, after setup / after connect succeeded.
 *   proxy_progress(conn, &did)  optional. Background progress, called on every progress
 *                               sweep while the connection has operations in flight;
 *                               set *did non-zero when something moved. Leave NULL when
 *                               not needed (Rust: `const NEEDS_PROXY_PROGRESS = true`).
 *   reg(ctx, ptr, len, kind, &mh, out)
 *                               optional (Rust: Transport::register; `register` is a C
 *                               keyword). Register `len` bytes of FX_MEM_HOST or
 *                               FX_MEM_CUDA memory; *mh is the handle, `out` may describe
 *                               it to peers. NULL or FX_UNSUPPORTED when registration is
 *                               of no use.
 *   deregister(ctx, mh)         optional. Release a registration.
 *   isend(conn, data, len, mh, &req)
 *                               required. Post a send of `len` bytes (0 is valid); `mh`
 *                               may be NULL. *req left NULL with FX_OK = "not now": the
 *                               core retries later.
 *   irecv(conn, data, len, mh, &req)
 *                               required. Post a receive of at most `len` bytes; same
 *                               rules. A longer message is an error of that receive.
 *   test(req, &done, &nbytes)   required. Progress; set *done, and *nbytes once done.
 *                               Once it reported done, or returned an error for the
 *                               transfer, the request is gone: never touch it again.
 *   free(conn)                  required. Close; requests still outstanding on it are
 *                               cancelled and their handles become invalid.
 *   last_error(buf, len)        optional. Copy the calling thread's last error text
 *                               into buf (NUL-terminated, truncated); return the full
 *                               length.
 *
 * CODES. FX_OK; FX_IN_PROGRESS (connect only); FX_INVALID_ARGUMENT (null pointer,
 * bad length, lifecycle misuse); FX_UNSUPPORTED; FX_SYSTEM (a system call failed:
 * put errno's text in the message); FX_REMOTE (the peer failed or went away);
 * FX_TIMEOUT; FX_INTERNAL (a bug, a caught panic).
 *
 * OWNERSHIP. The plugin owns ctx, conn, request and mh handles; the core only
 * passes them back. Buffers given to isend/irecv belong to the caller and stay
 * valid (for a send: unmodified) until test reports the request done or failed,
 * or until free of its connection. Blobs are caller memory: fill `out` during
 * setup/reg, read `peer_blob` during connect (copy what you keep).
 *
 * THREADING. init/finalize run once per context. Hooks taking the same conn
 * (test on its requests and proxy_progress included) are serialized by the
 * core: a connection needs no lock of its own; different connections may be
 * used from different threads at once, so state shared between them needs
 * synchronization. reg/deregister may run on any thread, concurrently with
 * anything. last_error is per thread: the core calls it on the thread where
 * the hook failed, right after it failed.
 *
 * WAITING. Hooks return promptly. A wait inside a plugin is bounded by
 * host->timeout_ms (FERROCX_TIMEOUT) and stops when *host->abort_flag becomes
 * non-zero; report FX_TIMEOUT with a message saying what was awaited.
 *
 * BLOBS. What crosses a process boundary is an fx_blob_t: `len` plus up to
 * FX_BLOB_BYTES bytes, copied bit for bit into the other process. Names, sizes,
 * offsets, ids, rkeys, exportable IPC handles, socket addresses: yes. Pointers,
 * CUDA streams/events/contexts, file descriptors (move fds with SCM_RIGHTS
 * only), anything whose meaning depends on the writing process: never. Use
 * fixed-width integers and byte arrays, memset to zero before filling, memcpy
 * in and out of bytes[] (unaligned), and put a magic, a version and the
 * conn_id in it, checked in connect.
 */
#ifndef FERROCX_PLUGIN_H
#define FERROCX_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FX_ABI_VERSION_1 1u
#define FX_SYMBOL_V1 "ferrocx_transport_v1"
#define FX_NAME_BYTES 32
#define FX_BLOB_BYTES 256
#define FX_HOST_NAME_BYTES 64

/* Result codes. */
#define FX_OK 0
#define FX_IN_PROGRESS 1
#define FX_INVALID_ARGUMENT 2
#define FX_UNSUPPORTED 3
#define FX_SYSTEM 4
#define FX_REMOTE 5
#define FX_TIMEOUT 6
#define FX_INTERNAL 7

/* Connection direction as seen by the rank calling setup. */
#define FX_DIR_SEND 0
#define FX_DIR_RECV 1

/* Memory kinds. */
#define FX_MEM_HOST 0
#define FX_MEM_CUDA 1

/* Capability bits. */
#define FX_CAP_HOST_MEM (1ull << 0)
#define FX_CAP_CUDA_MEM (1ull << 1)
#define FX_CAP_REGISTER (1ull << 2)
#define FX_CAP_CROSS_HOST (1ull << 3)

/* Log levels. */
#define FX_LOG_ERROR 0
#define FX_LOG_WARN 1
#define FX_LOG_INFO 2
#define FX_LOG_DEBUG 3
#define FX_LOG_TRACE 4

/* The only thing that crosses a process boundary. */
typedef struct fx_blob {
  uint32_t len;
  uint32_t reserved;
  uint8_t bytes[FX_BLOB_BYTES];
} fx_blob_t;

typedef struct fx_peer_info {
  int32_t rank;
  int32_t nranks;
  int32_t local_rank;
  int32_t pid;
  uint64_t host_hash; /* equal means same host */
  uint64_t comm_hash; /* equal on every rank of the communicator */
  int32_t cuda_device; /* -1 when none (ordinal in the rank's own process) */
  int32_t cuda_pci;    /* PCI location: domain << 16 | bus << 8 | device << 3; -1 when none */
  char host_name[FX_HOST_NAME_BYTES];
} fx_peer_info_t;

typedef struct fx_conn_req {
  fx_peer_info_t me;
  fx_peer_info_t peer;
  int32_t direction; /* FX_DIR_SEND or FX_DIR_RECV */
  int32_t channel;
  uint64_t conn_id; /* equal on both ends of one connection */
} fx_conn_req_t;

/* Services of the core, handed to init. */
typedef struct fx_host_v1 {
  uint32_t abi_version;
  uint32_t struct_size;
  void *host_ctx;
  void (*log)(void *host_ctx, int32_t level, const char *msg);
  /* Returns the value's length (may exceed out_len: truncated), or -1 when unset. */
  int64_t (*getenv)(void *host_ctx, const char *name, char *out, size_t out_len);
  uint64_t timeout_ms; /* bound for every wait inside the plugin */
  /* non-zero once waits should stop: the communicator aborts (a collective plugin's
   * table: also once it broke, or a peer failed or aborted) */
  const volatile uint32_t *abort_flag;
} fx_host_v1_t;

typedef struct fx_transport_v1 {
  uint32_t abi_version; /* FX_ABI_VERSION_1 */
  uint32_t struct_size; /* sizeof(fx_transport_v1_t) */
  char name[FX_NAME_BYTES];
  uint64_t caps;

  int32_t (*init)(const fx_host_v1_t *host, void **ctx);
  int32_t (*finalize)(void *ctx);
  int32_t (*can_connect)(void *ctx, const fx_peer_info_t *me, const fx_peer_info_t *peer);
  int32_t (*setup)(void *ctx, const fx_conn_req_t *req, void **conn, fx_blob_t *out_blob);
  int32_t (*connect)(void *conn, const fx_blob_t *peer_blob);
  int32_t (*proxy_setup)(void *conn);
  int32_t (*proxy_connect)(void *conn);
  int32_t (*proxy_progress)(void *conn, int32_t *did_work);
  int32_t (*reg)(void *ctx, void *ptr, size_t len, int32_t mem_kind, void **mhandle, fx_blob_t *out_blob);
  int32_t (*deregister)(void *ctx, void *mhandle);
  int32_t (*isend)(void *conn, const void *data, size_t len, void *mhandle, void **request);
  int32_t (*irecv)(void *conn, void *data, size_t len, void *mhandle, void **request);
  int32_t (*test)(void *request, int32_t *done, size_t *nbytes);
  int32_t (*free)(void *conn);
  size_t (*last_error)(char *buf, size_t len);
} fx_transport_v1_t;

typedef const fx_transport_v1_t *(*fx_transport_v1_entry_t)(void);

#ifdef __cplusplus
}
#endif
#endif /* FERROCX_PLUGIN_H */
