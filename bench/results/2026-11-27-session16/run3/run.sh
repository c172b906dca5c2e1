#!/usr/bin/env bash
# Session 15, call 3 (2 GPUs), on the tree with acquiring polls: fxinfo's selection
# table on GPUs; the direct modes against the (faster) ring modes again; broadcast as
# the Simple kernel past 32 MiB; all_reduce at 0.5-2 MiB as LL vs Simple; then the
# whole 2-rank table, fxperf -R 1 next to NCCL -g 2.
set -u
O=$OUT/r; mkdir -p $O/k $O/p $O/i
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
timeout 90 $B/fxrun -n 2 -- $B/fxinfo > $O/i/fxinfo.txt 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
sw() {  # sw NAME COLL FXPERF-ARGS ENV...
  local name=$1 coll=$2 args=$3; shift 3
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/fxperf --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  for c in all_gather broadcast; do
    sw $c-off-$rep $c "-R 2 -b 2M -e 128M -f 2 -n 100 -w 10" FERROCX_CE_DIRECT_BYTES=0
    sw $c-on-$rep $c "-R 2 -b 2M -e 128M -f 2 -n 100 -w 10" FERROCX_CE_DIRECT_BYTES=1G
  done
  sw bc-auto-$rep broadcast "-b 16M -e 128M -f 2 -n 60 -w 5"
  sw bc-simple-$rep broadcast "-b 16M -e 128M -f 2 -n 60 -w 5" FERROCX_CE_SIMPLE_BYTES=128M
  sw ar-ll-$rep all_reduce "-b 256K -e 2M -f 2 -n 300 -w 30"
  sw ar-simple-$rep all_reduce "-b 256K -e 2M -f 2 -n 300 -w 30" FERROCX_CE_LL_BYTES=128K
done
left=$((575 - SECONDS + T0))
[ $left -gt 60 ] && NP=2 ITERS="-n 40 -w 5" SIZES="-b 64K -e 1G -f 2" STEP_TIMEOUT=100 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
grep -A40 "selection table" $O/i/fxinfo.txt | grep "cuda" | cut -c1-250
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; grep -i "error\|panick" $f | head -2; done
