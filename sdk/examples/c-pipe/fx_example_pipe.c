/*
 * fx_example_pipe.c — "c-pipe", a small same-host ferrocx transport in C99.
 *
 * The model for a vendor writing a plugin without Rust. It moves host memory
 * between two processes of one host over an AF_UNIX stream socket:
 *
 *   setup (receiving end)  creates a listening socket bound to an abstract
 *                          address unique per (pid, conn_id, counter) and
 *                          puts that address (plain bytes) in its blob.
 *   setup (sending end)    only describes itself (magic, conn_id) in its blob.
 *   connect (sender)       connects to the address from the receiver's blob.
 *   connect (receiver)     accepts without blocking: FX_IN_PROGRESS until then.
 *   isend / irecv          queue a request on the connection, in order.
 *   test                   moves bytes with non-blocking I/O; never blocks.
 *
 * Wire format: each message is an 8-byte length (host byte order: both ends
 * are on one host) followed by the payload. Messages match receives in order.
 * A message longer than the posted receive fails that receive with
 * FX_INVALID_ARGUMENT and is discarded, so the stream stays in step.
 *
 * Errors: every hook that fails stores a message in a thread-local buffer
 * (GCC/Clang `__thread`; with other compilers it is one static buffer shared
 * by all threads) that `last_error` copies out. Errors found while
 * progressing a connection are kept in the request or the connection and
 * raised by the `test` call that reports them, on the caller's thread.
 *
 * Registration: `reg`, `deregister` and the proxy hooks are NULL (absent):
 * data is copied through the socket, so registering memory would buy nothing.
 * Nothing here waits, so `timeout_ms` and `abort_flag` need no handling.
 *
 * Threading (the ABI contract): hooks on one connection, and `test` on its
 * requests, are serialized by the core; different connections may be used
 * from different threads at once. Connections share no mutable state except
 * the atomic name counter.
 *
 * Build:  cc -std=c99 -Wall -Wextra -Werror -fPIC -shared \
 *            -I sdk/include -o libferrocx_plugin_cpipe.so fx_example_pipe.c
 * Linux only (abstract AF_UNIX addresses, accept4, MSG_NOSIGNAL).
 */
#define _GNU_SOURCE /* accept4, SOCK_NONBLOCK, SOCK_CLOEXEC */

#include "ferrocx_plugin.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define CPIPE_NAME "c-pipe"
#define CPIPE_SCORE 10 /* below the Rust shm transport's 100 */
#define CPIPE_BLOB_MAGIC 0x45504950u /* "PIPE" */
#define CPIPE_BLOB_VERSION 1u
#define CPIPE_ADDR_BYTES 104
#define CPIPE_MAX_REQUESTS 1024 /* per connection; beyond it isend/irecv say "not now" */
#define CPIPE_HDR_BYTES 8
#define CPIPE_MSG_BYTES 256

/* Tags that catch a stale or wrong handle passed to a hook (best effort). */
#define CONN_TAG 0x434f4e4eu
#define REQ_TAG 0x52455155u
#define DEAD_TAG 0xdeadbeefu

#if defined(__GNUC__) || defined(__clang__)
#define CPIPE_THREAD_LOCAL __thread
#define CPIPE_EXPORT __attribute__((visibility("default")))
#define CPIPE_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CPIPE_THREAD_LOCAL /* shared by all threads: documented above */
#define CPIPE_EXPORT
#define CPIPE_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------------ */
/* Types                                                                    */

/* What one end tells the other. Plain bytes only: no pointers, no fds.     */
/* Field sizes add up to 128 bytes, so the struct has no padding.           */
typedef struct cpipe_blob {
  uint32_t magic;   /* CPIPE_BLOB_MAGIC */
  uint32_t version; /* CPIPE_BLOB_VERSION */
  uint64_t conn_id; /* from fx_conn_req_t: both ends must agree */
  int32_t direction; /* FX_DIR_* of the end that wrote the blob */
  uint32_t addr_len; /* bytes of addr in use; 0 in the sender's blob */
  char addr[CPIPE_ADDR_BYTES]; /* sun_path of an abstract address: addr[0] == '\0' */
} cpipe_blob_t;

