/* The C API under fxrun: every collective on host memory with results checked,
 * send/recv in a group, a split communicator, and the error paths (bad rank,
 * NULL buffer, misaligned buffer, finalized communicator, unknown type).
 * Prints "PASS rank R" or "FAIL rank R: why" and exits 0/1. */
#include <ferrocx.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me = -1, n = 0;

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    ferrocx_result_t r_ = (call);                                                                    \
    if (r_ != FERROCX_SUCCESS) {                                                                     \
      printf("FAIL rank %d: %s -> %s: %s\n", me, #call, ferrocx_get_error_string(r_), ferrocx_get_last_error()); \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

#define EXPECT(cond, ...)                                                                            \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      printf("FAIL rank %d: ", me);                                                                  \
      printf(__VA_ARGS__);                                                                           \
      printf("\n");                                                                                  \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

/* A call that must fail with `code` and a message naming `needle`. */
#define EXPECT_ERR(call, code, needle)                                                               \
  do {                                                                                               \
    ferrocx_result_t r_ = (call);                                                                    \
    EXPECT(r_ == (code), "%s returned %s, expected %s", #call, ferrocx_get_error_string(r_),          \
           ferrocx_get_error_string(code));                                                          \
    EXPECT(strstr(ferrocx_get_last_error(), (needle)) != NULL, "%s: message '%s' lacks '%s'", #call,  \
           ferrocx_get_last_error(), (needle));                                                      \
  } while (0)

int main(void) {
  ferrocx_comm_t comm, sub;
  const size_t c = 1000;
  int32_t version, i, r, *s, *v;
  CHECK(ferrocx_get_version(&version));
  EXPECT(version == FERROCX_VERSION_CODE, "run-time version %d, header %d", version, FERROCX_VERSION_CODE);
  CHECK(ferrocx_comm_init_from_env(&comm));
  CHECK(ferrocx_comm_rank(comm, &me));
  CHECK(ferrocx_comm_count(comm, &n));
  s = (int32_t *)malloc(sizeof(int32_t) * c * n);
  v = (int32_t *)malloc(sizeof(int32_t) * c * n);

  /* all_reduce: sum of (rank + i) */
  for (i = 0; i < (int32_t)c; i++) s[i] = me + i;
  CHECK(ferrocx_all_reduce(s, v, c, FERROCX_INT32, FERROCX_SUM, comm, NULL));
  for (i = 0; i < (int32_t)c; i++) EXPECT(v[i] == n * (n - 1) / 2 + n * i, "all_reduce[%d] = %d", i, v[i]);
  /* in place, max */
  for (i = 0; i < (int32_t)c; i++) v[i] = me * 1000 + i;
  CHECK(ferrocx_all_reduce(v, v, c, FERROCX_INT32, FERROCX_MAX, comm, NULL));
  for (i = 0; i < (int32_t)c; i++) EXPECT(v[i] == (n - 1) * 1000 + i, "all_reduce max in place[%d] = %d", i, v[i]);
  /* all_gather */
  for (i = 0; i < (int32_t)c; i++) s[i] = me * 7 + i;
  CHECK(ferrocx_all_gather(s, v, c, FERROCX_INT32, comm, NULL));
  for (r = 0; r < n; r++)
    for (i = 0; i < (int32_t)c; i++) EXPECT(v[r * c + i] == r * 7 + i, "all_gather[%d][%d] = %d", r, i, v[r * c + i]);
  /* reduce_scatter */
  for (i = 0; i < (int32_t)(c * n); i++) s[i] = i;
  CHECK(ferrocx_reduce_scatter(s, v, c, FERROCX_INT32, FERROCX_SUM, comm, NULL));
  for (i = 0; i < (int32_t)c; i++) EXPECT(v[i] == n * (me * (int32_t)c + i), "reduce_scatter[%d] = %d", i, v[i]);
  /* broadcast from the last rank */
  for (i = 0; i < (int32_t)c; i++) s[i] = (me == n - 1) ? 42 + i : -1;
  CHECK(ferrocx_broadcast(s, v, c, FERROCX_INT32, n - 1, comm, NULL));
  for (i = 0; i < (int32_t)c; i++) EXPECT(v[i] == 42 + i, "broadcast[%d] = %d", i, v[i]);
  /* reduce to rank 0 */
  for (i = 0; i < (int32_t)c; i++) s[i] = 1;
  CHECK(ferrocx_reduce(s, v, c, FERROCX_INT32, FERROCX_SUM, 0, comm, NULL));
  if (me == 0)
    for (i = 0; i < (int32_t)c; i++) EXPECT(v[i] == n, "reduce[%d] = %d", i, v[i]);
  /* all_to_all: block p of rank r = r*100 + p */
  for (r = 0; r < n; r++)
    for (i = 0; i < (int32_t)c; i++) s[r * c + i] = me * 100 + r;
  CHECK(ferrocx_all_to_all(s, v, c, FERROCX_INT32, comm, NULL));
  for (r = 0; r < n; r++)
    for (i = 0; i < (int32_t)c; i++) EXPECT(v[r * c + i] == r * 100 + me, "all_to_all[%d][%d] = %d", r, i, v[r * c + i]);
  /* gather to rank 1, scatter from rank 1 */
  for (i = 0; i < (int32_t)c; i++) s[i] = me + 3;
  CHECK(ferrocx_gather(s, v, c, FERROCX_INT32, 1, comm, NULL));
  if (me == 1)
    for (r = 0; r < n; r++) EXPECT(v[r * c] == r + 3 && v[r * c + c - 1] == r + 3, "gather block %d", r);
  for (r = 0; r < n; r++)
    for (i = 0; i < (int32_t)c; i++) s[r * c + i] = (me == 1) ? r * 11 : -5;
  CHECK(ferrocx_scatter(s, v, c, FERROCX_INT32, 1, comm, NULL));
  for (i = 0; i < (int32_t)c; i++) EXPECT(v[i] == me * 11, "scatter[%d] = %d", i, v[i]);
  /* a ring of send/recv in one group */
  for (i = 0; i < (int32_t)c; i++) s[i] = me * 13 + i;
  CHECK(ferrocx_group_start());
  CHECK(ferrocx_send(s, c, FERROCX_INT32, (me + 1) % n, comm, NULL));
  CHECK(ferrocx_recv(v, c, FERROCX_INT32, (me + n - 1) % n, comm, NULL));
  CHECK(ferrocx_group_end());
  for (i = 0; i < (int32_t)c; i++) EXPECT(v[i] == ((me + n - 1) % n) * 13 + i, "ring recv[%d] = %d", i, v[i]);
  /* blocking, outside a group: rank 0 sends to rank 1 (a small host message: straight to its plugin) */
  if (me == 0) CHECK(ferrocx_send(s, 5, FERROCX_INT32, 1, comm, NULL));
  if (me == 1) {
    for (i = 0; i < 5; i++) v[i] = -1;
    CHECK(ferrocx_recv(v, 5, FERROCX_INT32, 0, comm, NULL));
    for (i = 0; i < 5; i++) EXPECT(v[i] == i, "blocking recv[%d] = %d", i, v[i]);
  }

  /* split: even and odd ranks, reversed */
  CHECK(ferrocx_comm_split(comm, me % 2, -me, &sub));
  {
    int32_t sr, sn, want_n = (n + (me % 2 == 0 ? 1 : 0)) / 2, one = 1, total = 0;
    CHECK(ferrocx_comm_rank(sub, &sr));
    CHECK(ferrocx_comm_count(sub, &sn));
    EXPECT(sn == want_n, "split: %d ranks, expected %d", sn, want_n);
    CHECK(ferrocx_all_reduce(&one, &total, 1, FERROCX_INT32, FERROCX_SUM, sub, NULL));
    EXPECT(total == sn, "split all_reduce = %d, expected %d", total, sn);
    CHECK(ferrocx_comm_destroy(sub));
  }

  /* error paths: nothing is lost, the communicator keeps working */
  EXPECT_ERR(ferrocx_send(s, c, FERROCX_INT32, n + 5, comm, NULL), FERROCX_INVALID_ARGUMENT, "out of range");
  EXPECT(strstr(ferrocx_get_last_error(), "ferrocx_send") != NULL, "message lacks the call: %s", ferrocx_get_last_error());
  EXPECT_ERR(ferrocx_send(NULL, c, FERROCX_INT32, (me + 1) % n, comm, NULL), FERROCX_INVALID_ARGUMENT, "NULL");
  EXPECT_ERR(ferrocx_all_reduce(NULL, v, c, FERROCX_INT32, FERROCX_SUM, comm, NULL), FERROCX_INVALID_ARGUMENT, "NULL");
  EXPECT_ERR(ferrocx_all_reduce((char *)s + 1, v, c, FERROCX_INT32, FERROCX_SUM, comm, NULL), FERROCX_INVALID_ARGUMENT, "aligned");
  EXPECT_ERR(ferrocx_all_reduce(s, v, c, 99, FERROCX_SUM, comm, NULL), FERROCX_INVALID_ARGUMENT, "unknown data type");
  EXPECT_ERR(ferrocx_all_reduce(s, v, c, FERROCX_INT32, FERROCX_SUM, comm, (void *)0x1234), FERROCX_INVALID_ARGUMENT, "host memory");
  EXPECT_ERR(ferrocx_all_reduce(s, v, c, FERROCX_INT32, FERROCX_SUM, NULL, NULL), FERROCX_INVALID_ARGUMENT, "NULL");
  {
    char msg[64];
    snprintf(msg, sizeof msg, "rank %d", me);
    EXPECT_ERR(ferrocx_send(s, c, FERROCX_INT32, -1, comm, NULL), FERROCX_INVALID_ARGUMENT, msg);
  }
  /* still works */
  s[0] = 1;
  CHECK(ferrocx_all_reduce(s, v, 1, FERROCX_INT32, FERROCX_SUM, comm, NULL));
  EXPECT(v[0] == n, "after errors: %d", v[0]);

  CHECK(ferrocx_comm_finalize(comm));
  EXPECT_ERR(ferrocx_all_reduce(s, v, c, FERROCX_INT32, FERROCX_SUM, comm, NULL), FERROCX_DESTROYED, "destroyed");
  CHECK(ferrocx_comm_destroy(comm));
  free(s);
  free(v);
  printf("PASS rank %d of %d\n", me, n);
  return 0;
}
