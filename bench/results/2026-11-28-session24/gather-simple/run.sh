#!/usr/bin/env bash
# Session 24, call 8 (2 x H200): gather on the Simple kernel (root-gather mode): checked
# by fxperf at every size forced onto it, the Simple device test with gather and scatter;
# then the kernel forced against the routes (two alternations) beside NCCL's CE gather.
set -u
O=$OUT/r; mkdir -p $O; S=$O/summary.txt; : > $S; T0=$SECONDS
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
timeout 200 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
P=$O/perf; mkdir -p $P
for r in 1 2; do
  FERROCX_CE_SIMPLE_BYTES=1G timeout 100 $B/fxperf --np 2 --mem cuda -R 2 -b 2M -e 1G -f 2 -n 20 -w 5 -c 1 gather > $P/gather-simple.$r.log 2>&1; echo "simple $r rc=$?" >> $S
  FERROCX_CE_SIMPLE_BYTES=0 timeout 100 $B/fxperf --np 2 --mem cuda -R 2 -b 2M -e 1G -f 2 -n 20 -w 5 -c 1 gather > $P/gather-routes.$r.log 2>&1; echo "routes $r rc=$?" >> $S
done
FERROCX_CE_SIMPLE_BYTES=1G timeout 60 $B/fxperf --np 2 --mem cuda -R 1 -b 2M -e 32M -f 2 -n 10 -w 2 -c 1 gather > $P/gather-simple-staged.log 2>&1; echo "simple staged rc=$?" >> $S
echo "fxperf: $((SECONDS - T0)) s" >> $S
t1=$SECONDS
FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 120 $B/device-tests --exact ce_runs_mid_calls_as_one_simple_kernel --test-threads 1 > $O/test.simple.log 2>&1
echo "simple test rc=$? $((SECONDS - t1)) s" >> $S
SRC=gpu-run/nccl-tests
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1; echo "nccl build rc=$?" >> $S
timeout 60 $SRC/build/gather_perf -b 2M -e 1G -f 2 -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $P/nccl-ce-gather.log 2>&1; echo "nccl-ce rc=$?" >> $S
echo "end: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
cd $P; for f in *.log; do printf "%-28s" $f; grep -v '^#' $f | grep -E '^ +[0-9]' | awk '{printf " %s:%s/%s", $1/1048576, $6, $10}'; echo; done
grep -m3 -E "MISMATCH|panicked" $O/test.simple.log