/* C99 compile-time check: no padding, and it fits in a blob. */
typedef char cpipe_blob_size_check[(sizeof(cpipe_blob_t) == 128 && sizeof(cpipe_blob_t) <= FX_BLOB_BYTES) ? 1 : -1];

typedef struct cpipe_ctx {
  const fx_host_v1_t *host; /* NULL when the host table is missing or too old */
} cpipe_ctx_t;

enum { REQ_PENDING, REQ_DONE, REQ_FAILED };

struct cpipe_conn;

typedef struct cpipe_req {
  uint32_t tag;
  struct cpipe_conn *conn;
  struct cpipe_req *prev, *next; /* the connection's requests, in posting order */
  int state;
  unsigned char *buf; /* user buffer; never written for a send */
  size_t len;         /* posted length */
  uint64_t hdr;       /* send: the length header */
  size_t moved;       /* send: header + payload bytes written so far */
  size_t nbytes;      /* result once REQ_DONE */
  int32_t err_code;   /* REQ_FAILED: code and text */
  char err[CPIPE_MSG_BYTES];
} cpipe_req_t;

typedef struct cpipe_conn {
  uint32_t tag;
  const fx_host_v1_t *host;
  int32_t direction;
  uint64_t conn_id;
  int listen_fd; /* receiver until accepted, else -1 */
  int fd;        /* the data socket once connecting/connected, else -1 */
  int connected;
  struct sockaddr_un addr; /* receiver: own address; sender: the peer's */
  socklen_t addr_len;
  cpipe_req_t *head, *tail;
  size_t nreqs;
  /* receive stream state */
  unsigned char hdr[CPIPE_HDR_BYTES];
  size_t hdr_got;
  int in_msg;       /* header complete, payload of msg_len going to head request */
  uint64_t msg_len;
  uint64_t msg_got;
  uint64_t drain;   /* bytes of a rejected message still to discard */
  /* set once the connection failed: every later request fails with it */
  int32_t broken_code;
  char broken[CPIPE_MSG_BYTES];
} cpipe_conn_t;

/* ------------------------------------------------------------------------ */
/* Errors and logging                                                       */

static CPIPE_THREAD_LOCAL char last_err[CPIPE_MSG_BYTES];

static int32_t fail(int32_t code, const char *fmt, ...) CPIPE_PRINTF(2, 3);
static int32_t fail(int32_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_err, sizeof last_err, fmt, ap);
  va_end(ap);
  return code;
}

static void cpipe_log(const fx_host_v1_t *host, int32_t level, const char *fmt, ...) CPIPE_PRINTF(3, 4);
static void cpipe_log(const fx_host_v1_t *host, int32_t level, const char *fmt, ...) {
  char msg[CPIPE_MSG_BYTES];
  va_list ap;
  if (host == NULL || host->log == NULL) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  host->log(host->host_ctx, level, msg);
}

/* Mark the connection failed; the message is raised by the next test. */
static int32_t conn_break(cpipe_conn_t *c, int32_t code, const char *fmt, ...) CPIPE_PRINTF(3, 4);
static int32_t conn_break(cpipe_conn_t *c, int32_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->broken, sizeof c->broken, fmt, ap);
  va_end(ap);
  c->broken_code = code;
  return code;
}

static cpipe_conn_t *as_conn(void *conn) {
  cpipe_conn_t *c = (cpipe_conn_t *)conn;
  return (c != NULL && c->tag == CONN_TAG) ? c : NULL;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */

static void req_unlink(cpipe_req_t *r) {
  cpipe_conn_t *c = r->conn;
  if (r->prev) r->prev->next = r->next; else c->head = r->next;
  if (r->next) r->next->prev = r->prev; else c->tail = r->prev;
  c->nreqs--;
  r->tag = DEAD_TAG;
  free(r);
}

static cpipe_req_t *first_pending(cpipe_conn_t *c) {
  cpipe_req_t *r = c->head;
  while (r != NULL && r->state != REQ_PENDING) r = r->next;
  return r;
}

/* ------------------------------------------------------------------------ */
/* Progress: non-blocking I/O on one connection                             */

static int would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK; }

