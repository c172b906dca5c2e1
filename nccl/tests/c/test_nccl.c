/* A program written against NCCL's API, run on ferrocx's libnccl.so.2 with
 * host buffers (ferrocx accepts them; NCCL would not), as 3 rank processes.
 * Every collective and data type, groups, split, PreMulSum, in-process
 * communicators (ncclCommInitAll and creation inside a group), and the error
 * paths, each checked. Rank and size come from FERROCX_RANK / FERROCX_NRANKS
 * and every rank's ncclGetUniqueId returns FERROCX_COMM_ID (as with
 * NCCL_COMM_ID). Prints "PASS rank R of N". */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;

#define FAIL(...)                                         \
  do {                                                    \
    fprintf(stderr, "rank %d: line %d: ", rank, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                          \
    fprintf(stderr, "\n");                                \
    exit(1);                                              \
  } while (0)

#define OK(call)                                                                      \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    if (r_ != ncclSuccess)                                                            \
      FAIL("%s -> %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)

/* `call` must fail with `want`, and the last error must contain `text`. */
#define EXPECT(want, text, call)                                                      \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    const char *m_ = ncclGetLastError(NULL);                                          \
    if (r_ != (want)) FAIL("%s -> %d, want %d (%s)", #call, (int)r_, (int)(want), m_); \
    if (strstr(m_, (text)) == NULL) FAIL("%s: message '%s' lacks '%s'", #call, m_, (text)); \
  } while (0)

/* Small integers as binary16 / bfloat16 bits (exact for |v| < 2048). */
static uint16_t to_half(int v) {
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  unsigned a = (unsigned)(v < 0 ? -v : v);
  int e = 0;
  while ((a >> e) > 1) e++;
  unsigned mant = (a << (10 - e)) & 0x3ff;
  return (uint16_t)(sign | ((e + 15) << 10) | mant);
}
static int from_half(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  if (e == 0) return 0;
  int v = (int)(((h & 0x3ff) | 0x400) >> (10 - (e - 15)));
  return (h & 0x8000) ? -v : v;
}
static uint16_t to_bf16(int v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static int from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return (int)f;
}

/* Element i of a buffer of type t, as an integer, and the other way round. */
static size_t size_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
static void put(void *buf, ncclDataType_t t, size_t i, long v) {
  char *p = (char *)buf + i * size_of(t);
  switch (t) {
    case ncclInt8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case ncclUint8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = v; memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case ncclFloat16: { uint16_t x = to_half((int)v); memcpy(p, &x, 2); break; }
    case ncclBfloat16: { uint16_t x = to_bf16((int)v); memcpy(p, &x, 2); break; }
    case ncclFloat32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case ncclFloat64: { double x = (double)v; memcpy(p, &x, 8); break; }
    default: FAIL("type %d", (int)t);
  }
}
static long get(const void *buf, ncclDataType_t t, size_t i) {
  const char *p = (const char *)buf + i * size_of(t);
  switch (t) {
    case ncclInt8: { int8_t x; memcpy(&x, p, 1); return x; }
    case ncclUint8: { uint8_t x; memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; memcpy(&x, p, 4); return (long)x; }
    case ncclInt64: { int64_t x; memcpy(&x, p, 8); return (long)x; }
    case ncclUint64: { uint64_t x; memcpy(&x, p, 8); return (long)x; }
    case ncclFloat16: { uint16_t x; memcpy(&x, p, 2); return from_half(x); }
    case ncclBfloat16: { uint16_t x; memcpy(&x, p, 2); return from_bf16(x); }
    case ncclFloat32: { float x; memcpy(&x, p, 4); return (long)x; }
    case ncclFloat64: { double x; memcpy(&x, p, 8); return (long)x; }
    default: FAIL("type %d", (int)t);
  }
  return 0;
}

/* Element i of rank r's input. */
static long val(int r, size_t i) { return (long)(r + 1) + (long)(i % 7); }

static void check(const char *what, const void *buf, ncclDataType_t t, size_t i, long want) {
  long got = get(buf, t, i);
  if (got != want) FAIL("%s (type %d): element %zu is %ld, want %ld", what, (int)t, i, got, want);
}

static void all_reduce_every_type_and_op(ncclComm_t comm) {
  const size_t n = 1000;
  ncclDataType_t types[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                            ncclUint64, ncclFloat16, ncclBfloat16, ncclFloat32, ncclFloat64};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
    ncclDataType_t t = types[k];
    char *send = malloc(n * 8), *recv = malloc(n * 8);
    for (size_t i = 0; i < n; i++) put(send, t, i, val(rank, i));
    OK(ncclAllReduce(send, recv, n, t, ncclSum, comm, NULL));
    for (size_t i = 0; i < n; i++) {
      long want = 0;
      for (int r = 0; r < nranks; r++) want += val(r, i);
      check("all_reduce sum", recv, t, i, want);
    }
    OK(ncclAllReduce(send, recv, n, t, ncclMax, comm, NULL));
    for (size_t i = 0; i < n; i++) check("all_reduce max", recv, t, i, val(nranks - 1, i));
    OK(ncclAllReduce(send, recv, n, t, ncclMin, comm, NULL));
    for (size_t i = 0; i < n; i++) check("all_reduce min", recv, t, i, val(0, i));
    /* In place, product. */
    OK(ncclAllReduce(send, send, n, t, ncclProd, comm, NULL));
    for (size_t i = 0; i < n; i++) {
      long want = 1;
      for (int r = 0; r < nranks; r++) want *= val(r, i);
      if (t == ncclInt8 || t == ncclUint8) want = (t == ncclInt8) ? (int8_t)want : (uint8_t)want;
      check("all_reduce prod in place", send, t, i, want);
    }
    free(send);
    free(recv);
  }
  /* Average: (1+2+3)*k / 3. */
  float a[4], b[4];
  for (int i = 0; i < 4; i++) a[i] = (float)((rank + 1) * (i + 1));
  OK(ncclAllReduce(a, b, 4, ncclFloat32, ncclAvg, comm, NULL));
  for (int i = 0; i < 4; i++)
    if (b[i] != 2.0f * (float)(i + 1)) FAIL("avg[%d] = %f", i, (double)b[i]);
}

static void rooted_and_gathering(ncclComm_t comm) {
  const size_t n = 513;
  int32_t *send = malloc(n * nranks * 4), *recv = malloc(n * nranks * 4);
  /* Broadcast from rank 1, and in place (ncclBcast) from rank 2. */
  for (size_t i = 0; i < n; i++) send[i] = (int32_t)val(rank, i);
  OK(ncclBroadcast(send, recv, n, ncclInt32, 1, comm, NULL));
  for (size_t i = 0; i < n; i++) check("broadcast", recv, ncclInt32, i, val(1, i));
  OK(ncclBcast(send, n, ncclInt32, 2, comm, NULL));
  for (size_t i = 0; i < n; i++) check("bcast in place", send, ncclInt32, i, val(2, i));
  /* Reduce to rank 2. */
  for (size_t i = 0; i < n; i++) send[i] = (int32_t)val(rank, i);
  memset(recv, 0, n * 4);
  OK(ncclReduce(send, recv, n, ncclInt32, ncclSum, 2, comm, NULL));
  if (rank == 2)
    for (size_t i = 0; i < n; i++) check("reduce", recv, ncclInt32, i, val(0, i) + val(1, i) + val(2, i));
  /* All-gather, out of place and in place (this rank's block of recv). */
  OK(ncclAllGather(send, recv, n, ncclInt32, comm, NULL));
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++) check("all_gather", recv, ncclInt32, r * n + i, val(r, i));
  memset(recv, 0, n * nranks * 4);
  memcpy(recv + rank * n, send, n * 4);
  OK(ncclAllGather(recv + rank * n, recv, n, ncclInt32, comm, NULL));
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++) check("all_gather in place", recv, ncclInt32, r * n + i, val(r, i));
  /* Reduce-scatter: block r of every rank's input, summed, to rank r. */
  for (size_t i = 0; i < n * nranks; i++) send[i] = (int32_t)val(rank, i);
  OK(ncclReduceScatter(send, recv, n, ncclInt32, ncclSum, comm, NULL));
  for (size_t i = 0; i < n; i++) {
    long want = 0;
    for (int r = 0; r < nranks; r++) want += val(r, rank * n + i);
    check("reduce_scatter", recv, ncclInt32, i, want);
  }
  OK(ncclReduceScatter(send, send + rank * n, n, ncclInt32, ncclSum, comm, NULL));
  for (size_t i = 0; i < n; i++) {
    long want = 0;
    for (int r = 0; r < nranks; r++) want += val(r, rank * n + i);
    check("reduce_scatter in place", send + rank * n, ncclInt32, i, want);
  }
  /* All-to-all: block j of rank r goes to rank j. */
  for (int j = 0; j < nranks; j++)
    for (size_t i = 0; i < n; i++) send[j * n + i] = (int32_t)(rank * 1000 + j * 10 + (int)(i % 5));
  OK(ncclAlltoAll(send, recv, n, ncclInt32, comm, NULL));
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++) check("alltoall", recv, ncclInt32, r * n + i, r * 1000 + rank * 10 + (long)(i % 5));
  /* Gather to 0, scatter from 1. */
  for (size_t i = 0; i < n; i++) send[i] = (int32_t)val(rank, i);
  OK(ncclGather(send, recv, n, ncclInt32, 0, comm, NULL));
  if (rank == 0)
    for (int r = 0; r < nranks; r++)
      for (size_t i = 0; i < n; i++) check("gather", recv, ncclInt32, r * n + i, val(r, i));
  for (size_t i = 0; i < n * nranks; i++) send[i] = (int32_t)(i * 3);
  OK(ncclScatter(send, recv, n, ncclInt32, 1, comm, NULL));
  for (size_t i = 0; i < n; i++) check("scatter", recv, ncclInt32, i, (long)((rank * n + i) * 3));
  free(send);
  free(recv);
}

