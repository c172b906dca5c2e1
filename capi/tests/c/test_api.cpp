// The header from C++: a communicator, an all_reduce, a split, errors as codes.
#include <ferrocx.h>
#include <cstdio>
#include <vector>

int main() {
  ferrocx_comm_t comm = nullptr;
  if (ferrocx_comm_init_from_env(&comm) != FERROCX_SUCCESS) {
    std::printf("FAIL init: %s\n", ferrocx_get_last_error());
    return 1;
  }
  int32_t me = 0, n = 0;
  ferrocx_comm_rank(comm, &me);
  ferrocx_comm_count(comm, &n);
  std::vector<double> x(4096, me + 0.5), y(4096);
  if (ferrocx_all_reduce(x.data(), y.data(), x.size(), FERROCX_FLOAT64, FERROCX_SUM, comm, nullptr) != FERROCX_SUCCESS) {
    std::printf("FAIL all_reduce: %s\n", ferrocx_get_last_error());
    return 1;
  }
  const double want = n * (n - 1) / 2.0 + 0.5 * n;
  for (double v : y)
    if (v != want) {
      std::printf("FAIL rank %d: %f != %f\n", me, v, want);
      return 1;
    }
  ferrocx_comm_t sub = nullptr;
  if (ferrocx_comm_split(comm, me == 0 ? FERROCX_SPLIT_NOCOLOR : 1, 0, &sub) != FERROCX_SUCCESS ||
      (me == 0) != (sub == nullptr)) {
    std::printf("FAIL rank %d split: %s\n", me, ferrocx_get_last_error());
    return 1;
  }
  if (sub) ferrocx_comm_destroy(sub);
  ferrocx_comm_destroy(comm);
  std::printf("PASS rank %d of %d (C++)\n", me, n);
  return 0;
}
