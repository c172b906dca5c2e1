#!/usr/bin/env bash
# Four GPUs: with the spread Simple kernel, where should all_reduce stop running two-shot and broadcast scatter + all_gather? auto vs FERROCX_CE_SIMPLE_BYTES=64M (all_reduce: one-shot Simple to 32 MiB, two-shot 64–256 MiB; broadcast: one spread Simple kernel to 64 MiB, scatter + all_gather 128–256 MiB), 1 MiB–512 MiB, next to NCCL -g 4.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
NP=4 SIZES="-b 1M -e 512M -f 2" PERF_COLLS="all_reduce broadcast" STEP_TIMEOUT=90 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl > $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for c in all_reduce broadcast; do
  FERROCX_CE_SIMPLE_BYTES=64M timeout 90 gpu-run/bin/fxperf --np 4 --mem cuda -b 1M -e 512M -f 2 -n 20 -w 5 -c 1 $c > $O/a/s64m-$c.log 2>&1; echo "64M $c rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
NP=4 gpu-run/bin/fxinfo > $O/a/fxinfo.log 2>&1
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for c in all_reduce broadcast; do echo "== $c auto / 64M / nccl (us, out of place)"; for f in $O/p/fxperf-$c.log $O/a/s64m-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{print $1, $6}' | tr '\n' ' '; echo; done; done
