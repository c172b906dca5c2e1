#!/usr/bin/env bash
# Session 10, call 5 (4 GPUs): the new 4-rank limits (all_gather and alltoall as the
# Simple kernel to 32 MiB blocks, ce's routes above) against NCCL in the same call,
# 16-512 MiB, all four collectives; then ce's device tests at 2 and 4 ranks.
set -u
O=$OUT/r; mkdir -p $O/a
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
$B/fxrun -n 4 -- $B/fxinfo > $O/fxinfo.log 2>&1
NP=4 SIZES="-b 16M -e 512M -f 2" ITERS="-n 10 -w 3" PERF_COLLS="all_gather alltoall all_reduce reduce_scatter" STEP_TIMEOUT=150 bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
export FXTEST_WORKER=$B/fxtest-worker
for t in ce_runs_the_copy_collectives_on_windows_2_and_4_ranks ce_runs_the_copy_collectives_staged_2_and_4_ranks ce_runs_device_sends_as_one_kernel; do
  left=$((560 - SECONDS + T0)); [ $left -lt 20 ] && break
  timeout $left $B/device-tests $t --nocapture --test-threads 1 > $O/a/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -1 $O/gpus.txt
for t in $O/a/*.log; do grep -E "^test |test result|panicked|FAIL" $t | cut -c1-250 | head -4; done
for c in all_gather alltoall all_reduce reduce_scatter; do echo "== $c fxperf / nccl (us oop | ip)"; for f in $O/p/fxperf-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1/1048576, $6, $10}'; echo; done; done
grep -A12 'ce routes' $O/fxinfo.log | head -14
