#!/usr/bin/env bash
# Session 15, call 4 (2 GPUs), the session's final tree: all_reduce at 2-16 MiB by
# Simple blocks (64, 96, 128) now that a chunk costs less; then the whole 2-rank
# table: fxperf -R 1 next to NCCL -g 2, fxperf -R 2 (symmetric windows) next to
# NCCL -R 2 (its symmetric kernels).
set -u
O=$OUT/r; mkdir -p $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
sw() {  # sw NAME COLL FXPERF-ARGS ENV...
  local name=$1 coll=$2 args=$3; shift 3
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/fxperf --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  for b in 64 96 128; do
    sw ar-b$b-$rep all_reduce "-b 2M -e 16M -f 2 -n 200 -w 20" FERROCX_CE_SIMPLE_BLOCKS=$b
  done
done
left=$((580 - SECONDS + T0))
[ $left -gt 60 ] && NP=2 ITERS="-n 60 -w 5" SIZES="-b 64K -e 1G -f 2" STEP_TIMEOUT=100 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl perf-win nccl-sym > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; grep -i "error\|panick" $f | head -2; done
grep -h "wrong\|rc=[1-9]" $O/p/summary.txt | head
