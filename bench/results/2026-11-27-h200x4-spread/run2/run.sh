#!/usr/bin/env bash
# Two of the GPUs: the NCCL drop-in under MPI with the default FERROCX_NCCL_BLOCKING=1 (now waiting only for host-bound calls) next to fxperf and NCCL; torch.distributed on the drop-in; the core's path counted host-bound.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
NP=2 SIZES="-b 8 -e 64M -f 4" ITERS="-n 100 -w 20" PERF_COLLS="sendrecv all_reduce all_gather alltoall broadcast" MPI_BENCHES="sendrecv all_reduce all_gather alltoall broadcast" STEP_TIMEOUT=80 bash scripts/gpu-check.sh gpu-run/bin $O/p perf mpi dropin-torch > $O/console.txt 2>&1; echo "perf mpi dropin-torch rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 150 gpu-run/bin/device-tests matrix_over_p2p --nocapture --test-threads 1 > $O/a/device-core.log 2>&1; echo "device-core rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-core.log | cut -c1-160 | head; head -3 $O/gpus.txt; grep -E "rc=|dropin-torch" $O/p/summary.txt | head -30; tail -15 $O/p/dropin-torch.log
for b in sendrecv all_reduce all_gather alltoall broadcast; do echo "== $b fxperf / drop-in (us, out of place)"; for f in $O/p/fxperf-$b.log $O/p/dropin-mpi-$b.log; do grep -E "^ +[0-9]" $f | awk '{print $1, $6, $9}' | tr '\n' ' '; echo; done; done
