#!/usr/bin/env bash
# Session 21, call 5 (4 GPUs), after review (early locals with the first batch, a failure with batches in flight breaks the communicator): device plans queued before their connections exist.
# `dev-lazy` (4 ranks, hosts waiting on their streams after each call, the core's path over
# p2p and shm), a device stage posting its transfers in batches as their connections come
# (call 3's first version waited for all of a stage's: it hung, as the tree before did); the
# core's device tests (2 GPUs).
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
step() {  # step NAME LIMIT CMD...
  local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout $lim "$@" > $O/$name.log 2>&1
  local rc=$?
  echo "$name: rc=$rc $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S
}
step lazy-new 200 env FXTEST_WORKER=$B/fxtest-worker $B/device-tests \
  device_groups_make_their_connections_as_they_go --nocapture --test-threads 1
step core-device 300 env CUDA_VISIBLE_DEVICES=0,1 FXTEST_WORKER=$B/fxtest-worker $B/device-tests \
  smoke_over_p2p_and_shm matrix_over_p2p matrix_staged_over_shm mix_on_device \
  killed_rank_during_device_transfers the_cores_device_sends_and_receives_are_checked \
  --nocapture --test-threads 1
echo "total: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S; head -4 $O/gpus.txt
for f in $O/lazy-new.log $O/core-device.log; do
  echo "== $(basename $f)"; grep -h "test result\|FAILED\|panicked\|FAIL\|hang" $f | cut -c1-400 | head -6
done
