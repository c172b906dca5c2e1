#!/usr/bin/env bash
# Session 22, call 3 (4 GPUs): call 2 (x2-dropin-fast/run.sh) at 4 ranks: nccl-tests -c 1 on B, every
# collective 8 B..64 MiB in and out of place; 8 B all_reduce and broadcast, A (the tree
# before), B (this change) and fxperf alternated twice; spans on B once.

set -u
O=$OUT/r; mkdir -p $O/c
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 FERROCX_SPANS=0
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; nproc; } > $O/gpus.txt 2>&1
SRC=$PWD/gpu-run/nccl-tests
INC="$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')"; MH="$(dirname "${INC:-/usr/include/x}")"
for v in A B; do
  make -C $SRC -j 16 MPI=1 MPI_HOME="$MH" BUILDDIR=$SRC/build-$v NCCL_HOME=$PWD/gpu-run/$v/nccl CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/build-$v.log 2>&1
  echo "build-$v rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
nt() {  # nt VARIANT LOG BENCH ARGS...
  local v=$1 log=$2 b=$3; shift 3
  timeout 90 mpirun --allow-run-as-root --bind-to none -np 4 -x LD_LIBRARY_PATH=$PWD/gpu-run/$v/nccl/lib -x FERROCX_TIMEOUT -x NCCL_NVLS_ENABLE -x FERROCX_SPANS \
    $SRC/build-$v/${b}_perf "$@" -g 1 > $log 2>&1
  echo "$(basename $log) rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for b in all_reduce broadcast all_gather reduce_scatter alltoall sendrecv reduce; do
  nt B $O/c/$b.log $b -b 8 -e 64M -f 8 -n 20 -w 5 -c 1
done
N="-n 20000 -w 1000"
for rep in 1 2; do
for c in all_reduce broadcast; do
  timeout 60 gpu-run/B/fxperf --np 4 --mem cuda -b 8 -e 8 $N -c 1 -R 0 $c > $O/fx-$c-$rep.log 2>&1
  echo "fx-$c-$rep rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  nt A $O/A-$c-$rep.log $c -b 8 -e 8 $N -c 1 -R 0
  nt B $O/B-$c-$rep.log $c -b 8 -e 8 $N -c 1 -R 0
done
done
for c in all_reduce broadcast; do
  FERROCX_SPANS=1 nt B $O/spans-B-$c.log $c -b 8 -e 8 $N -c 1 -R 0
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt | tr '\n' ' '; echo; head -2 $O/gpus.txt
for f in $O/c/*.log; do echo "$(basename $f): $(grep -E 'wrong|Out of bounds' $f | tail -2 | tr '\n' ' ')"; done
for c in all_reduce broadcast; do for rep in 1 2; do for v in fx A B; do f=$O/$v-$c-$rep.log; printf "%s %s %s: " $c $rep $v; grep -E '^ +8 ' $f | head -1 | awk '{print $6, $10}'; done; done; done
grep -h -E 'nccl:|core: device coll' $O/spans-B-*.log
