#!/usr/bin/env bash
# LL kernel, second run: ce device tests, LL up to 256K next to NCCL (sizes 8 B–1 MiB).
set -u
O=$OUT/r; mkdir -p $O/a
export FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
timeout 250 gpu-run/bin/device-tests ce_ --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$?" >> $O/summary.txt
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do
  FERROCX_CE_LL_BYTES=256K timeout 40 gpu-run/bin/fxperf --np 2 --mem cuda -b 8 -e 1M -f 2 -n 200 -w 20 -c 1 $b > $O/a/fxperf-$b.log 2>&1; echo "fxperf-$b rc=$?" >> $O/summary.txt
done
make -C gpu-run/nccl-tests -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/a/nccl-build.log 2>&1; echo "nccl-build rc=$?" >> $O/summary.txt
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do
  timeout 30 gpu-run/nccl-tests/build/${b}_perf -b 8 -e 1M -f 2 -n 200 -w 20 -c 1 -g 2 > $O/a/nccl-$b.log 2>&1; echo "nccl-$b rc=$?" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result" $O/a/device-ce.log | cut -c1-100
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do echo "## $b"; paste <(grep -E "^\s+[0-9]+ " $O/a/fxperf-$b.log | awk '{print $1, $6, $10, $9, $13}') <(grep -E "^\s+[0-9]+ " $O/a/nccl-$b.log | awk '{print $6, $10}') | tail -12; done
