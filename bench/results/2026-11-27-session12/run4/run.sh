#!/usr/bin/env bash
# Session 12, call 4 (2 GPUs): the host's cost per small device call after the ce watchdog
# change (no wake per launch; completed calls retired from 4 tracked) against the tree before
# it (fxperf-base), alternated, with queuing times; the ce device tests that use the watchdog
# (mismatched calls, a rank that never calls, a killed rank, LL/Simple/p2p kernels); then the
# whole 2-rank table against NCCL (gpu-check perf nccl, 8 B-1 GiB).
set -u
O=$OUT/r; mkdir -p $O/a $O/q $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
for round in 1 2; do
  for bin in fxperf-base fxperf; do
    for c in all_reduce sendrecv; do
      FXPERF_QUEUE_TIME=1 timeout 60 $B/$bin --np 2 --mem cuda -b 8 -e 1M -f 8 -n 500 -w 50 -c 1 $c > $O/q/$bin-$c-r$round.log 2>&1
      echo "$bin $c r$round rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
    done
  done
done
export FXTEST_WORKER=$B/fxtest-worker
for t in ce_finds_mismatched_calls ce_ll_kernel_ends_when_a_rank_never_calls ce_names_a_rank_killed_mid_collective ce_runs_small_calls_as_one_ll_kernel ce_runs_mid_calls_as_one_simple_kernel ce_runs_device_sends_as_one_kernel; do
  timeout 150 $B/device-tests $t --exact --nocapture --test-threads 1 > $O/a/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
left=$((560 - SECONDS + T0))
[ $left -gt 100 ] && NP=2 SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=150 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for t in $O/a/*.log; do echo "$(basename $t): $(grep -E 'test result|panicked' $t | cut -c1-200 | head -2)"; done
for f in $O/q/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; grep "queuing" $f | awk '{printf "%s/%s ", $2, $6}'; echo; done
for c in sendrecv all_reduce all_gather reduce_scatter alltoall broadcast; do echo "== $c fxperf / nccl (oop/ip/wrong)"; for f in $O/p/fxperf-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done; done
