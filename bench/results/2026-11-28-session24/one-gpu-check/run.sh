#!/usr/bin/env bash
# Session 24, call 6 (1 x H200, ranks under MPS): correctness of gather/scatter as kernels
# (in place fixed), scatter on the Simple kernel, local copies on a side stream.
set -u
O=$OUT/r; mkdir -p $O; S=$O/summary.txt; : > $S; T0=$SECONDS
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
nvidia-cuda-mps-control -d; sleep 1
timeout 200 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
for t in ce_runs_small_calls_as_one_ll_kernel ce_runs_the_copy_collectives_on_windows_2_and_4_ranks ce_runs_the_copy_collectives_staged_2_and_4_ranks ce_in_a_cuda_graph_replayed_1000_times ce_runs_mid_calls_as_one_simple_kernel; do
  t1=$SECONDS
  FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 170 $B/device-tests --exact $t --test-threads 1 > $O/test.$t.log 2>&1
  echo "$t rc=$? $((SECONDS - t1)) s" >> $S
done
echo "tests: $((SECONDS - T0)) s" >> $S
P=$O/perf; mkdir -p $P
for c in gather scatter; do
  timeout 60 $B/fxperf --np 2 --mem cuda -R 2 -b 8 -e 256M -f 4 -n 5 -w 2 -c 1 $c > $P/fxperf-win-$c.log 2>&1; echo "fx win $c rc=$?" >> $S
  timeout 60 $B/fxperf --np 2 --mem cuda -R 1 -b 8 -e 16M -f 4 -n 5 -w 2 -c 1 $c > $P/fxperf-staged-$c.log 2>&1; echo "fx staged $c rc=$?" >> $S
done
echo quit | nvidia-cuda-mps-control
echo "end: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
for f in $O/test.*.log; do grep -m3 -E "MISMATCH|panicked|FAILED" $f; done
