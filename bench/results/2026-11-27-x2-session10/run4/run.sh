#!/usr/bin/env bash
# Session 10, call 4 (4 GPUs): where ce's copy-engine routes overtake the Simple kernel
# at 4 ranks (run58: all_gather 512 MiB on the routes 1157 us = 1.10x NCCL, 256 MiB on
# the kernel 723 = 0.92x): the Simple limit lowered to 4/16 MiB blocks against the
# default, all_gather, alltoall, reduce_scatter, 32-512 MiB.
set -u
O=$OUT/r; mkdir -p $O/v
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
P="$B/fxperf --np 4 --mem cuda -b 32M -e 512M -f 2 -n 10 -w 3 -c 1"
for round in 1 2; do
  for c in all_gather alltoall reduce_scatter; do
    for lim in default 16M 4M; do
      if [ $lim = default ]; then timeout 90 $P $c > $O/v/$c-$lim-$round.log 2>&1
      else FERROCX_CE_SIMPLE_BYTES=$lim timeout 90 $P $c > $O/v/$c-$lim-$round.log 2>&1; fi
    done
  done
  echo "round $round at $((SECONDS-T0))s" >> $O/summary.txt
  [ $((SECONDS-T0)) -gt 300 ] && break
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -1 $O/gpus.txt
for f in $O/v/*.log; do echo "$(basename $f .log): $(grep -E '^ +[0-9]' $f | awk '{printf "%s:%s/%s ", $1/1048576, $6, $10}')"; done
