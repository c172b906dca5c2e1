#!/usr/bin/env bash
# Session 30, call 2 (one H200 under MPS): do the graph tests see a missing launch chain?
# Two mutant workers built from the tree with chain.rs changed: mutA never chains (captured
# launches neither wait for nor record the chain event), mutB chains but does not order the
# launches captured on forked streams (no capture dependency on the previous ce node).
# Each runs the scenarios of ce_graph_kernels_beside_eager_calls_and_forked_streams three
# times; then the fixed ce_graph_replay_ends_when_a_rank_never_replays on the real tree.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=10 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
for m in mutA mutB bin; do
  for sc in "8 --mixed" "8 --mixed --fork" "4096 --mixed --fork" "262144 --mixed"; do
    set -- $sc; b=$1; shift
    for k in 1 2 3; do
      timeout 60 $B/fxrun -n 2 -- gpu-run/$m/fxtest-worker coll-graph --replays 200 --expect ce --block $b "$@" > $O/$m-$b$(echo "$@" | tr -d ' -')-$k.log 2>&1
      rc=$?
      echo "$m block=$b $* run $k rc=$rc at $((SECONDS-T0))s: $(grep -ho 'PASS.*\|replay [0-9]*, [^:]*: rank [0-9] byte.*\|ERROR.*' $O/$m-$b$(echo "$@" | tr -d ' -')-$k.log | head -2 | cut -c1-200 | tr '\n' ' ')" >> $S
      [ $((SECONDS-T0)) -gt 420 ] && break 3
    done
  done
done
FXTEST_WORKER=$B/fxtest-worker timeout 150 $B/device-tests ce_graph_replay_ends --nocapture --test-threads 1 > $O/device-stop.log 2>&1
echo "device-tests stop rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result|panicked" $O/device-stop.log | tail -5
