#!/usr/bin/env bash
# devnet: tests; put+signal latency vs fxperf sendrecv; failover cost; MoE device vs host; one GPU, MPS.
set -u
B=gpu-run/bin
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
nvidia-cuda-mps-control -d && echo "MPS started"
timeout 300 $B/device-tests --test-threads=1 --nocapture devnet 2>&1 | tee $OUT/devnet-tests.log | grep -E "^test |PASS|FAIL|test result" | grep -v DESCRIBE | cut -c1-250
SIZES=8,64,512,4096,32768,262144,1048576
echo "== pingpong"
timeout 120 $B/fxrun -n 2 -- $B/fxtest-worker devnet-pingpong 1000 $SIZES 2>&1 | grep -E "PASS|rror" | tee $OUT/pingpong.log
echo "== fxperf sendrecv (the host-initiated path, same GPU, same run)"
timeout 120 $B/fxperf --np 2 --mem cuda -b 8 -e 1M -f 8 -n 1000 -w 50 sendrecv 2>&1 | tail -12 | tee $OUT/fxperf-sendrecv.log
for T in 5 20; do
  plans=""; for j in $(seq 0 19); do plans="$plans;path=primary,after=$((j*10)),count=1,drop"; done
  echo "== failover cost T=${T}ms"
  FERROCX_IBGDA_TIMEOUT=${T}ms FERROCX_IBGDA_RECOVERY=$((3*T))ms timeout 60 $B/fxrun -n 2 -- $B/fxtest-worker devnet-ring 20 10 4096 2>&1 | grep -E "PASS|rror" | tee -a $OUT/failover.log
  FERROCX_IBGDA_FAULT="${plans#;}" FERROCX_IBGDA_TIMEOUT=${T}ms FERROCX_IBGDA_RECOVERY=$((3*T))ms timeout 60 $B/fxrun -n 2 -- $B/fxtest-worker devnet-ring 20 10 4096 --faults 2>&1 | grep -E "PASS|rror" | tee -a $OUT/failover.log
done
for np in 2 3; do
  for cfg in "50 128 2048 2" "50 512 7168 8"; do
    for mode in "" "--host"; do
      echo "== moe np $np $cfg $mode"
      timeout 120 $B/fxrun -n $np -- $B/fxtest-worker devnet-moe $cfg --bench $mode 2>&1 | grep -E "PASS|rror" | tee -a $OUT/moe-bench.log
    done
  done
done
echo quit | nvidia-cuda-mps-control
