#!/usr/bin/env bash
# Session 20, call 3 (2 GPUs): the GPU tests on the final tree, the most important
# first: `device` (the core's device paths; the engine's connections changed), `ce`,
# the core's kernel tests (the Simple kernel's fold without local memory), then the
# gpu-kernels test with the time left.
set -u
O=$OUT/r; mkdir -p $O/t $O/g
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
NP=2 STEP_TIMEOUT=150 timeout 300 bash scripts/gpu-check.sh $B $O/t device ce > $O/console-t.txt 2>&1; echo "tests rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout 90 $B/core-tests device:: --nocapture --test-threads 1 > $O/g/kernels.log 2>&1; echo "kernels rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
left=$((490 - SECONDS + T0))
if [ $left -gt 20 ]; then
  timeout $left $B/gpu-kernels --nocapture --test-threads 1 > $O/g/gpu-kernels.log 2>&1; echo "gpu-kernels rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
fi
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -h "rc=" $O/t/summary.txt | tr '\n' ' '; echo
grep -a -h "test result\|panicked" $O/t/*.log $O/g/*.log | head -20
