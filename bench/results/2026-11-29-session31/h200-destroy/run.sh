#!/usr/bin/env bash
# Session 31, call 5 (one H200, ranks under MPS): the tree after Communicator::destroy
# learned to fail on a mismatch a plugin's comm_destroy (or a peer) reports: the device
# tests about mismatches, graphs (destroy with replays in flight) and killed ranks, and the
# drop-in under torch.cuda.graph (destroy_process_group at its end).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=20 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/lite; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 200 $B/device-tests mismatch graph destroy killed --test-threads 1 > $O/device.log 2>&1
echo "device-tests (mismatch graph destroy killed) rc=$? at $((SECONDS-T0))s" >> $S
FXT_REPLAYS=10 FXT_CAPTURE_MODE=global LD_PRELOAD=$PWD/gpu-run/nccl/lib/libnccl.so.2 timeout 60 \
  python3 -m torch.distributed.run --nproc-per-node 2 nccl/tests/torch_graph.py > $O/torch-global.log 2>&1
echo "torch-global rc=$? at $((SECONDS-T0))s: $(grep -E 'PASS|FAIL' $O/torch-global.log | head -2)" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device.log | tail -14