/* fp8 codes: e4m3 1, 2, 3, 6, 8 = 0x38, 0x40, 0x44, 0x4c, 0x50, largest 448 = 0x7e;
 * e5m2 1, 2, 3 = 0x3c, 0x40, 0x42. */
static void fp8_moves_and_reduces(ncclComm_t comm) {
  uint8_t mine[8], all[8 * 3];
  for (int i = 0; i < 8; i++) mine[i] = (uint8_t)(0x38 + rank * 8 + i); /* arbitrary e4m3 bit patterns */
  OK(ncclAllGather(mine, all, 8, ncclFloat8e4m3, comm, NULL));
  for (int r = 0; r < nranks; r++)
    for (int i = 0; i < 8; i++)
      if (all[r * 8 + i] != (uint8_t)(0x38 + r * 8 + i)) FAIL("fp8 all_gather byte %d of rank %d", i, r);
  const uint8_t e4m3[3] = {0x38, 0x40, 0x44}, e5m2[3] = {0x3c, 0x40, 0x42};
  uint8_t x[64], y[64];
  memset(x, e4m3[rank], sizeof x);
  OK(ncclAllReduce(x, y, 64, ncclFloat8e4m3, ncclSum, comm, NULL));
  for (int i = 0; i < 64; i++) if (y[i] != 0x4c) FAIL("e4m3 1+2+3: %#x", y[i]);
  memset(x, 0x40, sizeof x);
  OK(ncclAllReduce(x, y, 64, ncclFloat8e4m3, ncclProd, comm, NULL));
  for (int i = 0; i < 64; i++) if (y[i] != 0x50) FAIL("e4m3 2*2*2: %#x", y[i]);
  memset(x, 0x7e, sizeof x); /* 448 + 448 + 448 saturates to 448, never NaN */
  OK(ncclAllReduce(x, y, 64, ncclFloat8e4m3, ncclSum, comm, NULL));
  for (int i = 0; i < 64; i++) if (y[i] != 0x7e) FAIL("e4m3 saturation: %#x", y[i]);
  memset(x, e5m2[rank], sizeof x);
  OK(ncclAllReduce(x, y, 64, ncclFloat8e5m2, ncclMax, comm, NULL));
  for (int i = 0; i < 64; i++) if (y[i] != 0x42) FAIL("e5m2 max: %#x", y[i]);
}

