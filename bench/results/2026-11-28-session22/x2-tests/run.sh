#!/usr/bin/env bash
# Session 22, call 4: the core's device tests after the device path's buffer check was
# split (device_extent / device_extent_or_host), on 2 GPUs; the single-rank tests
# (a host buffer given to the device API is named).
set -u
O=$OUT/r; mkdir -p $O
export FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0
B=gpu-run/bin
nvidia-smi -L > $O/gpus.txt 2>&1
/usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -o $O/launch gpu-run/lb/launch.cu > $O/launch-build.log 2>&1 && CUDA_VISIBLE_DEVICES=0 $O/launch > $O/launch.log 2>&1
CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_VISIBLE_DEVICES=0 $O/launch > $O/launch-32.log 2>&1; rm -f $O/launch
CUDA_VISIBLE_DEVICES=0,1 FERROCX_SPANS=1 timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 20000 -w 1000 -c 1 all_reduce > $O/fx-spans.log 2>&1
timeout 120 $B/single-rank > $O/single-rank.log 2>&1; echo "single-rank rc=$?" >> $O/summary.txt
for t in smoke_over_p2p_and_shm matrix_over_p2p matrix_staged_over_shm mix_on_device killed_rank_during_device_transfers the_cores_device_sends_and_receives_are_checked device_groups_make_their_connections_as_they_go ce_runs_small_calls_as_one_ll_kernel ce_finds_mismatched_calls; do
  env CUDA_VISIBLE_DEVICES=0,1 FXTEST_WORKER=$B/fxtest-worker timeout 200 $B/device-tests --exact $t --test-threads 1 > $O/$t.log 2>&1
  echo "$t rc=$? $(grep -E 'test result' $O/$t.log)" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/launch.log $O/launch-build.log; echo "-- CUDA_DEVICE_MAX_CONNECTIONS=32"; cat $O/launch-32.log
grep -E '^ +8 |cuLaunch|ce: collective launch|ce: order|ce: track' $O/fx-spans.log
cat $O/summary.txt; grep -E 'test result' $O/single-rank.log
