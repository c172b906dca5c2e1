#!/usr/bin/env bash
# Session 11, call 1 (2 GPUs): the point-to-point kernel's LL lines. fxperf sendrecv
# 8 B-4 MiB with FERROCX_CE_P2P_LL_BYTES 0 (chunks only, as before), 64K, 512K (the new
# default) and 1M, NCCL's sendrecv in the same call, the drop-in's alltoall and sendrecv
# under MPI; then the device tests of the change (sizes, mismatches across formats).
set -u
O=$OUT/r; mkdir -p $O/a $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
S="-b 8 -e 4M -f 4"
for ll in 0 64K 512K 1M; do
  FERROCX_CE_P2P_LL_BYTES=$ll timeout 90 $B/fxperf --np 2 --mem cuda $S -n 200 -w 20 -c 1 sendrecv > $O/p/fxperf-sendrecv-ll$ll.log 2>&1
  echo "fxperf ll=$ll rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
NP=2 SIZES="$S" ITERS="-n 200 -w 20" PERF_COLLS="sendrecv" MPI_BENCHES="alltoall sendrecv" STEP_TIMEOUT=80 bash scripts/gpu-check.sh $B $O/p nccl mpi > $O/console.txt 2>&1; echo "nccl mpi rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
export FXTEST_WORKER=$B/fxtest-worker
for t in ce_names_a_send_that_meets_a_receive_of_another_size ce_runs_device_sends_as_one_kernel mix_on_device; do
  left=$((560 - SECONDS + T0)); [ $left -lt 20 ] && break
  timeout $left $B/device-tests $t --nocapture --test-threads 1 > $O/a/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for t in $O/a/*.log; do grep -E "^test |test result|panicked|FAILED|FAIL" $t | cut -c1-300 | head -5; done
for f in $O/p/fxperf-sendrecv-ll*.log $O/p/nccl-sendrecv.log $O/p/dropin-mpi-sendrecv.log $O/p/dropin-mpi-alltoall.log; do echo "== $f"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; done
grep -h "error\|Error\|panicked" $O/p/*.log | head -8