static void groups_and_point_to_point(ncclComm_t comm) {
  const size_t n = 3000;
  double *out = malloc(n * 8), *in = malloc(n * 8), *x = malloc(n * 8), *y = malloc(n * 8);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (size_t i = 0; i < n; i++) {
    out[i] = (double)(rank * 100000 + (long)i);
    x[i] = (double)rank;
  }
  /* A ring of sends and receives plus an all-reduce, in one (nested) group. */
  OK(ncclGroupStart());
  OK(ncclSend(out, n, ncclFloat64, next, comm, NULL));
  OK(ncclGroupStart());
  OK(ncclRecv(in, n, ncclFloat64, prev, comm, NULL));
  OK(ncclGroupEnd());
  OK(ncclAllReduce(x, y, n, ncclFloat64, ncclSum, comm, NULL));
  /* A send to itself and its receive (all-to-all as grouped sends does this). */
  double self_in[100];
  OK(ncclRecv(self_in, 100, ncclFloat64, rank, comm, NULL));
  OK(ncclSend(out, 100, ncclFloat64, rank, comm, NULL));
  OK(ncclGroupEnd());
  for (size_t i = 0; i < 100; i++)
    if (self_in[i] != out[i]) FAIL("self recv[%zu] = %f", i, self_in[i]);
  for (size_t i = 0; i < n; i++) {
    if (in[i] != (double)(prev * 100000 + (long)i)) FAIL("recv[%zu] = %f", i, in[i]);
    if (y[i] != (double)(nranks * (nranks - 1) / 2)) FAIL("grouped all_reduce[%zu] = %f", i, y[i]);
  }
  free(out);
  free(in);
  free(x);
  free(y);
}

