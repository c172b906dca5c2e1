#!/usr/bin/env bash
# Session 9, call 7 (2 GPUs): 128 KiB Simple slots at 2 ranks (auto), whole-slot chunks
# from 256 MiB segments — all_reduce, reduce_scatter, alltoall 32 MiB-1 GiB checked,
# against FERROCX_CE_SIMPLE_SLOT=64K in the same call; the Simple matrix (with the
# default slot now among its cases) and the p2p kernel test.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1
T0=$SECONDS
P="$B/fxperf --np 2 --mem cuda -b 32M -e 1G -f 2 -n 10 -w 3 -c 1"
for c in all_reduce reduce_scatter alltoall; do
  timeout 60 $P $c > $O/auto-$c.log 2>&1
  FERROCX_CE_SIMPLE_SLOT=64K timeout 60 $P $c > $O/slot64K-$c.log 2>&1
done; echo "perf at $((SECONDS-T0))s" >> $O/summary.txt
timeout 200 $B/device-tests --test-threads=1 --nocapture ce_runs_mid_calls ce_runs_device_sends > $O/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -1 $O/gpus.txt; grep -E "^test |test result|panicked" $O/device.log | cut -c1-160
for f in $O/*-*.log; do echo "$(basename $f): $(awk '$1 ~ /^[0-9]+$/ {printf "%s/%s(%s,%s) ", $6, $10, $9, $13}' $f)"; done
