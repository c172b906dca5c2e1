#!/usr/bin/env bash
# Four GPUs: broadcast as scatter + all_gather (and two-shot all_reduce) in the Simple matrix, then broadcast 1 MiB-512 MiB vs the barrier routes and NCCL -g 4.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 300 gpu-run/bin/device-tests ce_runs_mid --nocapture --test-threads 1 > $O/a/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=4 SIZES="-b 1M -e 512M -f 2" PERF_COLLS="broadcast" STEP_TIMEOUT=60 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl >> $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_CE_SIMPLE_BYTES=0 timeout 60 gpu-run/bin/fxperf --np 4 --mem cuda -b 1M -e 512M -f 2 -n 20 -w 5 -c 1 broadcast > $O/a/broadcast-no-simple.log 2>&1; echo "BC without Simple rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/p/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAIL" $O/a/device.log | cut -c1-200 | head; cat $O/gpus.txt
echo "== ours"; grep -E "^ +[0-9]" $O/p/fxperf-broadcast.log | awk '{print $1, $6, $10}' | tr '\n' ' '
echo; echo "== without Simple"; grep -E "^ +[0-9]" $O/a/broadcast-no-simple.log | awk '{print $1, $6}' | tr '\n' ' '
echo; echo "== nccl"; grep -E "^ +[0-9]" $O/p/nccl-broadcast.log | awk '{print $1, $7}' | tr '\n' ' '
