#!/usr/bin/env bash
# Session 24, call 5 (2 x H200): gather and scatter as the LL kernel (new mode for
# gather), checked; then ce on windows / staged against NCCL's CE collectives; scatter
# on the Simple kernel forced against the routes (to set its row).
set -u
O=$OUT/r; mkdir -p $O; S=$O/summary.txt; : > $S; T0=$SECONDS
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
timeout 120 $B/core-tests --exact device::kernel_tests::sources_compile_with_nvrtc > $O/nvrtc.log 2>&1; echo "nvrtc rc=$?" >> $S
for t in ce_runs_small_calls_as_one_ll_kernel ce_finds_mismatched_calls ce_runs_the_copy_collectives_staged_2_and_4_ranks; do
  t1=$SECONDS
  FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 200 $B/device-tests --exact $t --test-threads 1 > $O/test.$t.log 2>&1
  echo "$t rc=$? $((SECONDS - t1)) s" >> $S
done
echo "tests: $((SECONDS - T0)) s" >> $S
P=$O/perf; mkdir -p $P
for c in gather scatter; do
  timeout 100 $B/fxperf --np 2 --mem cuda -R 2 -b 8 -e 1G -f 4 -n 20 -w 5 -c 1 $c > $P/fxperf-win-$c.log 2>&1; echo "fx win $c rc=$?" >> $S
  timeout 100 $B/fxperf --np 2 --mem cuda -R 1 -b 8 -e 16M -f 4 -n 50 -w 5 -c 1 $c > $P/fxperf-staged-$c.log 2>&1; echo "fx staged $c rc=$?" >> $S
done
for r in 1 2; do
  FERROCX_CE_SIMPLE_BYTES=1G timeout 100 $B/fxperf --np 2 --mem cuda -R 2 -b 2M -e 1G -f 2 -n 20 -w 5 -c 1 scatter > $P/fxperf-win-scatter-simple.$r.log 2>&1; echo "simple scatter $r rc=$?" >> $S
  timeout 100 $B/fxperf --np 2 --mem cuda -R 2 -b 2M -e 1G -f 2 -n 20 -w 5 -c 1 scatter > $P/fxperf-win-scatter-routes.$r.log 2>&1; echo "routes scatter $r rc=$?" >> $S
done
echo "fxperf: $((SECONDS - T0)) s" >> $S
SRC=gpu-run/nccl-tests
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1; echo "nccl build rc=$?" >> $S
for c in gather scatter; do
  timeout 60 $SRC/build/${c}_perf -b 8 -e 1G -f 4 -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $P/nccl-ce-$c.log 2>&1; echo "nccl-ce $c rc=$?" >> $S
  timeout 60 $SRC/build/${c}_perf -b 2M -e 1G -f 2 -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $P/nccl-ce2-$c.log 2>&1
done
echo "end: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
cd $P; for f in fxperf-*.log nccl-ce*.log; do printf "%-36s" $f; grep -v '^#' $f | grep -E '^ +[0-9]' | awk '{printf " %s:%s/%s", $1, $6, $10}'; echo; done
