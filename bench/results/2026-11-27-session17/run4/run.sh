#!/usr/bin/env bash
# Session 17, call 4: the final tree (LL128 by the measured table) — the whole 2-rank
# table 8 B-1 GiB on GPUs 0 and 1, fxperf -R 1 next to NCCL -g 2, -n 30.
set -u
O=$OUT/r; mkdir -p $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 30 -w 5" SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=60 timeout 200 bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -h "rc=" $O/p/summary.txt | tr '\n' ' '
