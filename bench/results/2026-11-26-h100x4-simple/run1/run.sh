#!/usr/bin/env bash
# Four GPUs: the Simple/LL matrix tests (4 ranks on 4 GPUs), then five collectives 8 B–1 GiB vs NCCL -g 4.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1; nvidia-smi topo -m >> $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 120 gpu-run/bin/device-tests ce_runs_mid ce_runs_small --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=4 SIZES="-b 8 -e 1G -f 4" PERF_COLLS="all_reduce all_gather alltoall reduce_scatter broadcast" STEP_TIMEOUT=40 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl >> $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-ce.log | cut -c1-120 | head; head -12 $O/gpus.txt
python3 scripts/bench-compare.py $O/p 2>&1 | head -90
