#!/usr/bin/env bash
# The final tree: the whole device test file on a host with 4 GPUs (one rank per GPU where ranks ≤ 4).
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1
T0=$SECONDS
timeout 420 $B/device-tests --test-threads=1 --nocapture > $O/device-all.log 2>&1; echo "device-all rc=$? at $((SECONDS-T0))s" > $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -E "^test |test result|panicked" $O/device-all.log | cut -c1-140
