#!/usr/bin/env bash
# The whole device test file on ONE GPU (MPS) with the ce share fix and the final ibgda.
set -u
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
nvidia-cuda-mps-control -d && echo "MPS started"
timeout 280 $B/device-tests --test-threads=1 2>&1 | tee $OUT/device-all.log | grep -E "^test |test result" | cut -c1-160
echo quit | nvidia-cuda-mps-control