static int32_t progress_send(cpipe_conn_t *c) {
  cpipe_req_t *r;
  while ((r = first_pending(c)) != NULL) {
    size_t total = CPIPE_HDR_BYTES + r->len;
    while (r->moved < total) {
      struct iovec iov[2];
      struct msghdr mh;
      size_t off;
      ssize_t k;
      int n = 0;
      if (r->moved < CPIPE_HDR_BYTES) {
        iov[n].iov_base = (unsigned char *)&r->hdr + r->moved;
        iov[n].iov_len = CPIPE_HDR_BYTES - r->moved;
        n++;
      }
      off = r->moved < CPIPE_HDR_BYTES ? 0 : r->moved - CPIPE_HDR_BYTES;
      if (r->len > off) {
        iov[n].iov_base = r->buf + off;
        iov[n].iov_len = r->len - off;
        n++;
      }
      memset(&mh, 0, sizeof mh);
      mh.msg_iov = iov;
      mh.msg_iovlen = (size_t)n;
      k = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EINTR) continue;
        if (would_block(errno)) return FX_OK;
        if (errno == EPIPE || errno == ECONNRESET)
          return conn_break(c, FX_REMOTE, "c-pipe: the receiver closed connection %llu (%zu of %zu bytes of a message sent)",
                            (unsigned long long)c->conn_id, r->moved, total);
        return conn_break(c, FX_SYSTEM, "c-pipe: send on connection %llu: %s", (unsigned long long)c->conn_id,
                          strerror(errno));
      }
      r->moved += (size_t)k;
    }
    r->state = REQ_DONE;
    r->nbytes = r->len;
  }
  return FX_OK;
}

/* Read up to `len` bytes; returns bytes read, 0 when it would block, -1 on a break. */
static ssize_t read_some(cpipe_conn_t *c, void *buf, size_t len, int *blocked) {
  for (;;) {
    ssize_t k = recv(c->fd, buf, len, MSG_DONTWAIT);
    if (k > 0) return k;
    if (k == 0) {
      conn_break(c, FX_REMOTE, "c-pipe: the sender closed connection %llu%s", (unsigned long long)c->conn_id,
                 c->in_msg || c->hdr_got || c->drain ? " in the middle of a message" : "");
      return -1;
    }
    if (errno == EINTR) continue;
    if (would_block(errno)) {
      *blocked = 1;
      return 0;
    }
    conn_break(c, errno == ECONNRESET ? FX_REMOTE : FX_SYSTEM, "c-pipe: receive on connection %llu: %s",
               (unsigned long long)c->conn_id, strerror(errno));
    return -1;
  }
}

static int32_t progress_recv(cpipe_conn_t *c) {
  for (;;) {
    cpipe_req_t *r;
    ssize_t k;
    int blocked = 0;
    if (c->drain > 0) { /* discard the rest of a rejected message */
      unsigned char scratch[4096];
      size_t want = c->drain < sizeof scratch ? (size_t)c->drain : sizeof scratch;
      k = read_some(c, scratch, want, &blocked);
      if (k < 0) return c->broken_code;
      if (blocked) return FX_OK;
      c->drain -= (uint64_t)k;
      continue;
    }
    r = first_pending(c);
    if (r == NULL) return FX_OK; /* nothing posted: leave data in the socket */
    if (!c->in_msg) {
      k = read_some(c, c->hdr + c->hdr_got, CPIPE_HDR_BYTES - c->hdr_got, &blocked);
      if (k < 0) return c->broken_code;
      if (blocked) return FX_OK;
      c->hdr_got += (size_t)k;
      if (c->hdr_got < CPIPE_HDR_BYTES) continue;
      memcpy(&c->msg_len, c->hdr, CPIPE_HDR_BYTES);
      c->hdr_got = 0;
      c->msg_got = 0;
      if (c->msg_len > r->len) {
        r->state = REQ_FAILED;
        r->err_code = FX_INVALID_ARGUMENT;
        snprintf(r->err, sizeof r->err,
                 "c-pipe test: received a %llu-byte message but the posted receive holds only %zu bytes"
                 " (message discarded)",
                 (unsigned long long)c->msg_len, r->len);
        c->drain = c->msg_len;
        continue;
      }
      c->in_msg = 1;
    }
    if (c->msg_got < c->msg_len) {
      k = read_some(c, r->buf + c->msg_got, (size_t)(c->msg_len - c->msg_got), &blocked);
      if (k < 0) return c->broken_code;
      if (blocked) return FX_OK;
      c->msg_got += (uint64_t)k;
    }
    if (c->msg_got == c->msg_len) {
      r->state = REQ_DONE;
      r->nbytes = (size_t)c->msg_len;
      c->in_msg = 0;
    }
  }
}

