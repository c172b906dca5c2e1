#!/usr/bin/env bash
# Session 16, call 2 (2 GPUs): the tree with free words set without a fence, the
# fold's two ranks of loads in flight and broadcast chunks of whole slots from 16 MiB.
# Broadcast blocks 64 / 96; the copy collectives before (fxperf-base) and after;
# the whole 2-rank table (fxperf -R 1 / -R 2 next to NCCL -g 2 default / -R 2);
# the device tests of both kernels under MPS.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; } > $O/gpus.txt 2>&1
sw() {  # sw NAME BIN COLL FXPERF-ARGS ENV...
  local name=$1 bin=$2 coll=$3 args=$4; shift 4
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/$bin --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  sw bc-b64-$rep fxperf broadcast "-b 8M -e 64M -f 2 -n 60 -w 10"
  sw bc-b96-$rep fxperf broadcast "-b 8M -e 64M -f 2 -n 60 -w 10" FERROCX_CE_SIMPLE_BLOCKS=96
  for c in all_gather alltoall reduce_scatter; do
    sw $c-base-$rep fxperf-base $c "-b 1M -e 32M -f 2 -n 100 -w 10"
    sw $c-new-$rep fxperf $c "-b 1M -e 32M -f 2 -n 100 -w 10"
  done
done
NP=2 ITERS="-n 60 -w 5" SIZES="-b 64K -e 1G -f 2" STEP_TIMEOUT=100 timeout 280 bash scripts/gpu-check.sh $B $O/p perf nccl perf-win nccl-sym > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
left=$((585 - SECONDS + T0))
FXTEST_WORKER=$B/fxtest-worker timeout $left $B/device-tests --nocapture --test-threads 1 --exact ce_runs_mid_calls_as_one_simple_kernel ce_runs_device_sends_as_one_kernel ce_runs_the_reductions_2_and_4_ranks ce_names_a_send_that_meets_a_receive_of_another_size ce_runs_window_calls_in_the_direct_modes ce_names_a_rank_killed_mid_collective > $O/a/device.log 2>&1
echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt | grep -v '^ab'; head -2 $O/gpus.txt
grep -E "test result|FAILED|panicked|^test " $O/a/device.log | cut -c1-120 | tail -8
for f in $O/k/*.log; do echo "== $(basename $f .log)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9+$13}'; echo; grep -i "error\|panick" $f | head -2; done
grep -h "wrong\|rc=[1-9]" $O/p/summary.txt | head
