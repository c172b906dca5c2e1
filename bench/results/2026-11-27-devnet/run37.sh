#!/usr/bin/env bash
# ce at 4 ranks on ONE GPU (MPS) after splitting the waiting kernels' wave between the ranks sharing it.
set -u
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
nvidia-cuda-mps-control -d && echo "MPS started"
timeout 280 $B/device-tests --test-threads=1 ce_runs_mid_calls_as_one_simple_kernel ce_runs_device_sends_as_one_kernel 2>&1 | tee $OUT/ce-share.log | grep -E "^test |test result|FAIL case" | cut -c1-250
echo quit | nvidia-cuda-mps-control
