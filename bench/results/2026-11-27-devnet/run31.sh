#!/usr/bin/env bash
# devnet after the posting fixes: tests, put rates and latency, the MoE bench; one GPU, MPS.
set -u
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
nvidia-cuda-mps-control -d && echo "MPS started"
timeout 300 $B/device-tests --test-threads=1 --nocapture devnet 2>&1 | tee $OUT/devnet-tests.log | grep -E "^test |PASS|FAIL|test result" | grep -v DESCRIBE | cut -c1-300
for args in "200 1 8" "4 300 8" "4 300 4096" "4 300 65536" "4 300 1048576"; do
  for slots in 16 256; do
    echo "== ring $args slots $slots"
    FERROCX_IBGDA_SLOTS=$slots timeout 60 $B/fxrun -n 2 -- $B/fxtest-worker devnet-ring $args 2>&1 | grep -E "PASS|rror" | tee -a $OUT/ring-bench.log
  done
done
for np in 2 3; do
  for cfg in "50 128 2048 2" "50 512 7168 8"; do
    echo "== moe np $np $cfg"
    timeout 120 $B/fxrun -n $np -- $B/fxtest-worker devnet-moe $cfg --bench 2>&1 | grep -E "PASS|rror" | tee -a $OUT/moe-bench.log
  done
done
echo quit | nvidia-cuda-mps-control
