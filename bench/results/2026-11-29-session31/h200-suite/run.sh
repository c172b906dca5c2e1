#!/usr/bin/env bash
# Session 31, call 2 (one H200, ranks under MPS): a mutant worker whose ce chain does not
# wait for graph replays at destroy (Chain::settle returns at once) against the new
# early-destroy scenario; the tree's worker likewise; then every device test (session 30's
# fixes after review had not run on a GPU).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=20 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
run() {  # run NAME CMD...
  local n=$1; shift
  timeout 60 "$@" > $O/$n.log 2>&1
  echo "$n rc=$? at $((SECONDS-T0))s: $(grep -E 'FAIL|PASS' $O/$n.log | head -2 | cut -c1-400)" >> $S
}
for w in mut bin; do
  for b in 8 262144; do
    for k in 1 2; do
      run early-$w-$b-$k $B/fxrun -n 2 -- gpu-run/$w/fxtest-worker coll-graph --replays 3 --block $b --early-destroy 300 --expect ce
    done
  done
done
run coll-global-256k-fork $B/fxrun -n 2 -- $B/fxtest-worker coll-graph --replays 30 --block 262144 --mixed --fork --held --capture global --expect ce
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout $((585 - SECONDS)) $B/device-tests --test-threads 1 > $O/device.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result|panicked" $O/device.log | tail -40
