#!/usr/bin/env bash
# Session 28, call 6 (one H200, MPS): killed_rank_during_device_transfers took 25 s in
# call 5 (error at 0.80 s, the process's exit 24 s later) against 3.5 s in session 23.
# Which part: the test as is, without shm-coll (FERROCX_SHM_COLL_PRIORITY=0), without
# ce's point-to-point kernel (FERROCX_CE_P2P_BYTES=0), as is again.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; S=$O/summary.txt; : > $S
nvidia-smi > $O/nvidia-smi.txt 2>&1
nvidia-cuda-mps-control -d; sleep 1
i=0
for e in X=1 FERROCX_SHM_COLL_PRIORITY=0 FERROCX_CE_P2P_BYTES=0 X=2; do
  i=$((i+1)); t1=$SECONDS
  env $e FXTEST_WORKER=$B/fxtest-worker timeout 150 $B/device-tests --exact killed_rank_during_device_transfers --nocapture --test-threads 1 > $O/kill-$i.log 2>&1
  echo "$e rc=$? $((SECONDS-t1)) s: $(grep -o 'transfers ... .*: [0-9.]* s' $O/kill-$i.log | grep -o '[0-9.]* s$')" >> $S
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
