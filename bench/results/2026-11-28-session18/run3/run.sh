#!/usr/bin/env bash
# Session 18, call 3: where the NCCL drop-in's extra 1-3 us per small broadcast and
# all_reduce go (FERROCX_SPANS=1: host time per step, fxperf and nccl-tests under
# mpirun on the drop-in, 8 B, 20000 calls, s/); then the whole 2-rank table once more
# (p1/ 8 B-8 MiB at -n 200, p2/ 16 MiB-1 GiB at -n 40).
set -u
O=$OUT/r; mkdir -p $O/s $O/p1 $O/p2
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
SRC=$PWD/gpu-run/nccl-tests; D=$PWD/gpu-run/nccl
INC="$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')"; MH="$(dirname "${INC:-/usr/include/x}")"
make -C $SRC -j 16 MPI=1 MPI_HOME="$MH" BUILDDIR=$SRC/build-mpi-ferrocx NCCL_HOME=$D CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/s/mpi-build.log 2>&1
echo "mpi-build rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for rep in 1 2; do
for c in broadcast all_reduce sendrecv; do
  FERROCX_SPANS=1 timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 20000 -w 200 -c 1 $c > $O/s/fx-$c-$rep.log 2>&1
  echo "fx $c rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  timeout 60 mpirun --allow-run-as-root --bind-to none -np 2 -x LD_LIBRARY_PATH=$D/lib -x FERROCX_SPANS=1 -x FERROCX_TIMEOUT -x NCCL_NVLS_ENABLE \
    $SRC/build-mpi-ferrocx/${c}_perf -b 8 -e 8 -n 20000 -w 200 -c 1 -R 1 -g 1 > $O/s/dropin-$c-$rep.log 2>&1
  echo "dropin $c rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
done
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 200 -w 20" SIZES="-b 8 -e 8M -f 2" STEP_TIMEOUT=60 timeout 200 bash scripts/gpu-check.sh $B $O/p1 perf nccl > $O/console-p1.txt 2>&1; echo "perf1 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
left=$((570 - SECONDS + T0))
[ $left -gt 60 ] && CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 40 -w 5" SIZES="-b 16M -e 1G -f 2" STEP_TIMEOUT=60 timeout $left bash scripts/gpu-check.sh $B $O/p2 perf nccl > $O/console-p2.txt 2>&1; echo "perf2 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -h "rc=[1-9]\|wrong" $O/p*/summary.txt | head
for f in $O/s/fx-*-1.log $O/s/dropin-*-1.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | head -2; grep -A14 "host time per span" $f | head -15; done
