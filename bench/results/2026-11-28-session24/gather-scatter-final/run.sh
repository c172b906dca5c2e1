#!/usr/bin/env bash
# Session 24, call 6 (2 x H200): gather/scatter in place fixed (non-roots' blocks at the
# start), scatter on the Simple kernel to 32 MiB blocks, local copies on a side stream;
# the device tests that cover them, then gather/scatter against NCCL's CE collectives.
set -u
O=$OUT/r; mkdir -p $O; S=$O/summary.txt; : > $S; T0=$SECONDS
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
timeout 200 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
for t in ce_runs_small_calls_as_one_ll_kernel ce_runs_the_copy_collectives_on_windows_2_and_4_ranks; do
  t1=$SECONDS
  FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 100 $B/device-tests --exact $t --test-threads 1 > $O/test.$t.log 2>&1
  echo "$t rc=$? $((SECONDS - t1)) s" >> $S
done
echo "tests: $((SECONDS - T0)) s" >> $S
P=$O/perf; mkdir -p $P
for c in gather scatter; do
  timeout 100 $B/fxperf --np 2 --mem cuda -R 2 -b 8 -e 1G -f 4 -n 20 -w 5 -c 1 $c > $P/fxperf-win-$c.log 2>&1; echo "fx win $c rc=$?" >> $S
  timeout 100 $B/fxperf --np 2 --mem cuda -R 2 -b 64M -e 1G -f 2 -n 20 -w 5 -c 1 $c > $P/fxperf-win2-$c.log 2>&1; echo "fx win2 $c rc=$?" >> $S
  timeout 100 $B/fxperf --np 2 --mem cuda -R 1 -b 8 -e 16M -f 4 -n 50 -w 5 -c 1 $c > $P/fxperf-staged-$c.log 2>&1; echo "fx staged $c rc=$?" >> $S
done
echo "fxperf: $((SECONDS - T0)) s" >> $S
SRC=gpu-run/nccl-tests
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1; echo "nccl build rc=$?" >> $S
for c in gather scatter; do
  timeout 60 $SRC/build/${c}_perf -b 8 -e 1G -f 4 -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $P/nccl-ce-$c.log 2>&1; echo "nccl-ce $c rc=$?" >> $S
  timeout 60 $SRC/build/${c}_perf -b 64M -e 1G -f 2 -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $P/nccl-ce2-$c.log 2>&1
done
echo "end: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
cd $P; for f in fxperf-*.log nccl-ce*.log; do printf "%-26s" $f; grep -v '^#' $f | grep -E '^ +[0-9]' | awk '{printf " %s:%s/%s", $1, $6, $10}'; echo; done
grep -h "wrong\|#wrong" $P/fxperf-*.log | head -3
