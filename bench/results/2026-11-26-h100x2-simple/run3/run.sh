#!/usr/bin/env bash
# Simple kernel, single-thread acq_rel fences, fold 4 units deep: device tests, blocks 64 vs 128, Simple vs barrier routes vs NCCL.
set -u
O=$OUT/r; mkdir -p $O/a $O/b $O/t
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
(make -C gpu-run/nccl-tests -j 8 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1; echo "nccl-build rc=$?" >> $O/summary.txt) &
BP=$!
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 280 gpu-run/bin/device-tests ce_runs_mid ce_ll_kernel_ends ce_names_a_rank --nocapture --test-threads 1 > $O/a/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for b in all_gather all_reduce; do
  for cfg in 64K:64 64K:128 128K:64; do
    slot=${cfg%%:*}; blk=${cfg##*:}
    FERROCX_CE_SIMPLE_SLOT=$slot FERROCX_CE_SIMPLE_BLOCKS=$blk timeout 40 gpu-run/bin/fxperf --np 2 --mem cuda -b 1M -e 64M -f 2 -n 50 -w 10 -c 1 $b > $O/t/fxperf-$b-$slot-$blk.log 2>&1; echo "tune $b $cfg rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do
  for sp in 32M 0; do
    [ $((SECONDS - T0)) -gt 470 ] && { echo "skip $b $sp" >> $O/summary.txt; continue; }
    FERROCX_CE_SIMPLE_BYTES=$sp timeout 40 gpu-run/bin/fxperf --np 2 --mem cuda -b 64K -e 64M -f 2 -n 100 -w 20 -c 1 $b > $O/b/fxperf-$b-sp$sp.log 2>&1; echo "fxperf-$b-sp$sp rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
wait $BP
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do
  [ $((SECONDS - T0)) -gt 540 ] && { echo "skip nccl $b" >> $O/summary.txt; continue; }
  timeout 30 gpu-run/nccl-tests/build/${b}_perf -b 64K -e 64M -f 2 -n 100 -w 20 -c 1 -g 2 > $O/b/nccl-$b.log 2>&1; echo "nccl-$b rc=$?" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAIL|took|came" $O/a/device.log | cut -c1-220 | head -30
for b in all_gather all_reduce; do echo "## tune $b size | 64K:64 | 64K:128 | 128K:64 (oop us)"; paste <(grep -E "^\s+[0-9]+ " $O/t/fxperf-$b-64K-64.log | awk '{print $1, $6}') <(grep -E "^\s+[0-9]+ " $O/t/fxperf-$b-64K-128.log | awk '{print $6}') <(grep -E "^\s+[0-9]+ " $O/t/fxperf-$b-128K-64.log | awk '{print $6, $9+$13}'); done
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do echo "## $b size | simple oop ip wrong | barrier oop ip | nccl oop ip"; paste <(grep -E "^\s+[0-9]+ " $O/b/fxperf-$b-sp32M.log | awk '{print $1, $6, $10, $9+$13}') <(grep -E "^\s+[0-9]+ " $O/b/fxperf-$b-sp0.log | awk '{print $6, $10}') <(grep -E "^\s+[0-9]+ " $O/b/nccl-$b.log | awk '{print $6, $10}'); done
