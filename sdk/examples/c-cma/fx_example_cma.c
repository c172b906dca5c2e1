/*
 * fx_example_cma.c — a ferrocx collective plugin written in C from
 * ferrocx_collective.h alone: all_gather, broadcast, alltoall, gather and
 * scatter on host memory, where every buffer this rank receives into lies in
 * a symmetric window. Senders write straight into the receivers' windows with
 * process_vm_writev (cross-memory attach): a peer's destination is its window
 * address (fx_window_desc_t.peer_addrs) plus this rank's own offset in its
 * window — no address exchange per call. Two out-of-band barriers frame each
 * call (every rank ready before anyone writes; every write done before anyone
 * returns). It proves the ABI, not speed: the barriers are bootstrap round
 * trips.
 *
 * Build: cc -shared -fPIC -I sdk/include -o libferrocx_plugin_cma.so fx_example_cma.c
 * Load:  FERROCX_PLUGINS=/path/libferrocx_plugin_cma.so
 * Priority: FX_COLL_CORE_PRIORITY + 50, or FERROCX_CMA_PRIORITY.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "ferrocx_collective.h"

#define COMM_TAG 0x636d6163u /* "cmac" */
#define WIN_TAG 0x636d6177u  /* "cmaw" */

typedef struct {
  const fx_host_v1_t *host;
  int32_t priority;
} cma_ctx_t;

typedef struct {
  uint32_t tag;
  cma_ctx_t *ctx;
  int32_t rank, nranks;
  pid_t *pids;
  fx_comm_oob_t oob;
} cma_comm_t;

typedef struct {
  uint32_t tag;
  uint64_t bytes;
  uint64_t *addrs; /* every rank's window in its own process */
} cma_win_t;

static __thread char last_err[512];

static int32_t fail(int32_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_err, sizeof last_err, fmt, ap);
  va_end(ap);
  return code;
}

static size_t cma_last_error(char *buf, size_t len) {
  size_t n = strlen(last_err);
  if (buf != NULL && len > 0) {
    size_t k = n < len - 1 ? n : len - 1;
    memcpy(buf, last_err, k);
    buf[k] = '\0';
  }
  return n;
}

static int32_t cma_init(const fx_host_v1_t *host, void **ctx) {
  cma_ctx_t *c;
  char val[32];
  if (ctx == NULL) return fail(FX_INVALID_ARGUMENT, "cma init: ctx is NULL");
  c = (cma_ctx_t *)calloc(1, sizeof *c);
  if (c == NULL) return fail(FX_SYSTEM, "cma init: out of memory");
  c->host = host;
  c->priority = FX_COLL_CORE_PRIORITY + 50;
  if (host != NULL && host->struct_size >= sizeof(fx_host_v1_t) && host->getenv != NULL &&
      host->getenv(host->host_ctx, "FERROCX_CMA_PRIORITY", val, sizeof val) > 0)
    c->priority = atoi(val);
  *ctx = c;
  return FX_OK;
}

static int32_t cma_finalize(void *ctx) {
  if (ctx == NULL) return fail(FX_INVALID_ARGUMENT, "cma finalize: ctx is NULL");
  free(ctx);
  return FX_OK;
}

static int32_t cma_comm_init(void *ctx, const fx_comm_info_t *info, const fx_comm_oob_t *oob, void **comm) {
  cma_comm_t *c;
  int32_t r;
  if (ctx == NULL || info == NULL || oob == NULL || comm == NULL || info->peers == NULL)
    return fail(FX_INVALID_ARGUMENT, "cma comm_init: NULL argument");
  if (oob->all_gather == NULL || oob->barrier == NULL)
    return fail(FX_UNSUPPORTED, "cma comm_init: the host offers no out-of-band barrier");
  for (r = 0; r < info->nranks; r++)
    if (info->peers[r].host_hash != info->peers[info->rank].host_hash)
      return fail(FX_UNSUPPORTED, "cma comm_init: rank %d is on another host (%s)", (int)r,
                  info->peers[r].host_name);
  c = (cma_comm_t *)calloc(1, sizeof *c);
  if (c == NULL) return fail(FX_SYSTEM, "cma comm_init: out of memory");
  c->pids = (pid_t *)calloc((size_t)info->nranks, sizeof(pid_t));
  if (c->pids == NULL) {
    free(c);
    return fail(FX_SYSTEM, "cma comm_init: out of memory");
  }
  for (r = 0; r < info->nranks; r++) c->pids[r] = (pid_t)info->peers[r].pid;
  c->tag = COMM_TAG;
  c->ctx = (cma_ctx_t *)ctx;
  c->rank = info->rank;
  c->nranks = info->nranks;
  c->oob = *oob;
  *comm = c;
  return FX_OK;
}

