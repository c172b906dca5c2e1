#!/usr/bin/env bash
# Every ce device test on the Simple kernel's tree; then the Simple kernel above 32 MiB (FERROCX_CE_SIMPLE_BYTES=1G vs the default).
set -u
O=$OUT/r; mkdir -p $O/a $O/b
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 430 gpu-run/bin/device-tests ce_ --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for b in all_reduce all_gather reduce_scatter alltoall broadcast; do
  for sp in 1G 32M; do
    [ $((SECONDS - T0)) -gt 560 ] && { echo "skip $b $sp" >> $O/summary.txt; continue; }
    FERROCX_CE_SIMPLE_BYTES=$sp timeout 30 gpu-run/bin/fxperf --np 2 --mem cuda -b 16M -e 512M -f 2 -n 20 -w 5 -c 1 $b > $O/b/fxperf-$b-sp$sp.log 2>&1; echo "fxperf-$b-sp$sp rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-ce.log | cut -c1-160 | head -40
for b in all_reduce all_gather reduce_scatter alltoall broadcast; do echo "## $b size | sp1G oop ip wrong | sp32M oop ip"; paste <(grep -E "^\s+[0-9]+ " $O/b/fxperf-$b-sp1G.log | awk '{print $1, $6, $10, $9+$13}') <(grep -E "^\s+[0-9]+ " $O/b/fxperf-$b-sp32M.log | awk '{print $6, $10}'); done
