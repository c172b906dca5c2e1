#!/usr/bin/env bash
# ce's Simple kernel at 4 ranks on ONE GPU under MPS: the baseline (0804cfe) and this tree, same call.
set -u
export FERROCX_REQUIRE_GPU=1
nvidia-cuda-mps-control -d && echo "MPS started"
for who in base bin; do
  echo "== $who"
  FXTEST_WORKER=gpu-run/$who/fxtest-worker timeout 250 gpu-run/$who/device-tests --test-threads=1 ce_runs_mid_calls_as_one_simple_kernel 2>&1 | tee $OUT/simple-$who.log | grep -E "^test |test result|FAIL case" | cut -c1-300
done
echo quit | nvidia-cuda-mps-control
