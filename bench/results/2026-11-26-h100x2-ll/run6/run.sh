#!/usr/bin/env bash
# The LL matrix test as fixed (staging on, no scratch), the ce-hang and kill tests again.
set -u
O=$OUT/r; mkdir -p $O/a
export FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
timeout 200 gpu-run/bin/device-tests ce_runs_small ce_ll_kernel ce_finds ce_names --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$?" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|PASS rank [01]:" $O/a/device-ce.log | cut -c1-140
