#!/usr/bin/env bash
# Session 18, call 5: all_reduce at 8 MiB in place sits at 1.30x NCCL (the issue's line):
# does the Simple kernel's block count move it? FERROCX_CE_SIMPLE_BLOCKS 32 / 64 (default)
# / 128, all_reduce 2-16 MiB at -n 200, alternated twice (k/).
set -u
O=$OUT/r; mkdir -p $O/k
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
T0=$SECONDS
{ nvidia-smi -L; } > $O/gpus.txt 2>&1
for rep in 1 2; do
  for nb in 64 32 128; do
    FERROCX_CE_SIMPLE_BLOCKS=$nb timeout 60 $B/fxperf --np 2 --mem cuda -b 2M -e 16M -f 2 -n 200 -w 20 -c 1 all_reduce > $O/k/ar-b$nb-$rep.log 2>&1
    echo "b$nb-$rep rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt | tr '\n' ' '; echo; head -2 $O/gpus.txt
for f in $O/k/*.log; do echo "$(basename $f .log): $(grep -E '^ +[0-9]' $f | awk '{printf "%s:%s/%s/%s ", $1/1048576, $6, $10, $9+$13}')"; done
