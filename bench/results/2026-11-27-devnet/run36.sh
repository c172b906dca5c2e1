#!/usr/bin/env bash
# ce Simple at 4 ranks on ONE GPU (MPS), the case that times out: does capping the blocks help?
set -u
B=gpu-run/bin
nvidia-cuda-mps-control -d && echo "MPS started"
for blocks in 64 32 16 8; do
  echo "== FERROCX_CE_SIMPLE_BLOCKS=$blocks"
  CUDA_DEVICE_MAX_CONNECTIONS=16 FERROCX_CE_STAGE=1 FERROCX_CE_SCRATCH_BYTES=0 FERROCX_CE_LL_BYTES=0 \
  FERROCX_CE_SIMPLE_SLOT=1040 FERROCX_CE_SIMPLE_BYTES=auto FERROCX_CE_SIMPLE_BLOCKS=$blocks FERROCX_TIMEOUT=15 \
  timeout 100 $B/fxrun -n 4 -- $B/fxtest-worker coll-matrix --mem cuda --expect ce --filter "^all_gather " 2>&1 | grep -E "PASS|FAIL" | cut -c1-220 | tee -a $OUT/blocks.log
done
echo quit | nvidia-cuda-mps-control
