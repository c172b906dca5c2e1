/* Per-call cost of the C API: 8-byte all_reduce (float32 × 2), host memory.
 * cc allreduce_8b.c $(pkg-config --cflags --libs ferrocx); fxrun -n 2 ./a.out [iters] */
#include <ferrocx.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20000, i;
  ferrocx_comm_t comm;
  float x[2] = {1, 2}, y[2];
  int32_t me;
  struct timespec a, b;
  if (ferrocx_comm_init_from_env(&comm) != FERROCX_SUCCESS) return 1;
  ferrocx_comm_rank(comm, &me);
  for (i = 0; i < 1000; i++) ferrocx_all_reduce(x, y, 2, FERROCX_FLOAT32, FERROCX_SUM, comm, NULL);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (i = 0; i < iters; i++)
    if (ferrocx_all_reduce(x, y, 2, FERROCX_FLOAT32, FERROCX_SUM, comm, NULL) != FERROCX_SUCCESS) return 1;
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (me == 0)
    printf("C     all_reduce 8 B: %.2f us per call (%d calls)\n",
           ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / iters, iters);
  ferrocx_comm_destroy(comm);
  return 0;
}
