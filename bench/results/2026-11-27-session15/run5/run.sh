#!/usr/bin/env bash
# Session 15, call 5 (2 GPUs), same tree as call 4: on symmetric windows (-R 2) the
# direct modes against ce's window routes past their measured range (broadcast and
# all_gather out of place lose a local copy's time there); device sends of 512 KiB-
# 2 MiB as LL lines vs chunks now that chunks cost less.
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
for rep in 1 2; do
  for c in broadcast all_gather; do
    sw $c-auto-$rep $c "-R 2 -b 128M -e 1G -f 2 -n 20 -w 3"
    sw $c-direct-$rep $c "-R 2 -b 128M -e 1G -f 2 -n 20 -w 3" FERROCX_CE_DIRECT_BYTES=1G
  done
  sw sr-ll-$rep sendrecv "-b 512K -e 2M -f 2 -n 300 -w 30"
  sw sr-chunks-$rep sendrecv "-b 512K -e 2M -f 2 -n 300 -w 30" FERROCX_CE_P2P_LL_BYTES=256K
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; grep -i "error\|panick" $f | head -2; done
