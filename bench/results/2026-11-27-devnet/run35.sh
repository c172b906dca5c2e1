#!/usr/bin/env bash
# Final check of this tree on one GPU (MPS): the devnet tests, the conformance kit on the ibgda .so
# with a GPU, a ce/p2p smoke test (the shared plugin start), fxinfo's devnet line.
set -u
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
nvidia-cuda-mps-control -d && echo "MPS started"
timeout 200 $B/device-tests --test-threads=1 --nocapture devnet 2>&1 | tee $OUT/devnet-tests.log | grep -E "^test |test result" | cut -c1-200
timeout 200 $B/device-tests --test-threads=1 smoke_over_p2p_and_shm ce_runs_small_calls_as_one_ll_kernel 2>&1 | tee $OUT/smoke.log | grep -E "^test |test result" | cut -c1-200
echo "== fxinfo --check"
timeout 60 $B/fxinfo --check $B/libferrocx_plugin_ibgda.so 2>&1 | tee $OUT/check.log
echo quit | nvidia-cuda-mps-control