static cma_comm_t *as_comm(void *p) {
  cma_comm_t *c = (cma_comm_t *)p;
  return (c != NULL && c->tag == COMM_TAG) ? c : NULL;
}

static int32_t cma_comm_destroy(void *comm) {
  cma_comm_t *c = as_comm(comm);
  if (c == NULL) return fail(FX_INVALID_ARGUMENT, "cma comm_destroy: not a live cma comm");
  c->tag = 0;
  free(c->pids);
  free(c);
  return FX_OK;
}

static int32_t cma_window_register(void *comm, const fx_window_desc_t *d, void **win) {
  cma_comm_t *c = as_comm(comm);
  cma_win_t *w;
  if (c == NULL || d == NULL || win == NULL) return fail(FX_INVALID_ARGUMENT, "cma window_register: NULL argument");
  *win = NULL;
  if (d->mem_kind != FX_MEM_HOST) return FX_OK; /* not ours: device memory */
  w = (cma_win_t *)calloc(1, sizeof *w);
  if (w == NULL) return fail(FX_SYSTEM, "cma window_register: out of memory");
  w->addrs = (uint64_t *)malloc((size_t)c->nranks * sizeof(uint64_t));
  if (w->addrs == NULL) {
    free(w);
    return fail(FX_SYSTEM, "cma window_register: out of memory");
  }
  memcpy(w->addrs, d->peer_addrs, (size_t)c->nranks * sizeof(uint64_t));
  w->tag = WIN_TAG;
  w->bytes = d->bytes;
  *win = w;
  return FX_OK;
}

static int32_t cma_window_deregister(void *comm, void *win) {
  cma_win_t *w = (cma_win_t *)win;
  if (as_comm(comm) == NULL || w == NULL || w->tag != WIN_TAG)
    return fail(FX_INVALID_ARGUMENT, "cma window_deregister: not a live cma window");
  w->tag = 0;
  free(w->addrs);
  free(w);
  return FX_OK;
}

static uint64_t type_bytes(int32_t t) {
  switch (t) {
  case FX_TYPE_I8: case FX_TYPE_U8: case FX_TYPE_F8E4M3: case FX_TYPE_F8E5M2: return 1;
  case FX_TYPE_F16: case FX_TYPE_BF16: return 2;
  case FX_TYPE_I32: case FX_TYPE_U32: case FX_TYPE_F32: return 4;
  case FX_TYPE_I64: case FX_TYPE_U64: case FX_TYPE_F64: return 8;
  default: return 0;
  }
}

static int runs(int32_t coll) {
  return coll == FX_COLL_ALL_GATHER || coll == FX_COLL_BROADCAST || coll == FX_COLL_ALL_TO_ALL ||
         coll == FX_COLL_GATHER || coll == FX_COLL_SCATTER;
}

/* The receive buffer must lie in one of our windows on every rank — gather's
 * non-roots too, at the root's offset, though they receive nothing: a sender
 * finds a peer's buffer at its own offset. Callers use windows symmetrically
 * (every rank's buffers in windows, or none), so every rank answers alike. */
static int32_t cma_can_run(void *comm, const fx_coll_desc_t *d) {
  cma_comm_t *c = as_comm(comm);
  if (c == NULL || d == NULL) return 0;
  if (!runs(d->coll) || d->mem_kind != FX_MEM_HOST || type_bytes(d->dtype) == 0) return 0;
  if (d->coll == FX_COLL_ALL_TO_ALL && (d->flags & FX_COLL_IN_PLACE)) return 0;
  if (!(d->flags & FX_COLL_RECV_WINDOW)) return 0;
  return c->ctx->priority;
}

/* Write `len` bytes at `src` into rank `peer`'s memory at `dst` (its address). */
static int32_t put(cma_comm_t *c, int32_t peer, uint64_t dst, const void *src, uint64_t len) {
  uint64_t done = 0;
  if (peer == c->rank) {
    if ((uint64_t)(uintptr_t)src != dst) memmove((void *)(uintptr_t)dst, src, len);
    return FX_OK;
  }
  while (done < len) {
    struct iovec l = {(char *)src + done, (size_t)(len - done)};
    struct iovec r = {(void *)(uintptr_t)(dst + done), (size_t)(len - done)};
    ssize_t n = process_vm_writev(c->pids[peer], &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno == ESRCH ? FX_REMOTE : FX_SYSTEM, "cma: writing %llu bytes into rank %d (pid %d): %s",
                  (unsigned long long)(len - done), (int)peer, (int)c->pids[peer], strerror(errno));
    }
    if (n == 0) return fail(FX_SYSTEM, "cma: process_vm_writev into rank %d wrote nothing", (int)peer);
    done += (uint64_t)n;
  }
  return FX_OK;
}

