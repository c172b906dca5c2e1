/* Per-call cost of the NCCL drop-in: 8-byte all_reduce (float32 × 2), host memory,
 * through NCCL's API. cc allreduce_8b_nccl.c -IPREFIX/include -LPREFIX/lib
 * -Wl,-rpath,PREFIX/lib -lnccl -DFERROCX_NCCL_NO_CUDA (scripts/install-nccl.sh PREFIX);
 * fxrun -n 2 ./a.out [iters] (every rank's ncclGetUniqueId is fxrun's FERROCX_COMM_ID). */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20000, i;
  int rank = atoi(getenv("FERROCX_RANK")), nranks = atoi(getenv("FERROCX_NRANKS"));
  ncclUniqueId id;
  ncclComm_t comm;
  float x[2] = {1, 2}, y[2];
  struct timespec a, b;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 1;
  for (i = 0; i < 1000; i++) ncclAllReduce(x, y, 2, ncclFloat32, ncclSum, comm, NULL);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (i = 0; i < iters; i++)
    if (ncclAllReduce(x, y, 2, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess) return 1;
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (rank == 0)
    printf("NCCL  all_reduce 8 B: %.2f us per call (%d calls)\n",
           ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / iters, iters);
  ncclCommDestroy(comm);
  return 0;
}
