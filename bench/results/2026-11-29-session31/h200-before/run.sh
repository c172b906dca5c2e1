#!/usr/bin/env bash
# Session 31, call 1 (one H200, ranks sharing it under MPS), the tree as session 30 left it:
# captures in global mode (the driver's and torch.cuda.graph's default) and thread-local mode
# beside relaxed, with an eager call held in flight all through the capture (ferrocx's own
# threads watch it); torch.cuda.graph over the NCCL drop-in in each mode.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=20 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
run() {  # run NAME CMD...
  local n=$1; shift
  timeout 60 "$@" > $O/$n.log 2>&1
  echo "$n rc=$? at $((SECONDS-T0))s: $(grep -E 'FAIL|PASS' $O/$n.log | head -2 | cut -c1-300)" >> $S
}
for m in relaxed global thread; do
  run coll-$m-8-held $B/fxrun -n 2 -- $B/fxtest-worker coll-graph --replays 30 --block 8 --mixed --held --capture $m --expect ce
  run coll-$m-256k-fork $B/fxrun -n 2 -- $B/fxtest-worker coll-graph --replays 30 --block 256K --mixed --fork --held --capture $m --expect ce
  run p2p-$m-8 $B/fxrun -n 2 -- $B/fxtest-worker p2p-graph 8 --replays 30 --mixed --capture $m
done
for m in global thread_local relaxed; do
  FXT_REPLAYS=20 FXT_CAPTURE_MODE=$m LD_PRELOAD=$PWD/gpu-run/nccl/lib/libnccl.so.2 run torch-$m \
    python3 -m torch.distributed.run --nproc-per-node 2 nccl/tests/torch_graph.py
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
