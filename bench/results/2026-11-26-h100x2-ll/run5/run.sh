#!/usr/bin/env bash
# After review fixes: every ce device test (LL not in graphs, gated by staging, error word read, ce-hang).
set -u
O=$OUT/r; mkdir -p $O/a
export FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
timeout 330 gpu-run/bin/device-tests ce_ --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$?" >> $O/summary.txt
FERROCX_CE_LL_BYTES=256K timeout 40 gpu-run/bin/fxperf --np 2 --mem cuda -b 8 -e 1M -f 8 -n 200 -w 20 -c 1 all_reduce > $O/a/fxperf-all_reduce.log 2>&1; echo "fxperf rc=$?" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result" $O/a/device-ce.log | cut -c1-100; grep -A3 "ce_ll_kernel_ends" $O/a/device-ce.log | cut -c1-300; grep -E "^\s+[0-9]+ " $O/a/fxperf-all_reduce.log | awk '{print $1,$6,$9,$10,$13}'
