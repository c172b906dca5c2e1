#!/usr/bin/env bash
# Session 20, the last call (2 GPUs): (1) the device tests on the current tree (the
# engine's connections changed: `device ce p2p kernels`), t/; (2) where the drop-in's
# extra per small call comes from, s/: nccl-tests moves its buffers by the message size
# every iteration when -e > -b (a new address each call), never at -b = -e. Alternated
# twice: fxperf -b 8 -e 8, the drop-in at -b 8 -e 8 (no shift), at -b 8 -e 64M -f 8388608
# (its 8 B row shifts), and at -b 8 -e 8 with FERROCX_NCCL_BLOCKING=0; -R 0 everywhere.
set -u
O=$OUT/r; mkdir -p $O/t $O/s
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
NP=2 STEP_TIMEOUT=200 timeout 330 bash scripts/gpu-check.sh $B $O/t kernels p2p device ce > $O/console-t.txt 2>&1; echo "tests rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
SRC=$PWD/gpu-run/nccl-tests; D=$PWD/gpu-run/nccl
INC="$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')"; MH="$(dirname "${INC:-/usr/include/x}")"
make -C $SRC -j 16 MPI=1 MPI_HOME="$MH" BUILDDIR=$SRC/build-mpi-ferrocx NCCL_HOME=$D CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/s/mpi-build.log 2>&1
echo "mpi-build rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
dropin() {  # dropin LOG BENCH ARGS...
  local log=$1 b=$2; shift 2
  timeout 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH=$D/lib -x FERROCX_TIMEOUT -x NCCL_NVLS_ENABLE \
    -x FERROCX_NCCL_BLOCKING="${FERROCX_NCCL_BLOCKING:-1}" $SRC/build-mpi-ferrocx/${b}_perf "$@" -c 1 -R 0 -g 1 > $O/s/$log 2>&1
  echo "$log rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
for c in broadcast all_reduce; do
  timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 5000 -w 500 -c 1 -R 0 $c > $O/s/fx-$c-$rep.log 2>&1
  echo "fx-$c-$rep rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  dropin dropin-$c-noshift-$rep.log $c -b 8 -e 8 -n 5000 -w 500
  dropin dropin-$c-shift-$rep.log $c -b 8 -e 64M -f 8388608 -n 5000 -w 500
  FERROCX_NCCL_BLOCKING=0 dropin dropin-$c-nonblocking-$rep.log $c -b 8 -e 8 -n 5000 -w 500
done
done
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -h "rc=" $O/t/summary.txt | tr '\n' ' '; echo
for f in $O/s/*-1.log $O/s/*-2.log; do printf "%s " "$(basename $f)"; grep -E "^ +8 " $f | head -1; done
