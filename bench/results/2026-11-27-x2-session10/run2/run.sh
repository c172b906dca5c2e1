#!/usr/bin/env bash
# Session 10, call 2 (2 GPUs): run56 again after the launcher's check admits a rank's
# own block; fxperf registered and unregistered (nccl-tests registers nothing) next
# to the drop-in under MPI; the device tests of the change.
set -u
O=$OUT/r; mkdir -p $O/a
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
C="sendrecv alltoall all_reduce all_gather broadcast"
NP=2 SIZES="-b 8 -e 32M -f 4" ITERS="-n 200 -w 20" PERF_COLLS="$C" MPI_BENCHES="$C" STEP_TIMEOUT=80 bash scripts/gpu-check.sh $B $O/p perf perf-unreg mpi > $O/console.txt 2>&1; echo "perf mpi rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
export FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1
for t in ce_runs_device_sends_as_one_kernel matrix_over_p2p mix_on_device; do
  timeout $((560 - SECONDS + T0)) $B/device-tests $t --nocapture --test-threads 1 > $O/a/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for t in $O/a/*.log; do grep -E "^test |test result|panicked|FAILED|FAIL" $t | cut -c1-300 | head -5; done
for b in $C; do echo "== $b fxperf / unreg / drop-in (us, out of place/in place)"; for f in $O/p/fxperf-$b.log $O/p/fxperf-$b-unreg.log $O/p/dropin-mpi-$b.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $10}'; echo; done; done
grep -h "failure\|error" $O/p/dropin-mpi-*.log | head -5
