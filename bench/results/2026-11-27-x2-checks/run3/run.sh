#!/usr/bin/env bash
# Session 9, call 3 (2 GPUs): the final tree — fxperf vs NCCL 8 B-1 GiB, all six
# collectives, in and out of place (issue 23's table: ce's point-to-point kernel to
# 16 MiB, all_reduce and reduce_scatter as the Simple kernel to 1 GiB blocks at
# 2 ranks), then the whole device test file.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1; nvidia-smi topo -m >> $O/gpus.txt 2>&1
T0=$SECONDS
$B/fxrun -n 2 -- $B/fxinfo > $O/fxinfo.log 2>&1
STEP_TIMEOUT=150 scripts/gpu-check.sh $B $O/p perf nccl > $O/perf-console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout $((560 - SECONDS + T0)) $B/device-tests --test-threads=1 --nocapture > $O/device-all.log 2>&1; echo "device-all rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -E "^test |test result|panicked" $O/device-all.log | cut -c1-140
