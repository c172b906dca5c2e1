#!/usr/bin/env bash
# Four GPUs: broadcast passed along the ranks (the Simple kernel's chain) — the Simple/LL matrices and the killed-rank test at 4 ranks, then broadcast 1 MiB–512 MiB: auto (chain to 2 MiB, scatter + all_gather to 32 MiB, routes above) vs the chain everywhere (FERROCX_CE_SIMPLE_BYTES=1G) vs NCCL -g 4.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 240 gpu-run/bin/device-tests ce_runs_mid ce_runs_small ce_names_a_rank_killed --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=4 SIZES="-b 1M -e 512M -f 2" PERF_COLLS="broadcast" STEP_TIMEOUT=90 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl > $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_CE_SIMPLE_BYTES=1G timeout 90 gpu-run/bin/fxperf --np 4 --mem cuda -b 1M -e 512M -f 2 -n 20 -w 5 -c 1 broadcast > $O/a/chain-broadcast.log 2>&1; echo "chain rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_CE_SIMPLE_BYTES=1G timeout 60 gpu-run/bin/fxperf --np 3 --mem cuda -b 1M -e 256M -f 4 -n 20 -w 5 -c 1 broadcast > $O/a/chain-broadcast-3.log 2>&1; echo "chain 3 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-ce.log | cut -c1-160 | head; head -2 $O/gpus.txt
echo "== broadcast auto / chain / nccl (us, out of place | in place)"; for f in $O/p/fxperf-broadcast.log $O/a/chain-broadcast.log $O/p/nccl-broadcast.log; do grep -E "^ +[0-9]" $f | awk '{print $1, $6, $10}' | tr '\n' ' '; echo; done
echo "== 3 ranks chain"; grep -E "^ +[0-9]" $O/a/chain-broadcast-3.log | awk '{print $1, $6, $9, $10}' | tr '\n' ' '
