#!/usr/bin/env bash
# Session 18, call 1: the final tree of session 17 (522cba8) — the whole 2-rank table
# 8 B-1 GiB on GPUs 0 and 1, fxperf -R 1 next to NCCL -g 2: 8 B-8 MiB at -n 200 -w 20
# (p1/), 16 MiB-1 GiB at -n 40 -w 5 (p2/); then ce's device tests (the LL128 hang and
# killed-rank cases, the LL matrix asserting its path) and fxinfo.
set -u
O=$OUT/r; mkdir -p $O/p1 $O/p2 $O/a $O/i
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 200 -w 20" SIZES="-b 8 -e 8M -f 2" STEP_TIMEOUT=60 timeout 200 bash scripts/gpu-check.sh $B $O/p1 perf nccl > $O/console-p1.txt 2>&1; echo "perf1 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 40 -w 5" SIZES="-b 16M -e 1G -f 2" STEP_TIMEOUT=60 timeout 220 bash scripts/gpu-check.sh $B $O/p2 perf nccl > $O/console-p2.txt 2>&1; echo "perf2 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout 30 $B/fxrun -n 2 -- $B/fxinfo > $O/i/fxinfo.txt 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
left=$((580 - SECONDS + T0))
[ $left -gt 30 ] && FXTEST_WORKER=$B/fxtest-worker timeout $left $B/device-tests --nocapture --test-threads 1 ce_ > $O/a/device-ce.log 2>&1
echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -h "rc=[1-9]\|wrong" $O/p*/summary.txt | head
grep -E "^test |test result|FAILED|panicked" $O/a/device-ce.log | cut -c1-160 | head -40
