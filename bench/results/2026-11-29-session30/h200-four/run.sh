#!/usr/bin/env bash
# Session 30, call 6 (one H200, 4 ranks sharing it under MPS, 8 hardware queues per
# context): the graph scenarios at 4 ranks — collectives at 8 B and 4 KiB with eager calls
# around every replay, half captured on a forked stream; ring exchanges in a graph with eager
# ones around; then timed replays at 8 B.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
for b in 8 4096; do
  timeout 60 $B/fxrun -n 4 -- $B/fxtest-worker coll-graph --replays 100 --expect ce --block $b --mixed --fork > $O/coll-graph-$b.log 2>&1
  echo "coll-graph 4 ranks block=$b mixed fork rc=$? at $((SECONDS-T0))s: $(grep -c PASS $O/coll-graph-$b.log) PASS" >> $S
done
timeout 60 $B/fxrun -n 4 -- $B/fxtest-worker p2p-graph 8 --replays 100 --mixed --expect ce > $O/p2p-graph.log 2>&1
echo "p2p-graph 4 ranks 8 B mixed rc=$? at $((SECONDS-T0))s: $(grep -c PASS $O/p2p-graph.log) PASS" >> $S
timeout 60 $B/fxrun -n 4 -- $B/fxtest-worker coll-graph --replays 10 --block 8 --timed 1000 --expect ce > $O/timed.log 2>&1
echo "coll-graph 4 ranks timed rc=$?: $(grep -o 'TIMED.*' $O/timed.log | head -1)" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -h "FAIL\|panicked" $O/*.log | head -5
