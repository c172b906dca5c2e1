#!/usr/bin/env bash
# Session 15, call 1 (2 GPUs): ce's direct modes timed on symmetric windows (-R 2),
# off and forced, alternated; all_reduce at 512 KiB-2 MiB as direct vs the LL kernel;
# the direct modes' two device tests under MPS; NCCL default and symmetric (-R 2)
# next to fxperf -R 1 for the three collectives the direct modes run.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
sw() {  # sw NAME COLL FXPERF-ARGS ENV...
  local name=$1 coll=$2 args=$3; shift 3
  env FERROCX_TIMEOUT=15 "$@" timeout 40 $B/fxperf --np 2 --mem cuda -R 2 $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
S="-b 1M -e 128M -f 2 -n 100 -w 10"
for rep in 1 2; do
  for c in all_reduce broadcast all_gather; do
    sw $c-off-$rep $c "$S" FERROCX_CE_DIRECT_BYTES=0
    sw $c-on-$rep $c "$S" FERROCX_CE_DIRECT_BYTES=1G
  done
  sw arsmall-ll-$rep all_reduce "-b 256K -e 2M -f 2 -n 300 -w 30" FERROCX_CE_DIRECT_BYTES=0
  sw arsmall-direct-$rep all_reduce "-b 256K -e 2M -f 2 -n 300 -w 30" FERROCX_CE_DIRECT_BYTES=1G FERROCX_CE_LL_BYTES=64K
  sw arsmall-simple-$rep all_reduce "-b 256K -e 2M -f 2 -n 300 -w 30" FERROCX_CE_DIRECT_BYTES=0 FERROCX_CE_LL_BYTES=64K
done
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
FXTEST_WORKER=$B/fxtest-worker timeout 120 $B/device-tests --nocapture --test-threads 1 --exact ce_runs_window_calls_in_the_direct_modes ce_direct_modes_refuse_windows_that_are_not_symmetric > $O/a/device.log 2>&1
echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control; sleep 2
left=$((570 - SECONDS + T0))
[ $left -gt 100 ] && PERF_COLLS="all_reduce all_gather broadcast" NP=2 ITERS="-n 100 -w 10" SIZES="-b 64K -e 128M -f 2" STEP_TIMEOUT=120 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl nccl-sym > $O/console-p.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
grep -E "test result|^ok$|FAILED|panicked|^test |FAIL|MISMATCH" $O/a/device.log | cut -c1-220 | head -20
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; grep -i "error\|panick" $f | head -3; done
