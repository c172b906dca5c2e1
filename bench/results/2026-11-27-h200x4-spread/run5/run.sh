#!/usr/bin/env bash
# Four GPUs: the chain's single-pass forward (read each line once, write it to the output and the next rank's slot) — the Simple matrix at 4 ranks, then broadcast auto (chain to 2 MiB, scatter + all_gather to 32 MiB) vs the chain everywhere (FERROCX_CE_SIMPLE_BYTES=1G) vs NCCL, and all_reduce under the new auto table (one-shot to 2 MiB blocks, two-shot to 64 MiB) vs NCCL.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 200 gpu-run/bin/device-tests ce_runs_mid --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=4 SIZES="-b 1M -e 512M -f 2" PERF_COLLS="broadcast all_reduce" STEP_TIMEOUT=90 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl > $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_CE_SIMPLE_BYTES=1G timeout 90 gpu-run/bin/fxperf --np 4 --mem cuda -b 1M -e 512M -f 2 -n 20 -w 5 -c 1 broadcast > $O/a/chain-broadcast.log 2>&1; echo "chain rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-ce.log | cut -c1-160 | head; head -2 $O/gpus.txt
echo "== broadcast auto / chain / nccl (us, out of place | in place)"; for f in $O/p/fxperf-broadcast.log $O/a/chain-broadcast.log $O/p/nccl-broadcast.log; do grep -E "^ +[0-9]" $f | awk '{print $1, $6, $10}' | tr '\n' ' '; echo; done
echo "== all_reduce auto / nccl"; for f in $O/p/fxperf-all_reduce.log $O/p/nccl-all_reduce.log; do grep -E "^ +[0-9]" $f | awk '{print $1, $6, $10}' | tr '\n' ' '; echo; done