static int32_t progress(cpipe_conn_t *c) {
  if (c->broken_code != FX_OK) return c->broken_code;
  return c->direction == FX_DIR_SEND ? progress_send(c) : progress_recv(c);
}

/* ------------------------------------------------------------------------ */
/* Hooks                                                                    */

static int32_t cpipe_init(const fx_host_v1_t *host, void **ctx) {
  cpipe_ctx_t *x;
  if (ctx == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe init: ctx out-pointer is NULL");
  x = (cpipe_ctx_t *)calloc(1, sizeof *x);
  if (x == NULL) return fail(FX_SYSTEM, "c-pipe init: out of memory");
  /* Use the host table only if it is the version we know and large enough. */
  if (host != NULL && host->abi_version == FX_ABI_VERSION_1 && host->struct_size >= sizeof(fx_host_v1_t))
    x->host = host;
  cpipe_log(x->host, FX_LOG_INFO, "c-pipe: AF_UNIX stream transport ready in pid %ld (example plugin, host memory only)",
            (long)getpid());
  *ctx = x;
  return FX_OK;
}

static int32_t cpipe_finalize(void *ctx) {
  if (ctx == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe finalize: ctx is NULL");
  free(ctx);
  return FX_OK;
}

static int32_t cpipe_can_connect(void *ctx, const fx_peer_info_t *me, const fx_peer_info_t *peer) {
  if (ctx == NULL || me == NULL || peer == NULL) return 0; /* a score, not a code */
  return me->host_hash == peer->host_hash ? CPIPE_SCORE : 0;
}

/* Receiving end: bind a listening socket to a fresh abstract address. */
static int32_t listen_unique(cpipe_conn_t *c) {
  static unsigned counter;
  int attempt;
  c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->listen_fd < 0) return fail(FX_SYSTEM, "c-pipe setup: socket: %s", strerror(errno));
  for (attempt = 0; attempt < 16; attempt++) {
    unsigned n = __sync_fetch_and_add(&counter, 1u);
    int len;
    memset(&c->addr, 0, sizeof c->addr);
    c->addr.sun_family = AF_UNIX;
    /* sun_path[0] stays '\0': an abstract address, gone when the socket closes. */
    len = snprintf(c->addr.sun_path + 1, CPIPE_ADDR_BYTES - 1, "ferrocx-cpipe-%ld-%016llx-%u", (long)getpid(),
                   (unsigned long long)c->conn_id, n);
    if (len < 0 || len >= CPIPE_ADDR_BYTES - 1) return fail(FX_INTERNAL, "c-pipe setup: socket name too long");
    c->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    if (bind(c->listen_fd, (struct sockaddr *)&c->addr, c->addr_len) == 0) {
      if (listen(c->listen_fd, 1) != 0) return fail(FX_SYSTEM, "c-pipe setup: listen: %s", strerror(errno));
      return FX_OK;
    }
    if (errno != EADDRINUSE) return fail(FX_SYSTEM, "c-pipe setup: bind: %s", strerror(errno));
  }
  return fail(FX_SYSTEM, "c-pipe setup: no free socket name for connection %llu", (unsigned long long)c->conn_id);
}

static void conn_close(cpipe_conn_t *c) {
  while (c->head != NULL) req_unlink(c->head);
  if (c->listen_fd >= 0) close(c->listen_fd);
  if (c->fd >= 0) close(c->fd);
  c->tag = DEAD_TAG;
  free(c);
}

static int32_t cpipe_setup(void *ctx, const fx_conn_req_t *req, void **conn, fx_blob_t *out_blob) {
  cpipe_ctx_t *x = (cpipe_ctx_t *)ctx;
  cpipe_conn_t *c;
  cpipe_blob_t b;
  int32_t rc;
  if (x == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe setup: ctx is NULL");
  if (req == NULL || conn == NULL || out_blob == NULL)
    return fail(FX_INVALID_ARGUMENT, "c-pipe setup: req, conn or out_blob is NULL");
  if (req->direction != FX_DIR_SEND && req->direction != FX_DIR_RECV)
    return fail(FX_INVALID_ARGUMENT, "c-pipe setup: direction %d is neither FX_DIR_SEND nor FX_DIR_RECV",
                (int)req->direction);
  *conn = NULL;
  c = (cpipe_conn_t *)calloc(1, sizeof *c);
  if (c == NULL) return fail(FX_SYSTEM, "c-pipe setup: out of memory");
  c->tag = CONN_TAG;
  c->host = x->host;
  c->direction = req->direction;
  c->conn_id = req->conn_id;
  c->listen_fd = -1;
  c->fd = -1;

  memset(&b, 0, sizeof b); /* every byte of the blob is defined */
  b.magic = CPIPE_BLOB_MAGIC;
  b.version = CPIPE_BLOB_VERSION;
  b.conn_id = req->conn_id;
  b.direction = req->direction;
  if (c->direction == FX_DIR_RECV) {
    rc = listen_unique(c);
    if (rc != FX_OK) {
      conn_close(c);
      return rc;
    }
    b.addr_len = (uint32_t)(c->addr_len - offsetof(struct sockaddr_un, sun_path));
    memcpy(b.addr, c->addr.sun_path, b.addr_len);
  }
  memset(out_blob, 0, sizeof *out_blob);
#ifdef CPIPE_EMPTY_SEND_BLOB
  /* Variant for the conformance kit's tests: the sending end has nothing to
   * tell (len 0 is legal); the receiving end then checks less. */
  if (c->direction == FX_DIR_SEND) {
    *conn = c;
    return FX_OK;
  }
#endif
  memcpy(out_blob->bytes, &b, sizeof b);
  out_blob->len = (uint32_t)sizeof b;
  *conn = c;
  return FX_OK;
}

/* Check the peer's blob: ours, same version, same connection, other direction. */
static int32_t read_peer_blob(const cpipe_conn_t *c, const fx_blob_t *blob, cpipe_blob_t *b) {
  if (blob == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe connect: peer blob is NULL");
#ifdef CPIPE_EMPTY_SEND_BLOB
  if (c->direction == FX_DIR_RECV) {
    if (blob->len != 0)
      return fail(FX_INVALID_ARGUMENT, "c-pipe connect: the sending end's blob should be empty, it holds %u bytes",
                  (unsigned)blob->len);
    memset(b, 0, sizeof *b);
    b->direction = FX_DIR_SEND;
    return FX_OK;
  }
#endif
  if (blob->len != sizeof *b)
    return fail(FX_INVALID_ARGUMENT, "c-pipe connect: peer blob holds %u bytes, expected %zu (not a c-pipe blob?)",
                (unsigned)blob->len, sizeof *b);
  memcpy(b, blob->bytes, sizeof *b); /* bytes[] is unaligned: copy, never cast */
  if (b->magic != CPIPE_BLOB_MAGIC || b->version != CPIPE_BLOB_VERSION)
    return fail(FX_INVALID_ARGUMENT, "c-pipe connect: peer blob has magic %#x version %u, expected %#x version %u",
                (unsigned)b->magic, (unsigned)b->version, CPIPE_BLOB_MAGIC, CPIPE_BLOB_VERSION);
  if (b->conn_id != c->conn_id)
    return fail(FX_INVALID_ARGUMENT, "c-pipe connect: peer blob is for connection %llu, this is connection %llu",
                (unsigned long long)b->conn_id, (unsigned long long)c->conn_id);
  if (b->direction == c->direction)
    return fail(FX_INVALID_ARGUMENT, "c-pipe connect: both ends of connection %llu are %s ends",
                (unsigned long long)c->conn_id, c->direction == FX_DIR_SEND ? "sending" : "receiving");
  if (b->direction == FX_DIR_RECV && (b->addr_len < 2 || b->addr_len > CPIPE_ADDR_BYTES || b->addr[0] != '\0'))
    return fail(FX_INVALID_ARGUMENT, "c-pipe connect: peer blob carries no valid abstract socket address");
  return FX_OK;
}

static int32_t cpipe_connect(void *conn, const fx_blob_t *peer_blob) {
  cpipe_conn_t *c = as_conn(conn);
  cpipe_blob_t b;
  int32_t rc;
  if (c == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe connect: conn is NULL or not a live c-pipe connection");
  if (c->connected) return FX_OK;
  rc = read_peer_blob(c, peer_blob, &b);
  if (rc != FX_OK) return rc;

  if (c->direction == FX_DIR_RECV) {
    int fd = accept4(c->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (would_block(errno) || errno == EINTR) return FX_IN_PROGRESS;
      return fail(FX_SYSTEM, "c-pipe connect: accept on connection %llu: %s", (unsigned long long)c->conn_id,
                  strerror(errno));
    }
    c->fd = fd;
    close(c->listen_fd); /* one connection per listener: free the name now */
    c->listen_fd = -1;
    c->connected = 1;
    return FX_OK;
  }

  if (c->fd < 0) {
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return fail(FX_SYSTEM, "c-pipe connect: socket: %s", strerror(errno));
    memset(&c->addr, 0, sizeof c->addr);
    c->addr.sun_family = AF_UNIX;
    memcpy(c->addr.sun_path, b.addr, b.addr_len);
    c->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + b.addr_len);
  }
  if (connect(c->fd, (struct sockaddr *)&c->addr, c->addr_len) == 0 || errno == EISCONN) {
    c->connected = 1;
    return FX_OK;
  }
  if (would_block(errno) || errno == EINPROGRESS || errno == EALREADY || errno == EINTR)
    return FX_IN_PROGRESS; /* listener backlog full: try again */
  if (errno == ECONNREFUSED || errno == ENOENT)
    return fail(FX_REMOTE,
                "c-pipe connect: nobody listens at @%.*s for connection %llu (receiver gone, or in another network "
                "namespace)",
                (int)(b.addr_len - 1), b.addr + 1, (unsigned long long)c->conn_id);
  return fail(FX_SYSTEM, "c-pipe connect: connect to @%.*s: %s", (int)(b.addr_len - 1), b.addr + 1, strerror(errno));
}

static int32_t post(const char *hook, void *conn, void *data, size_t len, void **request, int32_t want_dir) {
  cpipe_conn_t *c;
  cpipe_req_t *r;
  if (request == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe %s: request out-pointer is NULL", hook);
  *request = NULL;
  c = as_conn(conn);
  if (c == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe %s: conn is NULL or not a live c-pipe connection", hook);
  if (data == NULL && len > 0) return fail(FX_INVALID_ARGUMENT, "c-pipe %s: buffer is NULL but len is %zu", hook, len);
  if (c->direction != want_dir)
    return fail(FX_INVALID_ARGUMENT, "c-pipe %s: connection %llu is a %s end", hook, (unsigned long long)c->conn_id,
                c->direction == FX_DIR_SEND ? "sending" : "receiving");
  if (!c->connected)
    return fail(FX_INVALID_ARGUMENT, "c-pipe %s: connection %llu is not connected (call connect until FX_OK)", hook,
                (unsigned long long)c->conn_id);
  if (c->broken_code != FX_OK) return fail(c->broken_code, "%s", c->broken);
  if (c->nreqs >= CPIPE_MAX_REQUESTS) return FX_OK; /* *request stays NULL: "not now", the core retries */

  r = (cpipe_req_t *)calloc(1, sizeof *r);
  if (r == NULL) return fail(FX_SYSTEM, "c-pipe %s: out of memory", hook);
  r->tag = REQ_TAG;
  r->conn = c;
  r->state = REQ_PENDING;
  r->buf = (unsigned char *)data;
  r->len = len;
  r->hdr = (uint64_t)len;
  r->prev = c->tail;
  if (c->tail) c->tail->next = r; else c->head = r;
  c->tail = r;
  c->nreqs++;
  *request = r;
  progress(c); /* start moving bytes now; a failure is reported by test */
  return FX_OK;
}

static int32_t cpipe_isend(void *conn, const void *data, size_t len, void *mhandle, void **request) {
  (void)mhandle; /* no registration: always NULL here */
  /* The cast drops const only to share the request struct; a send never writes to buf. */
  return post("isend", conn, (void *)(uintptr_t)data, len, request, FX_DIR_SEND);
}

static int32_t cpipe_irecv(void *conn, void *data, size_t len, void *mhandle, void **request) {
  (void)mhandle;
  return post("irecv", conn, data, len, request, FX_DIR_RECV);
}

static int32_t cpipe_test(void *request, int32_t *done, size_t *nbytes) {
  cpipe_req_t *r = (cpipe_req_t *)request;
  cpipe_conn_t *c;
  int32_t code;
  if (r == NULL || r->tag != REQ_TAG)
    return fail(FX_INVALID_ARGUMENT, "c-pipe test: request is NULL or not a live c-pipe request (already completed?)");
  /* A NULL `done` is rejected without consuming the request, as the Rust SDK does. */
  if (done == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe test: done out-pointer is NULL");
  *done = 0;
  c = r->conn;
  if (r->state == REQ_PENDING) progress(c);
  switch (r->state) {
  case REQ_DONE:
    *done = 1;
    if (nbytes != NULL) *nbytes = r->nbytes;
    req_unlink(r);
    return FX_OK;
  case REQ_FAILED:
    code = fail(r->err_code, "%s", r->err);
    req_unlink(r);
    return code;
  default:
    if (c->broken_code != FX_OK) { /* the connection failed under this request */
      code = fail(c->broken_code, "%s", c->broken);
      req_unlink(r);
      return code;
    }
    return FX_OK;
  }
}

static int32_t cpipe_free(void *conn) {
  cpipe_conn_t *c = as_conn(conn);
  if (c == NULL) return fail(FX_INVALID_ARGUMENT, "c-pipe free: conn is NULL or not a live c-pipe connection");
  conn_close(c); /* frees requests still outstanding: their handles are dead */
  return FX_OK;
}

static size_t cpipe_last_error(char *buf, size_t len) {
  size_t n = strlen(last_err);
  if (buf != NULL && len > 0) {
    size_t k = n < len - 1 ? n : len - 1;
    memcpy(buf, last_err, k);
    buf[k] = '\0';
  }
  return n;
}

/* ------------------------------------------------------------------------ */
/* The table and the one exported symbol                                    */

static const fx_transport_v1_t cpipe_table = {
    .abi_version = FX_ABI_VERSION_1,
    .struct_size = (uint32_t)sizeof(fx_transport_v1_t),
    .name = CPIPE_NAME,
    .caps = FX_CAP_HOST_MEM,
    .init = cpipe_init,
    .finalize = cpipe_finalize,
    .can_connect = cpipe_can_connect,
    .setup = cpipe_setup,
    .connect = cpipe_connect,
    .proxy_setup = NULL,
    .proxy_connect = NULL,
    .proxy_progress = NULL,
    .reg = NULL,
    .deregister = NULL,
    .isend = cpipe_isend,
    .irecv = cpipe_irecv,
    .test = cpipe_test,
    .free = cpipe_free,
    .last_error = cpipe_last_error,
};

CPIPE_EXPORT const fx_transport_v1_t *ferrocx_transport_v1(void);
CPIPE_EXPORT const fx_transport_v1_t *ferrocx_transport_v1(void) { return &cpipe_table; }
