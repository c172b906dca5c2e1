#!/usr/bin/env bash
# Session 9, call 1 (2 GPUs): the core's device send/recv checks (new test) and the
# device tests they touch; fxperf vs NCCL 8 B-1 GiB on the current tree; the Simple
# kernel past its table's limits (FERROCX_CE_SIMPLE_BYTES=2G) at 32 MiB-1 GiB.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1; nvidia-smi topo -m >> $O/gpus.txt 2>&1
T0=$SECONDS
timeout 200 $B/device-tests --test-threads=1 --nocapture the_cores_device smoke_over mix_on_device killed_rank_during matrix_over_p2p matrix_staged ce_names_a_send > $O/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
STEP_TIMEOUT=150 scripts/gpu-check.sh $B $O/p perf nccl > $O/perf-console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for c in alltoall reduce_scatter all_reduce all_gather broadcast; do
  FERROCX_CE_SIMPLE_BYTES=2G timeout 60 $B/fxperf --np 2 --mem cuda -b 32M -e 1G -f 2 -n 20 -w 5 -c 1 $c > $O/simple2g-$c.log 2>&1
done; echo "simple2g at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -E "^test |test result|panicked" $O/device.log | cut -c1-140
