#!/usr/bin/env bash
# Session 22, call 8 (4 GPUs): all_gather and alltoall with 128 Simple blocks against
# 64, 16-256 MiB, alternated twice (the confirmation of call 7, x4-gather-blocks).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
B=gpu-run/bin
nvidia-smi -L > $O/gpus.txt 2>&1
S="-b 16M -e 256M -f 2 -n 20 -w 5 -c 1"
for rep in 1 2; do for c in all_gather alltoall; do for k in 64 128; do
  FERROCX_CE_SIMPLE_BLOCKS=$k timeout 60 $B/fxperf --np 4 --mem cuda $S $c > $O/fx-$c-$k-$rep.log 2>&1
done; done; done
tar czf $OUT/logs.tgz -C $O .
head -1 $O/gpus.txt
for c in all_gather alltoall; do echo "== $c (out / in place µs, 16M..256M)"; for rep in 1 2; do for k in 64 128; do printf "%-8s " "$k-$rep"; awk '/^ +[0-9]+ /{printf "%s/%s ", $6, $10}' $O/fx-$c-$k-$rep.log; echo; done; done; done
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w}' $O/fx-*.log
