#!/usr/bin/env bash
# Session 22: where the drop-in's per-call cost goes at 8 B (FERROCX_SPANS=1: the drop-in's
# whole call, its pointer query and blocking check, the core's device collective),
# fxperf (--bind share, the default, and none) against nccl-tests on the drop-in
# (mpirun --bind-to none and core), all_reduce and broadcast, alternated twice; -R 0.
set -u
O=$OUT/r; mkdir -p $O
A=$PWD/gpu-run/A; D=$A/nccl
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 FERROCX_SPANS=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; nproc; lscpu | grep -i 'model name'; } > $O/gpus.txt 2>&1
SRC=$PWD/gpu-run/nccl-tests
INC="$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')"; MH="$(dirname "${INC:-/usr/include/x}")"
make -C $SRC -j 16 MPI=1 MPI_HOME="$MH" BUILDDIR=$SRC/build-A NCCL_HOME=$D CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/mpi-build.log 2>&1
echo "mpi-build rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
N="-n 20000 -w 1000"
for rep in 1 2; do
for c in all_reduce broadcast; do
  for bind in share none; do
    timeout 60 $A/fxperf --np 2 --mem cuda --bind $bind -b 8 -e 8 $N -c 1 -R 0 $c > $O/fx-$c-$bind-$rep.log 2>&1
    echo "fx-$c-$bind-$rep rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
  for bind in none core; do
    timeout 60 mpirun --allow-run-as-root --bind-to $bind -np 2 -x LD_LIBRARY_PATH=$D/lib -x FERROCX_TIMEOUT -x NCCL_NVLS_ENABLE -x FERROCX_SPANS \
      $SRC/build-A/${c}_perf -b 8 -e 8 $N -c 1 -R 0 -g 1 > $O/dropin-$c-$bind-$rep.log 2>&1
    echo "dropin-$c-$bind-$rep rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -3 $O/gpus.txt
for f in $O/fx-*.log $O/dropin-*.log; do echo "== $(basename $f) $(grep -E '^ +8 ' $f | head -1)"; grep -E 'nccl:|core: device collective|core: buffer|core: capture|core: bids|core: plugin launch|ce: collective launch|sdk: cuLaunch' $f | head -24; done
