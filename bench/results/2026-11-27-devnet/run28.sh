#!/usr/bin/env bash
# devnet (ibgda proxy handler) tests on one GPU, ranks as processes under MPS.
set -u
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
nvidia-smi -L
nvidia-cuda-mps-control -d && echo "MPS started"
timeout 420 $B/device-tests --test-threads=1 --nocapture devnet 2>&1 | tee $OUT/devnet.log | tail -150
echo quit | nvidia-cuda-mps-control
