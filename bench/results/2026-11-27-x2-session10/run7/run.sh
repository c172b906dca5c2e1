#!/usr/bin/env bash
# Session 10, call 7 (4 GPUs): two-shot all_reduce past its 64 MiB auto limit
# (FERROCX_CE_SIMPLE_BYTES=128M: two-shot for 128-512 MiB blocks) against the default
# (ce's barrier routes there), 64K and 128K slots.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
P="$B/fxperf --np 4 --mem cuda -b 128M -e 512M -f 2 -n 10 -w 3 -c 1 all_reduce"
timeout 150 $P > $O/default.log 2>&1; echo "default at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_CE_SIMPLE_BYTES=128M timeout 60 $P > $O/twoshot-64k.log 2>&1
FERROCX_CE_SIMPLE_BYTES=128M FERROCX_CE_SIMPLE_SLOT=128K FERROCX_CE_SIMPLE_BLOCKS=128 timeout 60 $P > $O/twoshot-128k.log 2>&1
timeout 60 $P > $O/default2.log 2>&1; echo "end at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -1 $O/gpus.txt
for f in $O/*.log; do echo "$(basename $f .log): $(grep -E '^ +[0-9]' $f | awk '{printf "%s:%s/%s %s ", $1/1048576, $6, $10, $9}')"; done
