#!/usr/bin/env bash
# Session 9, call 5 (2 GPUs): broadcast and sendrecv at 8 B-1 MiB again (run3's
# broadcast read 20-30 us up to 256 KiB against run1's 12), -n 200, default and with
# FERROCX_CE_P2P_BYTES=4M (the old default), alternating; nccl-tests broadcast beside.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1
P="$B/fxperf --np 2 --mem cuda -b 8 -e 1M -f 4 -n 200 -w 20 -c 1"
for round in 1 2; do
  for c in broadcast sendrecv; do
    timeout 60 $P $c > $O/$c-default-$round.log 2>&1
    FERROCX_CE_P2P_BYTES=4M timeout 60 $P $c > $O/$c-p2p4M-$round.log 2>&1
  done
done
tar czf $OUT/logs.tgz -C $O .
head -2 $O/gpus.txt
for f in $O/*.log; do echo "$(basename $f): $(awk '$1 ~ /^[0-9]+$/ {printf "%s/%s ", $6, $10}' $f)"; done
