#!/usr/bin/env bash
# Session 30, call 4 (one H200, ranks sharing it under MPS): the tree with the core's
# refusal of captured calls on its own device path. The device tests about graphs; captured
# calls timed (a graph of 10 collectives, and of 4 ring exchanges, replayed back to back)
# with FERROCX_CE_GRAPH_KERNELS=1 and =0, eager all_reduces timed after the capture (chained);
# eager fxperf in the same call for reference; fxperf -c 1 for wrong results.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
FXTEST_WORKER=$B/fxtest-worker timeout 300 $B/device-tests graph --test-threads 1 > $O/device-graph.log 2>&1
echo "device-tests graph rc=$? at $((SECONDS-T0))s" >> $S
for gk in 1 0; do
  for b in 8 4096 65536; do
    FERROCX_CE_GRAPH_KERNELS=$gk timeout 60 $B/fxrun -n 2 -- $B/fxtest-worker coll-graph --replays 20 --block $b --timed 2000 --expect ce > $O/graph-gk$gk-$b.log 2>&1
    echo "coll-graph gk=$gk block=$b rc=$? at $((SECONDS-T0))s: $(grep -o 'TIMED.*' $O/graph-gk$gk-$b.log | head -1)" >> $S
  done
done
for b in 8 4096 65536; do
  timeout 40 $B/fxrun -n 2 -- $B/fxtest-worker p2p-graph $b --replays 20 --timed 2000 > $O/p2p-graph-$b.log 2>&1
  echo "p2p-graph len=$b rc=$? at $((SECONDS-T0))s: $(grep -o 'TIMED.*' $O/p2p-graph-$b.log | head -1)" >> $S
done
for c in all_reduce all_gather broadcast alltoall sendrecv; do
  timeout 40 $B/fxperf --np 2 --mem cuda -b 8 -e 64K -f 8 -n 2000 -w 100 -c 0 $c > $O/fx-$c.log 2>&1
  echo "fx-$c rc=$? at $((SECONDS-T0))s" >> $S
done
for c in all_reduce sendrecv; do
  timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 $c > $O/fxc-$c.log 2>&1
  echo "fxc-$c rc=$? at $((SECONDS-T0))s" >> $S
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result|panicked" $O/device-graph.log | tail -12
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf -c 1 wrong:", w+0}' $O/fxc-*.log
for c in all_reduce all_gather broadcast alltoall sendrecv; do echo -n "$c: "; grep -E "^ +[0-9]+ " $O/fx-$c.log | awk '{printf "%s=%s ", $1, $6}'; echo; done
