#!/usr/bin/env bash
# The ce killed-rank test, repeated: with MPS (ranks share one GPU) and without.
B=gpu-run/bin; O=$1; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0 FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
one() {  # one NAME
  timeout 60 $B/device-tests ce_names --nocapture > $O/$1.log 2>&1
  echo "$1 rc=$? $(grep -o 'waited at barrier [0-9] of 2 ([a-z]*' $O/$1.log | sort | uniq -c | tr '\n' ' ') $(grep -c 'still running' $O/$1.log) stuck" >> $O/summary.txt
}
nvidia-cuda-mps-control -d
for i in 1 2 3 4 5; do one mps-$i; done
echo quit | nvidia-cuda-mps-control; sleep 2
for i in 1 2; do one nomps-$i; done
cat $O/summary.txt