static void premulsum(ncclComm_t comm) {
  float scalar = 0.5f * (float)(rank + 1), a[16], b[16];
  ncclRedOp_t op;
  OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  if ((int)op < (int)ncclNumOps) FAIL("PreMulSum op %d", (int)op);
  scalar = 100.0f; /* immediate: read at creation */
  for (int i = 0; i < 16; i++) a[i] = (float)(4 * i);
  OK(ncclAllReduce(a, b, 16, ncclFloat32, op, comm, NULL));
  for (int i = 0; i < 16; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += 0.5f * (float)(r + 1) * (float)(4 * i);
    if (b[i] != want) FAIL("premulsum[%d] = %f want %f", i, (double)b[i], (double)want);
  }
  EXPECT(ncclInvalidArgument, "made for ncclFloat32",
         ncclAllReduce(a, b, 4, ncclFloat64, op, comm, NULL));
  OK(ncclRedOpDestroy(op, comm));
  EXPECT(ncclInvalidArgument, "was not made on this communicator",
         ncclAllReduce(a, b, 16, ncclFloat32, op, comm, NULL));
  EXPECT(ncclInvalidArgument, "was not made by ncclRedOpCreatePreMulSum",
         ncclRedOpDestroy(ncclSum, comm));
}

static void split(ncclComm_t comm) {
  /* Ranks 0 and 2 (color 0, keys reversed), rank 1 alone out (NOCOLOR). */
  ncclComm_t sub = (ncclComm_t)1;
  int color = rank == 1 ? NCCL_SPLIT_NOCOLOR : 0;
  OK(ncclCommSplit(comm, color, -rank, &sub, NULL));
  if (rank == 1) {
    if (sub != NULL) FAIL("NOCOLOR gave a communicator");
    return;
  }
  int sr, sn;
  OK(ncclCommUserRank(sub, &sr));
  OK(ncclCommCount(sub, &sn));
  if (sn != 2 || sr != (rank == 2 ? 0 : 1)) FAIL("split: rank %d of %d", sr, sn);
  int64_t v = rank, s = 0;
  OK(ncclAllReduce(&v, &s, 1, ncclInt64, ncclSum, sub, NULL));
  if (s != 2) FAIL("split all_reduce = %ld", (long)s);
  OK(ncclCommDestroy(sub));
}

