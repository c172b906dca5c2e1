#!/usr/bin/env bash
# Session 10, call 1 (2 GPUs): the drop-in's per-call cost after (a) ce copies a group's
# sends to the rank itself inside its point-to-point kernel (FX_COLL_CAP_P2P_SELF) and
# (b) one cuPointerGetAttributes per buffer instead of seven driver queries per op;
# nccl-tests (MPI, one process per GPU) on the drop-in next to fxperf; then the device
# tests those changes touch.
set -u
O=$OUT/r; mkdir -p $O/a
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
NP=2 SIZES="-b 8 -e 32M -f 4" ITERS="-n 200 -w 20" PERF_COLLS="sendrecv alltoall all_reduce all_gather broadcast" MPI_BENCHES="sendrecv alltoall all_reduce all_gather broadcast" STEP_TIMEOUT=80 bash scripts/gpu-check.sh $B $O/p perf mpi > $O/console.txt 2>&1; echo "perf mpi rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
for t in ce_runs_device_sends_as_one_kernel matrix_over_p2p the_cores_device_sends_and_receives_are_checked ce_names_a_send_that_meets; do
  timeout $((560 - SECONDS + T0)) $B/device-tests $t --nocapture --test-threads 1 > $O/a/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for t in $O/a/*.log; do grep -E "^test |test result|panicked|FAILED" $t | cut -c1-200 | head -5; done
for b in sendrecv alltoall all_reduce all_gather broadcast; do echo "== $b fxperf / drop-in (us, out of place | in place)"; for f in $O/p/fxperf-$b.log $O/p/dropin-mpi-$b.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $10}'; echo; done; done
