#!/usr/bin/env bash
# devnet tests with the warp/block forms, then the whole device test file (regression), fxinfo; one GPU, MPS.
set -u
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
nvidia-cuda-mps-control -d && echo "MPS started"
timeout 200 $B/device-tests --test-threads=1 --nocapture devnet 2>&1 | tee $OUT/devnet-tests.log | grep -E "^test |PASS|FAIL|test result" | grep -v DESCRIBE | cut -c1-220
echo "== fxinfo"
timeout 60 $B/fxrun -n 2 -- $B/fxinfo 2>&1 | tail -8 | cut -c1-400 | tee $OUT/fxinfo.log
echo "== the whole device test file"
timeout 330 $B/device-tests --test-threads=1 2>&1 | tee $OUT/device-all.log | grep -E "^test |test result" | cut -c1-200
echo quit | nvidia-cuda-mps-control
