#!/usr/bin/env bash
# Session 24, call 4 (2 x H200): ce's watchdog after the retirement change (device tests
# that time out, kill, mismatch and replay), then the copy collectives on symmetric
# windows: ce (fxperf -R 2) against NCCL's copy-engine collectives (-R 2 -x 2) and NCCL's
# kernels (broadcast), 8 B - 1 GiB.
set -u
O=$OUT/r; mkdir -p $O; S=$O/summary.txt; : > $S; T0=$SECONDS
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L > $O/machine.txt 2>&1
timeout 200 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
for t in ce_finds_mismatched_calls ce_names_a_rank_killed_mid_collective ce_ll_kernel_ends_when_a_rank_never_calls ce_runs_the_copy_collectives_on_windows_2_and_4_ranks ce_in_a_cuda_graph_replayed_1000_times ce_runs_small_calls_as_one_ll_kernel; do
  t1=$SECONDS
  FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 150 $B/device-tests --exact $t --test-threads 1 > $O/test.$t.log 2>&1
  echo "$t rc=$? $((SECONDS - t1)) s" >> $S
done
echo "tests: $((SECONDS - T0)) s" >> $S
P=$O/perf; mkdir -p $P
for c in alltoall all_gather gather scatter broadcast; do
  timeout 120 $B/fxperf --np 2 --mem cuda -R 2 -b 8 -e 1G -f 4 -n 20 -w 5 -c 1 $c > $P/fxperf-win-$c.log 2>&1
  echo "fxperf $c rc=$?" >> $S
done
echo "fxperf: $((SECONDS - T0)) s" >> $S
NP=2 SIZES="-b 8 -e 1G -f 4" ITERS="-n 20 -w 5" PERF_COLLS="broadcast" STEP_TIMEOUT=150 \
  timeout 330 bash scripts/gpu-check.sh $B $P nccl nccl-ce > $O/gpu-console.txt 2>&1
echo "nccl: rc=$? $((SECONDS - T0)) s" >> $S
rm -f $P/*build*.log
tar czf $OUT/logs.tgz -C $O .
cat $S
