#!/usr/bin/env bash
# Session 14, call 5 (2 GPUs): the Simple kernel's direct modes (new, never run):
# their device test and the tests the region's new word touches, under MPS; then
# fxperf with the direct modes off (auto: none yet) and forced (FERROCX_CE_DIRECT_BYTES=1G),
# alternated, for all_reduce / all_gather / broadcast at 512 KiB-256 MiB; NCCL -g 2 beside.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/n
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
FXTEST_WORKER=$B/fxtest-worker timeout 150 $B/device-tests --nocapture --test-threads 1 --exact ce_runs_window_calls_in_the_direct_modes ce_runs_mid_calls_as_one_simple_kernel ce_runs_device_sends_as_one_kernel ce_names_a_rank_killed_mid_collective > $O/a/device.log 2>&1
echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control; sleep 2
sw() {  # sw NAME COLL FXPERF-ARGS ENV...
  local name=$1 coll=$2 args=$3; shift 3
  env FERROCX_TIMEOUT=15 "$@" timeout 40 $B/fxperf --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
S="-b 512K -e 256M -f 2 -n 100 -w 10"
for rep in 1 2; do
  for c in all_reduce broadcast all_gather; do
    sw $c-off-$rep $c "$S" FERROCX_CE_DIRECT_BYTES=0
    sw $c-on-$rep $c "$S" FERROCX_CE_DIRECT_BYTES=1G
  done
done
sw sendrecv-check sendrecv "-b 8 -e 16M -f 4 -n 50 -w 5" X=0
left=$((560 - SECONDS + T0))
[ $left -gt 60 ] && NP=2 ITERS="-n 100 -w 10" SIZES="-b 512K -e 256M -f 2" PERF_COLLS="all_reduce broadcast all_gather" STEP_TIMEOUT=60 \
  timeout $left bash scripts/gpu-check.sh $B $O/n nccl > $O/console-n.txt 2>&1; echo "nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -3 $O/gpus.txt
grep -E "test result|^ok$|FAILED|panicked|^test |FAIL" $O/a/device.log | cut -c1-200 | tail -30
for f in $O/k/*-1.log $O/k/*-2.log $O/k/sendrecv-check.log $O/n/nccl-*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done
grep -h "ran on" $O/k/*.log | sort | uniq -c
