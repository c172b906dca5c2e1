#!/usr/bin/env bash
# Session 11, call 5 (2 GPUs): is the drop-in's 2-6 us over fxperf at small sizes the NCCL
# layer or where mpirun put the ranks? nccl-tests sendrecv/alltoall on the drop-in with
# --bind-to none (gpu-check's so far) and --map-by numa --bind-to numa, FERROCX_NCCL_BLOCKING
# 1 and 0, two alternations, next to fxperf (which binds rank i to the i-th block of CPUs);
# then the whole device test file on the final tree.
set -u
O=$OUT/r; mkdir -p $O/m
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1; nvidia-smi topo -m >> $O/gpus.txt 2>&1; lscpu | grep -i numa >> $O/gpus.txt
NP=2 SIZES="-b 32 -e 32" ITERS="-n 5 -w 1" MPI_BENCHES="alltoall" STEP_TIMEOUT=60 bash scripts/gpu-check.sh $B $O/m mpi > $O/console-m.txt 2>&1; echo "mpi build rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
SRC=gpu-run/nccl-tests/build-mpi-ferrocx; D=$(cd gpu-run/nccl && pwd)
S="-b 32 -e 512K -f 16 -n 1000 -w 100 -c 1 -g 1"
for round in 1 2; do
  for b in sendrecv alltoall; do
    for bind in none numa; do
      for bl in 1 0; do
        if [ $bind = numa ]; then BA="--map-by numa --bind-to numa"; else BA="--bind-to none"; fi
        FERROCX_NCCL_BLOCKING=$bl timeout 40 mpirun --allow-run-as-root $BA -np 2 -x LD_LIBRARY_PATH=$D/lib -x NCCL_NVLS_ENABLE -x FERROCX_NCCL_BLOCKING $SRC/${b}_perf $S > $O/m/r$round-$b-$bind-b$bl.log 2>&1
      done
    done
    fb=$b; [ $b = alltoall ] && fb=alltoall_sends
    timeout 40 $B/fxperf --np 2 --mem cuda -b 32 -e 512K -f 16 -n 1000 -w 100 -c 1 $fb > $O/m/r$round-fxperf-$fb.log 2>&1
  done
done
echo "bind rounds at $((SECONDS-T0))s" >> $O/summary.txt
export FXTEST_WORKER=$B/fxtest-worker
left=$((590 - SECONDS + T0))
timeout $left $B/device-tests --test-threads 1 > $O/device-all.log 2>&1; echo "device-all rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/m/mpi-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
grep -E "test result|FAILED|panicked" $O/device-all.log | head -8
for f in $O/m/r*.log; do echo "$(basename $f .log): $(grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}')"; done
