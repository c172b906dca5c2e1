#!/usr/bin/env bash
# Four GPUs: the Simple kernel spread over (chunk, peer) pairs, and the bounded-launch count — device tests at 4 ranks, then five collectives 1 MiB–512 MiB vs NCCL -g 4, and the same without the spread.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1; nvidia-smi topo -m >> $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 200 gpu-run/bin/device-tests ce_runs_mid ce_runs_small --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=4 SIZES="-b 1M -e 512M -f 4" PERF_COLLS="all_gather reduce_scatter alltoall broadcast all_reduce" STEP_TIMEOUT=60 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl >> $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for c in all_gather reduce_scatter alltoall broadcast all_reduce; do
  FERROCX_CE_SIMPLE_SPREAD=0 timeout 60 gpu-run/bin/fxperf --np 4 --mem cuda -b 1M -e 512M -f 4 -n 20 -w 5 -c 1 $c > $O/a/nospread-$c.log 2>&1; echo "nospread $c rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-ce.log | cut -c1-160 | head; head -5 $O/gpus.txt
python3 scripts/bench-compare.py $O/p 2>&1 | head -70
for c in all_gather reduce_scatter alltoall broadcast all_reduce; do echo "== $c spread / nospread / nccl (us, out of place)"; for f in $O/p/fxperf-$c.log $O/a/nospread-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{print $1, $6}' | tr '\n' ' '; echo; done; done
