#!/usr/bin/env bash
# Session 28, call 5 (one H200, MPS): the device tests call 4 did not reach (its
# 420 s limit ended during killed_rank_during_device_transfers), each alone with a
# wall-clock stamp; device_groups_make_their_connections_as_they_go (4 ranks) with 8
# hardware queues per context (32 fail to start 4 contexts on one GPU, as in session 23).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
for t in killed_rank_during_device_transfers matrix_over_p2p matrix_staged_over_shm mix_on_device \
  smoke_over_p2p_and_shm the_cores_device_sends_and_receives_are_checked; do
  t1=$SECONDS; FXTEST_WORKER=$B/fxtest-worker timeout 150 $B/device-tests --exact $t --nocapture --test-threads 1 > $O/$t.log 2>&1
  echo "$t rc=$? $((SECONDS-t1)) s (at $((SECONDS-T0)) s)" >> $S
done
t1=$SECONDS; CUDA_DEVICE_MAX_CONNECTIONS=8 FXTEST_WORKER=$B/fxtest-worker timeout 120 $B/device-tests --exact device_groups_make_their_connections_as_they_go --nocapture --test-threads 1 > $O/device_groups.log 2>&1
echo "device_groups_make_their_connections_as_they_go (8 queues) rc=$? $((SECONDS-t1)) s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
