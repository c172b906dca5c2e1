#!/usr/bin/env bash
# Session 23, call 1 (one H200, ranks sharing it under MPS): the GPU check of session 22's
# last, unverified tree (review fix c990fee, refactor e27ceec): the core's and ce's device
# tests, fxperf -c 1 on device memory, nccl-tests (MPI) on the drop-in, 2 ranks on GPU 0.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0
B=gpu-run/bin; D=$(pwd)/gpu-run/nccl
T0=$SECONDS; S=$O/summary.txt; : > $S
step() { local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout $lim "$@" > $O/$name.log 2>&1; local rc=$?
  echo "$name: rc=$rc $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S; }
nvidia-smi -L > $O/gpus.txt 2>&1
nvidia-cuda-mps-control -d; sleep 1
export FXTEST_WORKER=$B/fxtest-worker CUDA_VISIBLE_DEVICES=0
for t in smoke_over_p2p_and_shm matrix_over_p2p matrix_staged_over_shm mix_on_device \
  killed_rank_during_device_transfers the_cores_device_sends_and_receives_are_checked \
  device_groups_make_their_connections_as_they_go ce_runs_small_calls_as_one_ll_kernel \
  ce_finds_mismatched_calls ce_runs_the_reductions_2_and_4_ranks; do
  step $t 240 $B/device-tests --exact $t --nocapture --test-threads 1
done
for c in all_reduce all_gather reduce_scatter alltoall broadcast sendrecv; do
  step fx-$c 120 $B/fxperf --np 2 --mem cuda -b 8 -e 64M -f 8 -n 20 -w 5 -c 1 $c
done
SRC=$(pwd)/gpu-run/nccl-tests
INC="$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')"; MH="$(dirname "${INC:-/usr/include/x}")"
step mpi-build 300 make -C $SRC -j 16 MPI=1 MPI_HOME="$MH" BUILDDIR=$SRC/build-mpi NCCL_HOME=$D \
  CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90
for b in all_reduce all_gather alltoall broadcast reduce_scatter reduce sendrecv; do
  step dropin-$b 120 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH=$D/lib \
    -x NCCL_TESTS_DEVICE=0 -x FERROCX_TIMEOUT -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE \
    $SRC/build-mpi/${b}_perf -b 8 -e 64M -f 8 -n 20 -w 5 -c 1 -g 1
done
echo quit | nvidia-cuda-mps-control
echo "total: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w}' $O/fx-*.log
grep -h "Out of bounds\|#wrong\|Avg bus" $O/dropin-*.log | head -20
grep -h "test result" $O/*.log
