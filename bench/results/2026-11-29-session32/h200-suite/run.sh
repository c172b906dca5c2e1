#!/usr/bin/env bash
# Session 32, call 2 (one H200, ranks under MPS): every device test on the final tree, then
# torch.cuda.graph over the drop-in in global mode (torch's default).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/lite; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 470 $B/device-tests --test-threads 1 > $O/device.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
FXT_REPLAYS=20 FXT_CAPTURE_MODE=global LD_PRELOAD=$PWD/gpu-run/nccl/lib/libnccl.so.2 FERROCX_TIMEOUT=20 \
  timeout 60 python3 -m torch.distributed.run --nproc-per-node 2 nccl/tests/torch_graph.py > $O/torch-global.log 2>&1
echo "torch-global rc=$? at $((SECONDS-T0))s: $(grep -E 'FAIL|PASS' $O/torch-global.log | head -2 | cut -c1-300)" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device.log | tail -40
