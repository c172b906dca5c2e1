#!/usr/bin/env bash
# Two GPUs: nccl-tests sendrecv/alltoall through the drop-in under MPI (grouped sends and receives now reach ce's point-to-point kernel), next to fxperf and NCCL.
set -u
O=$OUT/r; mkdir -p $O
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=16
NP=2 SIZES="-b 8 -e 64M -f 4" PERF_COLLS="sendrecv alltoall" MPI_BENCHES="sendrecv alltoall" STEP_TIMEOUT=60 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl mpi > $O/console.txt 2>&1; echo "rc=$?" > $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; cat $O/p/summary.txt 2>/dev/null | head -20
for f in fxperf-sendrecv nccl-sendrecv dropin-mpi-sendrecv fxperf-alltoall nccl-alltoall dropin-mpi-alltoall; do echo "== $f"; grep -E "^ +[0-9]" $O/p/$f.log | awk '{print $1, $6}' | tr '\n' ' '; echo; done