/* Rank 0 alone: two ranks of a new communicator in this process, made by
 * ncclCommInitAll, then two more made inside a group; one thread drives both
 * ranks through grouped calls. */
static void in_process(void) {
  ncclComm_t c[2];
  OK(ncclCommInitAll(c, 2, NULL));
  for (int pass = 0; pass < 2; pass++) {
    int32_t in[2][64], out[2][64];
    for (int r = 0; r < 2; r++)
      for (int i = 0; i < 64; i++) in[r][i] = (r + 1) * (i + pass);
    OK(ncclGroupStart());
    for (int r = 0; r < 2; r++) OK(ncclAllReduce(in[r], out[r], 64, ncclInt32, ncclSum, c[r], NULL));
    OK(ncclGroupEnd());
    for (int r = 0; r < 2; r++)
      for (int i = 0; i < 64; i++)
        if (out[r][i] != 3 * (i + pass)) FAIL("in-process rank %d [%d] = %d", r, i, out[r][i]);
    for (int r = 0; r < 2; r++) OK(ncclCommDestroy(c[r]));
    if (pass == 1) break;
    /* Second pass: the same through ncclCommInitRank inside a group (a fresh
     * rendezvous, not the job's FERROCX_COMM_ID). */
    unsetenv("FERROCX_COMM_ID");
    ncclUniqueId id;
    OK(ncclGetUniqueId(&id));
    OK(ncclGroupStart());
    for (int r = 0; r < 2; r++) OK(ncclCommInitRank(&c[r], 2, id, r));
    /* Not made before the group ends. */
    EXPECT(ncclInvalidArgument, "call ncclGroupEnd first",
           ncclAllReduce(in[0], out[0], 1, ncclInt32, ncclSum, c[0], NULL));
    OK(ncclGroupEnd());
  }
}

