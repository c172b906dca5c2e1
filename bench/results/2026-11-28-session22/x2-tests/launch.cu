// Host cost of a kernel launch on this machine: empty kernels with no parameter
// and with a 128-byte parameter (as ce's LL kernel takes), grids of 1..132 blocks
// of 256 threads, on a non-blocking stream; with and without an event record and
// wait between launches (as ce orders its calls). Host µs per launch over 20000.
#include <chrono>
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>
struct Args { unsigned long long a[14]; int b[4]; };
__global__ void with_args(Args a) { if (a.b[0] == 12345) a.a[0]++; }
__global__ void no_args() {}
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main() {
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e; cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  Args a = {};
  const int n = 20000;
  int grids[] = {1, 8, 64, 132};
  for (int mode = 0; mode < 4; mode++) {
    for (int g : grids) {
      for (int i = 0; i < 1000; i++) with_args<<<g, 256, 0, s>>>(a);
      cudaStreamSynchronize(s);
      double t = now();
      for (int i = 0; i < n; i++) {
        if (mode == 0) no_args<<<g, 256, 0, s>>>();
        else with_args<<<g, 256, 0, s>>>(a);
        if (mode == 2) { cudaEventRecord(e, s); cudaStreamWaitEvent(s, e, 0); }
        if (mode == 3) { cudaEventRecord(e, s); cudaEventQuery(e); }
      }
      double q = now() - t;
      cudaStreamSynchronize(s);
      double all = now() - t;
      printf("%-28s grid %3d: %.2f us per launch queued, %.2f to completion\n",
             mode == 0 ? "no params" : mode == 1 ? "128-byte params" : mode == 2 ? "params + record + wait" : "params + record + query",
             g, q * 1e6 / n, all * 1e6 / n);
    }
  }
  return 0;
}
