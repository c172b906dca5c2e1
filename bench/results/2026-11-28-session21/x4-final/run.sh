#!/usr/bin/env bash
# Session 21, call 2 (4 GPUs): the final tree (two-shot all_reduce as one kernel to 256 MiB
# under auto): all_reduce 1 MiB-1 GiB, fxperf -R 1 two rounds next to NCCL all_reduce_perf -g 4;
# ce's device tests touched by the change (reductions, mismatches, the watchdog, a killed rank).
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=120
T0=$SECONDS
S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
step() {  # step NAME LIMIT CMD...
  local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout $lim "$@" > $O/$name.log 2>&1
  local rc=$?
  echo "$name: rc=$rc $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S
}
export FXTEST_WORKER=$B/fxtest-worker
t0=$SECONDS
NP=4 PERF_COLLS=all_reduce SIZES="-b 1M -e 1G -f 2" ITERS="-n 20 -w 5" STEP_TIMEOUT=150 \
  bash scripts/gpu-check.sh $B $O/nccl nccl > $O/console-nccl.txt 2>&1
echo "nccl: rc=$? $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S
[ -f $O/nccl/nccl-build.log ] && { tail -n 30 $O/nccl/nccl-build.log > $O/nccl/nccl-build.tail.log; rm -f $O/nccl/nccl-build.log; }
for round in 1 2; do
  step fx-$round 150 $B/fxperf --np 4 --mem cuda -R 1 -b 1M -e 1G -f 2 -n 20 -w 5 -c 1 all_reduce
done
step ce-tests 330 $B/device-tests ce_runs_the_reductions_2_and_4_ranks ce_finds_mismatched_calls \
  ce_ll_kernel_ends_when_a_rank_never_calls ce_names_a_rank_killed_mid_collective --nocapture --test-threads 1
echo "total: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S; head -4 $O/gpus.txt
grep -h "test result\|FAILED\|panicked" $O/ce-tests.log | head
for f in $O/nccl/nccl-all_reduce.log $O/fx-*.log; do
  echo "== $(basename $f)"; grep -E "^ +[0-9]{6,}|rror|panic" $f | head -12
done
