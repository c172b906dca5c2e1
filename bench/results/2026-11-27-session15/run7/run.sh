#!/usr/bin/env bash
# Session 15, call 7 (2 GPUs), same tree as calls 4-6: device sends of 8 B-32 KiB as
# LL lines vs chunks; all_reduce and broadcast at 1-128 MiB, fxperf -R 1 next to
# NCCL -g 2, -n 200 (the 1.3x all_reduce target at 8 MiB, broadcast at 64 MiB).
set -u
O=$OUT/r; mkdir -p $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; } > $O/gpus.txt 2>&1
sw() {  # sw NAME COLL FXPERF-ARGS ENV...
  local name=$1 coll=$2 args=$3; shift 3
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/fxperf --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  sw sr-lines-$rep sendrecv "-b 8 -e 32K -f 8 -n 1000 -w 100" FERROCX_CE_P2P_LL_BYTES=1M
  sw sr-chunks-$rep sendrecv "-b 8 -e 32K -f 8 -n 1000 -w 100" FERROCX_CE_P2P_LL_BYTES=0
done
PERF_COLLS="all_reduce broadcast" NP=2 ITERS="-n 200 -w 20" SIZES="-b 1M -e 128M -f 2" STEP_TIMEOUT=100 timeout 400 bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; done
for c in all_reduce broadcast; do echo "== $c"; paste <(grep -E "^ +[0-9]" $O/p/fxperf-$c.log | awk '{print $1, $6, $10}') <(grep -E "^ +[0-9]" $O/p/nccl-$c.log | awk '{print $6, $10}'); done
