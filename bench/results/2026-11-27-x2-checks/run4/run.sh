#!/usr/bin/env bash
# Session 9, call 4 (2 GPUs): captured ce calls — checked at capture (OOB notes),
# barrier waits of replays as kernels with a deadline; the graph and ce device tests;
# graph replay timing (1000 replays, before: memop waits).
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1
T0=$SECONDS
timeout 300 $B/device-tests --test-threads=1 --nocapture graph captured ce_finds ce_names ce_ll_kernel ce_runs_the_copy ce_window > $O/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -E "^test |test result|panicked|ENDED|MISMATCH|PASS rank" $O/device.log | cut -c1-260
