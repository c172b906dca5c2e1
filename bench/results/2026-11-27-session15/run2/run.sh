#!/usr/bin/env bash
# Session 15, call 2 (2 GPUs): polls that acquire (no acquire fence per chunk) in
# the Simple and point-to-point kernels: the tree before (fxperf-base) against the
# new one, alternated; the device tests of both kernels under MPS; fxinfo's one
# selection table on GPUs; broadcast on the core's path by FERROCX_DEVICE_CHUNK.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/p $O/i
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
sw() {  # sw NAME BIN COLL FXPERF-ARGS ENV...
  local name=$1 bin=$2 coll=$3 args=$4; shift 4
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/$bin --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
S="-b 512K -e 16M -f 2 -n 200 -w 20"
for rep in 1 2; do
  for c in all_reduce all_gather sendrecv alltoall; do
    sw $c-base-$rep fxperf-base $c "$S"
    sw $c-new-$rep fxperf $c "$S"
  done
  sw bc-chunk16-$rep fxperf broadcast "-b 32M -e 256M -f 2 -n 40 -w 5"
  sw bc-chunk64-$rep fxperf broadcast "-b 32M -e 256M -f 2 -n 40 -w 5" FERROCX_DEVICE_CHUNK=64M
done
timeout 60 $B/fxrun -n 2 -- $B/fxinfo > $O/i/fxinfo.txt 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
FXTEST_WORKER=$B/fxtest-worker timeout 220 $B/device-tests --nocapture --test-threads 1 --exact ce_runs_mid_calls_as_one_simple_kernel ce_runs_device_sends_as_one_kernel ce_names_a_send_that_meets_a_receive_of_another_size ce_runs_window_calls_in_the_direct_modes ce_names_a_rank_killed_mid_collective ce_runs_the_reductions_2_and_4_ranks > $O/a/device.log 2>&1
echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control; sleep 2
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
grep -E "test result|^ok$|FAILED|panicked|^test " $O/a/device.log | cut -c1-200 | tail -12
grep -A12 "selection table" $O/i/fxinfo.txt | grep "cuda" | cut -c1-330
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; grep -i "error\|panick" $f | head -2; done
