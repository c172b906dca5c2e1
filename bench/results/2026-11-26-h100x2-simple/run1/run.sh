#!/usr/bin/env bash
# Simple kernel, first GPU call: its device tests, then fxperf (Simple vs barrier routes) and NCCL, 64 KiB–64 MiB.
set -u
O=$OUT/r; mkdir -p $O/a $O/b
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 260 gpu-run/bin/device-tests ce_runs_mid ce_ll_kernel_ends ce_names_a_rank --nocapture --test-threads 1 > $O/a/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
(make -C gpu-run/nccl-tests -j 16 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1; echo "nccl-build rc=$?" >> $O/summary.txt) &
BP=$!
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do
  for sp in 32M 0; do
    [ $((SECONDS - T0)) -gt 480 ] && { echo "skip $b $sp" >> $O/summary.txt; continue; }
    FERROCX_CE_SIMPLE_BYTES=$sp timeout 40 gpu-run/bin/fxperf --np 2 --mem cuda -b 64K -e 64M -f 2 -n 100 -w 20 -c 1 $b > $O/b/fxperf-$b-sp$sp.log 2>&1; echo "fxperf-$b-sp$sp rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
wait $BP
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do
  [ $((SECONDS - T0)) -gt 540 ] && { echo "skip nccl $b" >> $O/summary.txt; continue; }
  timeout 30 gpu-run/nccl-tests/build/${b}_perf -b 64K -e 64M -f 2 -n 100 -w 20 -c 1 -g 2 > $O/b/nccl-$b.log 2>&1; echo "nccl-$b rc=$?" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAIL" $O/a/device.log | cut -c1-200 | head -30
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do echo "## $b size | simple oop ip wrong | barrier oop ip | nccl oop ip"; paste <(grep -E "^\s+[0-9]+ " $O/b/fxperf-$b-sp32M.log | awk '{print $1, $6, $10, $9+$13}') <(grep -E "^\s+[0-9]+ " $O/b/fxperf-$b-sp0.log | awk '{print $6, $10}') <(grep -E "^\s+[0-9]+ " $O/b/nccl-$b.log | awk '{print $6, $10}'); done
