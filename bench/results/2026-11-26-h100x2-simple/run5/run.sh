#!/usr/bin/env bash
# Final tree: Simple/LL/kill device tests, fxinfo's ce table, then all six collectives 8 B–1 GiB vs NCCL (gpu-check perf nccl).
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 200 gpu-run/bin/device-tests ce_runs_mid ce_runs_small ce_names_a_rank --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout 60 gpu-run/bin/fxrun -n 2 -- gpu-run/bin/fxinfo > $O/a/fxinfo.log 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
ITERS="-n 20 -w 5" STEP_TIMEOUT=60 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl >> $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-ce.log | cut -c1-160 | head; grep -A40 "ce routes" $O/a/fxinfo.log | head -20
python3 scripts/bench-compare.py $O/p 2>&1 | head -100
