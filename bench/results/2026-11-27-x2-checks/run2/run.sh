#!/usr/bin/env bash
# Session 9, call 2 (2 GPUs): tuning rows for the 2-rank gaps of call 1 —
# Simple kernel slot size x sending blocks (all_reduce 1-16 MiB; the other four at
# 2-16 MiB), ce's point-to-point kernel limit (sendrecv 1-32 MiB), the core's
# channel size for broadcast (16-256 MiB). -n 100 -w 20, every result checked.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export FERROCX_REQUIRE_GPU=1 CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0
nvidia-smi -L > $O/gpus.txt 2>&1
T0=$SECONDS
P="$B/fxperf --np 2 --mem cuda -n 100 -w 20 -c 1"
for slot in 16K 32K 64K; do for blocks in 64 128; do
  FERROCX_CE_SIMPLE_SLOT=$slot FERROCX_CE_SIMPLE_BLOCKS=$blocks timeout 40 $P -b 1M -e 16M -f 2 all_reduce > $O/ar-slot$slot-blocks$blocks.log 2>&1
done; done; echo "all_reduce grid at $((SECONDS-T0))s" >> $O/summary.txt
for slot in 16K 32K 64K; do for c in alltoall all_gather reduce_scatter broadcast; do
  FERROCX_CE_SIMPLE_SLOT=$slot timeout 40 $P -b 2M -e 16M -f 2 $c > $O/$c-slot$slot.log 2>&1
done; done; echo "others at $((SECONDS-T0))s" >> $O/summary.txt
for p in 4M 16M 32M; do
  FERROCX_CE_P2P_BYTES=$p timeout 40 $P -b 1M -e 32M -f 2 sendrecv > $O/sendrecv-p2p$p.log 2>&1
done; echo "sendrecv at $((SECONDS-T0))s" >> $O/summary.txt
for ch in 16M 32M 64M; do
  FERROCX_DEVICE_CHANNEL_BYTES=$ch timeout 60 $P -b 16M -e 256M -f 2 broadcast > $O/bcast-ch$ch.log 2>&1
done; echo "broadcast at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for f in $O/ar-*.log; do echo "$(basename $f): $(awk '$1 ~ /^[0-9]+$/ {printf "%s ", $6}' $f)"; done
