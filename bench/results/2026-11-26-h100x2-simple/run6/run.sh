#!/usr/bin/env bash
# Final tree after NVRTC compiles went parallel: the cold compile (first test), mismatch, hang and killed-rank tests; a sanity sweep.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 300 gpu-run/bin/device-tests ce_finds ce_ll_kernel_ends ce_names_a_rank --nocapture --test-threads 1 > $O/a/device-ce.log 2>&1; echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout 40 gpu-run/bin/fxperf --np 2 --mem cuda -b 1M -e 64M -f 2 -n 50 -w 10 -c 1 all_reduce > $O/a/fxperf-all_reduce.log 2>&1; echo "fxperf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED|ERROR after|came|took" $O/a/device-ce.log | cut -c1-200 | head -30; grep -E "^\s+[0-9]+ " $O/a/fxperf-all_reduce.log
