#!/usr/bin/env bash
# Session 30, call 1 (one H200, ranks sharing it under MPS): ce's exchange kernels in CUDA
# graphs. The device tests about graphs, then captured calls timed: a graph of 10 calls
# (all_gather, alltoall, broadcast, all_reduce in turn) replayed back to back, per call,
# with FERROCX_CE_GRAPH_KERNELS=1 (the kernels) and =0 (the barrier routes), and the same
# calls eager (fxperf -c 0, for reference).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-smi -L > $O/gpus.txt 2>&1
nvidia-cuda-mps-control -d; sleep 1
FXTEST_WORKER=$B/fxtest-worker timeout 300 $B/device-tests graph --nocapture --test-threads 1 > $O/device-graph.log 2>&1
echo "device-tests graph rc=$? at $((SECONDS-T0))s" >> $S
for gk in 1 0; do
  for b in 8 1024 4096 65536; do
    FERROCX_CE_GRAPH_KERNELS=$gk timeout 60 $B/fxrun -n 2 -- $B/fxtest-worker coll-graph --replays 20 --block $b --timed 2000 --expect ce > $O/graph-gk$gk-$b.log 2>&1
    echo "graph gk=$gk block=$b rc=$? at $((SECONDS-T0))s: $(grep -o 'TIMED.*' $O/graph-gk$gk-$b.log | tr '\n' ' ')" >> $S
  done
done
for c in all_reduce all_gather broadcast alltoall; do
  timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 64K -f 8 -n 2000 -w 100 -c 0 $c > $O/fx-$c.log 2>&1
  echo "fx-$c rc=$? at $((SECONDS-T0))s" >> $S
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result|panicked" $O/device-graph.log | tail -20
