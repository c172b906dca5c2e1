#!/usr/bin/env bash
# Session 21, call 1 (4 GPUs): the two-shot all_reduce as one kernel whose chunks lap the
# rings (new, gpu-run/bin) against two kernels past one lap (old = f930f65, gpu-run/old),
# next to NCCL all_reduce_perf -g 4; ce's mid-size device matrix (two-shot with 1040-byte
# chunks laps the rings) and the core's device tests (connections made in the background).
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin; A=gpu-run/old
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=120
T0=$SECONDS
S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
step() {  # step NAME LIMIT CMD...: log to $O/NAME.log, rc and seconds to the summary
  local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout $lim "$@" > $O/$name.log 2>&1
  local rc=$?
  echo "$name: rc=$rc $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S
}
export FXTEST_WORKER=$B/fxtest-worker
step ce-mid 300 $B/device-tests ce_runs_mid_calls_as_one_simple_kernel --nocapture --test-threads 1
t0=$SECONDS
NP=4 PERF_COLLS=all_reduce SIZES="-b 8M -e 1G -f 2" ITERS="-n 20 -w 5" STEP_TIMEOUT=150 \
  bash scripts/gpu-check.sh $B $O/nccl nccl > $O/console-nccl.txt 2>&1
echo "nccl: rc=$? $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S
[ -f $O/nccl/nccl-build.log ] && { tail -n 30 $O/nccl/nccl-build.log > $O/nccl/nccl-build.tail.log; rm -f $O/nccl/nccl-build.log; }
for round in 1 2; do
  for v in new old; do
    X=$B; [ $v = old ] && X=$A
    step $v-auto-$round 120 $X/fxperf --np 4 --mem cuda -b 8M -e 1G -f 2 -n 20 -w 5 -c 1 all_reduce
    step $v-ts64-$round 120 env FERROCX_CE_SIMPLE_BYTES=67108864 \
      $X/fxperf --np 4 --mem cuda -b 128M -e 256M -f 2 -n 20 -w 5 -c 1 all_reduce
    step $v-ts256-$round 120 env FERROCX_CE_SIMPLE_BYTES=268435456 \
      $X/fxperf --np 4 --mem cuda -b 512M -e 1G -f 2 -n 20 -w 5 -c 1 all_reduce
  done
done
step core-device 300 env CUDA_VISIBLE_DEVICES=0,1 $B/device-tests smoke_over_p2p_and_shm matrix_over_p2p \
  matrix_staged_over_shm mix_on_device killed_rank_during_device_transfers \
  the_cores_device_sends_and_receives_are_checked --nocapture --test-threads 1
echo "total: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S; head -5 $O/gpus.txt
grep -h "test result\|FAILED\|panicked" $O/ce-mid.log $O/core-device.log | head
for f in $O/nccl/nccl-all_reduce.log $O/new-*.log $O/old-*.log; do
  echo "== $(basename $f)"; grep -E "^ +[0-9]{6,}|rror|panic" $f | head -12
done