static void errors(ncclComm_t comm) {
  float a[4] = {0}, b[4];
  EXPECT(ncclInvalidArgument, "receive buffer is NULL", ncclAllReduce(a, NULL, 4, ncclFloat32, ncclSum, comm, NULL));
  EXPECT(ncclInvalidArgument, "unknown data type 99", ncclAllReduce(a, b, 4, (ncclDataType_t)99, ncclSum, comm, NULL));
  EXPECT(ncclInvalidArgument, "unknown reduction operator -2", ncclAllReduce(a, b, 4, ncclFloat32, (ncclRedOp_t)-2, comm, NULL));
  EXPECT(ncclInvalidArgument, "communicator is NULL", ncclAllReduce(a, b, 4, ncclFloat32, ncclSum, NULL, NULL));
  EXPECT(ncclInvalidArgument, "peer", ncclSend(a, 4, ncclFloat32, 7, comm, NULL));
  EXPECT(ncclInvalidArgument, "root", ncclBroadcast(a, b, 4, ncclFloat32, 9, comm, NULL));
  EXPECT(ncclInvalidUsage, "without ncclGroupStart", ncclGroupEnd());
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT(ncclInvalidUsage, "not supported by ferrocx", ncclGroupSimulateEnd(&sim));
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  ncclComm_t none;
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  EXPECT(ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER", ncclCommInitRankConfig(&none, nranks, id, rank, &bad));
  EXPECT(ncclInvalidArgument, "out of range", ncclCommInitRank(&none, nranks, id, nranks + 3));
  void *dev = NULL;
  ncclResult_t r = ncclMemAlloc(&dev, 1024);
  if (r == ncclSuccess) OK(ncclMemFree(dev)); /* a GPU machine */
  else if (strstr(ncclGetLastError(NULL), "ncclMemAlloc") == NULL) FAIL("ncclMemAlloc error: %s", ncclGetLastError(NULL));
  if (strlen(ncclGetErrorString(ncclRemoteError)) == 0) FAIL("empty error string");
}

/* Ranks disagree on the type: every rank's call fails, naming both calls. */
static void mismatch(ncclComm_t comm) {
  ncclComm_t m;
  OK(ncclCommSplit(comm, 0, rank, &m, NULL));
  char a[4000], b[4000];
  memset(a, 0, sizeof a);
  /* One matched call first: once it is done every rank has its end of m. Without
   * it a rank still inside the split when the others find the mismatch and abort m
   * got their reason from ncclCommSplit instead (a CI run on 2 cores did). */
  OK(ncclAllReduce(a, b, 1000, ncclInt32, ncclSum, m, NULL));
  ncclDataType_t t = rank == 0 ? ncclFloat32 : ncclInt32;
  ncclResult_t res = ncclAllReduce(a, b, 1000, t, ncclSum, m, NULL);
  /* The rank that sees it first fails with ncclInvalidArgument and aborts;
   * a rank told by the abort gets ncclRemoteError with the same reason. */
  if (res != ncclInvalidArgument && res != ncclRemoteError)
    FAIL("mismatched all_reduce -> %d: %s", (int)res, ncclGetLastError(NULL));
  const char *msg = ncclGetLastError(NULL);
  if (strstr(msg, "mismatched calls") == NULL || strstr(msg, "all_reduce(float, sum, 1000)") == NULL ||
      strstr(msg, "all_reduce(int32, sum, 1000)") == NULL)
    FAIL("mismatch message: %s", msg);
  OK(ncclCommAbort(m));
}

int main(void) {
  const char *r = getenv("FERROCX_RANK"), *n = getenv("FERROCX_NRANKS");
  if (!r || !n) FAIL("FERROCX_RANK / FERROCX_NRANKS not set");
  rank = atoi(r);
  nranks = atoi(n);
  if (nranks != 3) FAIL("run with 3 ranks");
  int version;
  OK(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) FAIL("version %d, header %d", version, NCCL_VERSION_CODE);

  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* nonblocking: poll the asynchronous error, as PyTorch does */
  ncclComm_t comm;
  OK(ncclCommInitRankConfig(&comm, nranks, id, rank, &config));
  ncclResult_t state;
  do OK(ncclCommGetAsyncError(comm, &state));
  while (state == ncclInProgress);
  if (state != ncclSuccess) FAIL("async error %d", (int)state);
  int cr, cn, dev;
  OK(ncclCommUserRank(comm, &cr));
  OK(ncclCommCount(comm, &cn));
  OK(ncclCommCuDevice(comm, &dev));
  if (cr != rank || cn != nranks) FAIL("comm: rank %d of %d", cr, cn);

  all_reduce_every_type_and_op(comm);
  rooted_and_gathering(comm);
  fp8_moves_and_reduces(comm);
  groups_and_point_to_point(comm);
  premulsum(comm);
  split(comm);
  errors(comm);
  if (rank == 0) in_process();
  mismatch(comm);

  /* Finalize, then a call fails as invalid usage; destroy frees. */
  float x = 1, y;
  OK(ncclCommFinalize(comm));
  EXPECT(ncclInvalidUsage, "ncclAllReduce", ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL));
  OK(ncclCommDestroy(comm));
  printf("PASS rank %d of %d\n", rank, nranks);
  return 0;
}
