#!/usr/bin/env bash
# Session 18, call 6 (4 GPUs): the whole 4-rank table with the LL128 kernel, fxperf
# --np 4 -R 1 next to nccl-tests -g 4, 8 B-1 GiB, -n 30 -w 5 (p/).
set -u
O=$OUT/r; mkdir -p $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
NP=4 ITERS="-n 30 -w 5" SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=70 timeout 270 bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -4 $O/gpus.txt; grep -h "rc=\|wrong" $O/p/summary.txt | tr '\n' ' '