static int32_t barrier(cma_comm_t *c, const char *what) {
  int32_t rc = c->oob.barrier(c->oob.oob_ctx);
  return rc == FX_OK ? FX_OK : fail(rc, "cma: out-of-band %s barrier failed", what);
}

static int32_t cma_launch(void *comm, const fx_coll_desc_t *d, void *stream) {
  cma_comm_t *c = as_comm(comm);
  const cma_win_t *w;
  uint64_t block, off;
  const char *send;
  int32_t r, rc = FX_OK, me, n, root;
  if (c == NULL || d == NULL) return fail(FX_INVALID_ARGUMENT, "cma launch: NULL argument");
  if (stream != NULL || d->mem_kind != FX_MEM_HOST) return fail(FX_UNSUPPORTED, "cma launch: host memory only");
  if (cma_can_run(comm, d) == 0) return fail(FX_INVALID_ARGUMENT, "cma launch: a call can_run refused");
  me = c->rank;
  n = c->nranks;
  root = d->root;
  block = d->count * type_bytes(d->dtype);
  /* A peer's receive buffer is at our own receive offset in its window. */
  w = (const cma_win_t *)d->recv_win;
  off = d->recv_offset;
  send = (const char *)d->send;
  if (block == 0) return FX_OK;
  if ((rc = barrier(c, "ready")) != FX_OK) return rc;
  switch (d->coll) {
  case FX_COLL_ALL_GATHER: /* in place: our input already sits at recv + me*block */
    for (r = 0; r < n && rc == FX_OK; r++)
      if (!(r == me && (d->flags & FX_COLL_IN_PLACE)))
        rc = put(c, r, (r == me ? (uint64_t)(uintptr_t)d->recv : w->addrs[r] + off) + (uint64_t)me * block,
                 (d->flags & FX_COLL_IN_PLACE) ? (const char *)d->recv + (uint64_t)me * block : send, block);
    break;
  case FX_COLL_BROADCAST:
    if (me == root)
      for (r = 0; r < n && rc == FX_OK; r++)
        rc = put(c, r, r == me ? (uint64_t)(uintptr_t)d->recv : w->addrs[r] + off, send, block);
    break;
  case FX_COLL_ALL_TO_ALL:
    for (r = 0; r < n && rc == FX_OK; r++)
      rc = put(c, r, (r == me ? (uint64_t)(uintptr_t)d->recv : w->addrs[r] + off) + (uint64_t)me * block,
               send + (uint64_t)r * block, block);
    break;
  case FX_COLL_GATHER: /* every rank passed the same window offset as receive buffer (can_run) */
    if (!(me == root && (d->flags & FX_COLL_IN_PLACE)))
      rc = put(c, root, (me == root ? (uint64_t)(uintptr_t)d->recv : w->addrs[root] + off) + (uint64_t)me * block,
               send, block);
    break;
  case FX_COLL_SCATTER:
    if (me == root)
      for (r = 0; r < n && rc == FX_OK; r++)
        if (!(r == me && (d->flags & FX_COLL_IN_PLACE))) /* in place, the root's block stays */
          rc = put(c, r, r == me ? (uint64_t)(uintptr_t)d->recv : w->addrs[r] + off, send + (uint64_t)r * block, block);
    break;
  default:
    rc = fail(FX_UNSUPPORTED, "cma launch: collective %d", (int)d->coll);
  }
  /* Always reach the second barrier, or the peers wait for us until the timeout. */
  {
    int32_t rc2 = barrier(c, "complete");
    if (rc == FX_OK) rc = rc2;
  }
  return rc;
}

static const fx_collective_v1_t table = {
    .abi_version = FX_COLL_ABI_VERSION_1,
    .struct_size = sizeof(fx_collective_v1_t),
    .name = "cma",
    .caps = FX_COLL_CAP_HOST_MEM | FX_COLL_CAP_WINDOWS,
    .init = cma_init,
    .finalize = cma_finalize,
    .comm_init = cma_comm_init,
    .comm_destroy = cma_comm_destroy,
    .can_run = cma_can_run,
    .window_register = cma_window_register,
    .window_deregister = cma_window_deregister,
    .launch = cma_launch,
    .status = NULL,
    .last_error = cma_last_error,
};

const fx_collective_v1_t *ferrocx_collective_v1(void) { return &table; }
