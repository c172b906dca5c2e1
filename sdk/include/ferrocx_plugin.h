/*
 * ferrocx_plugin.h — the ferrocx transport plugin ABI, version 1.
 *
 * A plugin is a shared library exporting
 *
 *     const fx_transport_v1_t *ferrocx_transport_v1(void);
 *
 * returning a table that lives as long as the library is loaded. The core
 * rejects a table whose abi_version it does not know or whose struct_size is
 * smaller than sizeof(fx_transport_v1_t) of that version. Fields are only
 * ever appended; a newer core adapts older tables.
 *
 * This file mirrors sdk/src/abi.rs exactly; sdk/tests/header_layout.rs
 * compiles it and checks every size, offset and constant against Rust.
 *
 * Hook by hook (all return an FX_* code unless noted; optional hooks may be NULL):
 *   init(host, &ctx)            create a context; `host` stays valid until finalize returns.
 *   finalize(ctx)               destroy it, after every conn and registration is gone.
 *   can_connect(ctx, me, peer)  a score, not a code: 0 = cannot, higher = preferred.
 *   setup(ctx, req, &conn, out) create one end of a connection; describe it in `out`
 *                               (plain bytes only: no pointers, handles or fds).
 *   connect(conn, peer_blob)    finish it with the peer's blob; FX_IN_PROGRESS = call again.
 *   proxy_setup/proxy_connect   optional work on the core's proxy service thread.
 *   proxy_progress(conn, &did)  optional background progress on the progress thread.
 *   register(ctx, ptr, len, kind, &mh, out)   optional; deregister(ctx, mh) releases.
 *   isend/irecv(conn, buf, len, mh, &req)     post; *req left NULL = "not now, retry".
 *   test(req, &done, &nbytes)   progress; once done (or on error) the request is gone.
 *   free(conn)                  close; cancels requests still outstanding.
 *   last_error(buf, len)        text of the last error raised on the calling thread.
 *
 * Threading: hooks taking the same conn (and test on its requests) are
 * serialized by the core; register/deregister may run concurrently with anything.
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
  const volatile uint32_t *abort_flag; /* non-zero once the communicator aborts */
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
