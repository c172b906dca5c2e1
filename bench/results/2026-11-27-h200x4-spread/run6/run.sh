#!/usr/bin/env bash
# Four GPUs: two-shot all_reduce as one Simple kernel where its chunks fit one lap of the rings — the Simple matrix at 2 and 4 ranks (two-shot one kernel and two), then all_reduce 1 MiB–128 MiB at 4 ranks (auto) vs NCCL, and at 3 ranks.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 240 gpu-run/bin/device-tests ce_runs_mid --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=4 SIZES="-b 1M -e 128M -f 2" PERF_COLLS="all_reduce" STEP_TIMEOUT=90 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl > $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout 60 gpu-run/bin/fxperf --np 3 --mem cuda -b 1M -e 64M -f 4 -n 20 -w 5 -c 1 all_reduce > $O/a/all_reduce-3.log 2>&1; echo "3 ranks rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED|failed" $O/a/device-ce.log | cut -c1-220 | head; head -2 $O/gpus.txt
echo "== all_reduce auto / nccl (us, out of place | in place)"; for f in $O/p/fxperf-all_reduce.log $O/p/nccl-all_reduce.log; do grep -E "^ +[0-9]" $f | awk '{print $1, $6, $10, $9}' | tr '\n' ' '; echo; done
echo "== 3 ranks"; grep -E "^ +[0-9]" $O/a/all_reduce-3.log | awk '{print $1, $6, $9, $10}' | tr '\n' ' '
