#!/usr/bin/env bash
# Session 11, call 4 (2 GPUs): why the drop-in's alltoall blocks (FERROCX_NCCL_BLOCKING=1
# waits for a stream only after a call counted host-bound): the new debug lines
# (ferrocx::device "may wait for a host thread: why", ferrocx::nccl "waiting for stream")
# for alltoall and sendrecv through nccl-tests, and fxperf alltoall_sends.
set -u
O=$OUT/r; mkdir -p $O/m
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
FERROCX_DEBUG="ferrocx::device=debug,ferrocx::nccl=debug" timeout 60 $B/fxperf --np 2 --mem cuda -b 32 -e 32 -n 5 -w 1 -c 1 alltoall_sends > $O/fxperf-debug.log 2>&1; echo "fxperf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=2 SIZES="-b 32 -e 32" ITERS="-n 5 -w 1" MPI_BENCHES="alltoall" STEP_TIMEOUT=60 bash scripts/gpu-check.sh $B $O/m mpi > $O/console-m.txt 2>&1; echo "mpi rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
SRC=gpu-run/nccl-tests/build-mpi-ferrocx; D=$(cd gpu-run/nccl && pwd)
export FERROCX_DEBUG="ferrocx::device=debug,ferrocx::nccl=debug"
for b in alltoall sendrecv all_reduce; do
  timeout 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH=$D/lib -x NCCL_NVLS_ENABLE -x FERROCX_DEBUG $SRC/${b}_perf -b 32 -e 32 -n 5 -w 1 -c 1 -g 1 > $O/m/debug-$b.log 2>&1; echo "$b rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
unset FERROCX_DEBUG
for b in alltoall sendrecv; do
  for bl in 1 0; do
    FERROCX_NCCL_BLOCKING=$bl timeout 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH=$D/lib -x NCCL_NVLS_ENABLE -x FERROCX_NCCL_BLOCKING $SRC/${b}_perf -b 32 -e 512K -f 16 -n 1000 -w 100 -c 1 -g 1 > $O/m/time-$b-blocking$bl.log 2>&1
  done
done
timeout 60 $B/fxperf --np 2 --mem cuda -b 32 -e 512K -f 16 -n 1000 -w 100 -c 1 alltoall_sends > $O/m/time-fxperf-alltoall_sends.log 2>&1
timeout 60 $B/fxperf --np 2 --mem cuda -b 32 -e 512K -f 16 -n 1000 -w 100 -c 1 sendrecv > $O/m/time-fxperf-sendrecv.log 2>&1
rm -f $O/m/mpi-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for f in $O/fxperf-debug.log $O/m/debug-*.log; do echo "== $(basename $f): $(grep -c 'may wait' $f) host-bound, $(grep -c 'waiting for stream' $f) waits"; grep -h "may wait\|waiting for" $f | sed 's/.*ferrocx::/ferrocx::/' | sort | uniq -c | head -5; done
for f in $O/m/time-*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; done
