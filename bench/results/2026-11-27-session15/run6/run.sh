#!/usr/bin/env bash
# Session 15, call 6 (2 GPUs), same tree as calls 4-5: device sends of 32 KiB-1 MiB
# as LL lines (FERROCX_CE_P2P_LL_BYTES=1M) vs chunks only (0), alternated: where
# the lines still pay now that chunks cost less.
set -u
O=$OUT/r; mkdir -p $O/k
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; } > $O/gpus.txt 2>&1
sw() {  # sw NAME COLL FXPERF-ARGS ENV...
  local name=$1 coll=$2 args=$3; shift 3
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/fxperf --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2 3; do
  sw sr-lines-$rep sendrecv "-b 32K -e 1M -f 2 -n 500 -w 50" FERROCX_CE_P2P_LL_BYTES=1M
  sw sr-chunks-$rep sendrecv "-b 32K -e 1M -f 2 -n 500 -w 50" FERROCX_CE_P2P_LL_BYTES=0
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; grep -i "error\|panick" $f | head -2; done
