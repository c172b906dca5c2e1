#!/usr/bin/env bash
# Session 26, call 1 (4 GPUs): session 24's review fixes on GPUs (rooted calls whose
# root's own buffer is outside windows; copy collectives on windows; gather/scatter as
# kernels, at 2 and 4 ranks), then the whole 4-rank table 8 B-1 GiB next to NCCL -g 4,
# the 2-rank rows of all_reduce and alltoall on GPUs 0,1 for 2 -> 4 scaling, and ce's
# copy collectives on windows at 4 ranks next to NCCL's CE collectives (-R 2 -x 2).
set -u
O=$OUT/r; mkdir -p $O/t $O/p4 $O/p2 $O/ce4
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
timeout 100 $B/fxperf --np 4 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
echo "prime rc=$? $((SECONDS-T0))s" >> $S
for t in ce_runs_rooted_calls_whose_roots_own_buffer_is_outside_windows ce_runs_the_copy_collectives_on_windows_2_and_4_ranks ce_runs_mid_calls_as_one_simple_kernel ce_runs_small_calls_as_one_ll_kernel; do
  t1=$SECONDS
  FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 150 $B/device-tests --exact $t --test-threads 1 > $O/t/$t.log 2>&1
  echo "$t rc=$? $((SECONDS - t1)) s" >> $S
done
echo "tests done $((SECONDS-T0))s" >> $S
NP=4 SIZES="-b 8 -e 1G -f 2" ITERS="-n 20 -w 5" STEP_TIMEOUT=120 \
  timeout 260 bash scripts/gpu-check.sh $B $O/p4 perf nccl > $O/console-p4.txt 2>&1
echo "p4 rc=$? $((SECONDS-T0))s" >> $S
CUDA_VISIBLE_DEVICES=0,1 NP=2 SIZES="-b 1M -e 1G -f 2" ITERS="-n 20 -w 5" PERF_COLLS="all_reduce alltoall" STEP_TIMEOUT=60 \
  timeout 100 bash scripts/gpu-check.sh $B $O/p2 perf nccl > $O/console-p2.txt 2>&1
echo "p2 rc=$? $((SECONDS-T0))s" >> $S
left=$((570 - SECONDS + T0))
[ $left -gt 60 ] && NP=4 SIZES="-b 8 -e 1G -f 4" ITERS="-n 20 -w 5" PERF_COLLS="alltoall all_gather broadcast" STEP_TIMEOUT=60 \
  timeout $left bash scripts/gpu-check.sh $B $O/ce4 perf-win nccl-ce > $O/console-ce4.txt 2>&1
echo "ce4 rc=$? $((SECONDS-T0))s" >> $S
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $S; head -5 $O/gpus.txt
grep -h "rc=[1-9]\|wrong [1-9]" $O/p4/summary.txt $O/p2/summary.txt $O/ce4/summary.txt | head
for f in $O/t/*.log; do echo "== $f"; grep -E "test result|panicked|FAILED" $f | head -5; done
