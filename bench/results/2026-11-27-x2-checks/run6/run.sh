#!/usr/bin/env bash
# Session 9, call 6 (2 GPUs): tuning rows for the cells still below NCCL at 2 ranks —
# broadcast 16 MiB-1 GiB over the core's chunk size; all_reduce 256 MiB-1 GiB over the
# Simple kernel's blocks x slot; LL to 4 MiB blocks for the mid sizes. -c 1 throughout.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1
T0=$SECONDS
P="$B/fxperf --np 2 --mem cuda -c 1"
for ch in 16M 64M 256M 1G; do
  FERROCX_DEVICE_CHUNK=$ch timeout 60 $P -b 16M -e 1G -f 2 -n 20 -w 5 broadcast > $O/bcast-chunk$ch.log 2>&1
done; echo "broadcast at $((SECONDS-T0))s" >> $O/summary.txt
for bl in 64 128; do for sl in 64K 128K 256K; do
  FERROCX_CE_SIMPLE_BLOCKS=$bl FERROCX_CE_SIMPLE_SLOT=$sl timeout 60 $P -b 256M -e 1G -f 2 -n 10 -w 3 all_reduce > $O/ar-b$bl-s$sl.log 2>&1
done; done; echo "all_reduce at $((SECONDS-T0))s" >> $O/summary.txt
for c in alltoall all_gather broadcast reduce_scatter all_reduce; do
  for ll in 1M 4M; do
    FERROCX_CE_LL_BYTES=$ll timeout 60 $P -b 1M -e 8M -f 2 -n 100 -w 20 $c > $O/ll$ll-$c.log 2>&1
  done
done; echo "ll at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -1 $O/gpus.txt
for f in $O/*.log; do echo "$(basename $f): $(awk '$1 ~ /^[0-9]+$/ {printf "%s/%s ", $6, $10}' $f)"; done
