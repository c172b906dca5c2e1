#!/usr/bin/env bash
# Session 15, call 8 (2 GPUs), the final tree (the line rings handed back after a
# system-scope fence): the point-to-point kernel's device tests under MPS; device
# sends 8 B-1 MiB; fxinfo's selection table.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/i
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FERROCX_TIMEOUT=15 timeout 40 $B/fxperf --np 2 --mem cuda -b 8 -e 1M -f 4 -n 300 -w 30 -c 1 sendrecv > $O/k/sendrecv.log 2>&1; echo "sendrecv rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout 40 $B/fxrun -n 2 -- $B/fxinfo > $O/i/fxinfo.txt 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
nvidia-cuda-mps-control -d
FXTEST_WORKER=$B/fxtest-worker timeout 100 $B/device-tests --nocapture --test-threads 1 --exact ce_runs_device_sends_as_one_kernel ce_names_a_send_that_meets_a_receive_of_another_size > $O/a/device.log 2>&1
echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -1 $O/gpus.txt
grep -E "test result|FAILED|panicked" $O/a/device.log | head -5
grep -E "^ +[0-9]" $O/k/sendrecv.log | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo
grep -A40 "selection table" $O/i/fxinfo.txt | grep "cuda" | cut -c1-250
