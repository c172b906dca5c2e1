#!/usr/bin/env bash
# Session 26, call 5 (2 GPUs): the 2-rank rows still behind NCCL's copy-engine
# collectives on windows (gather of 64 MiB-1 GiB, in-place all_gather from 128 MiB)
# against ce's knobs: gather as the Simple kernel at every size, with 128 blocks, with
# 256 KiB slots; all_gather as the kernel and with the direct mode off; NCCL CE
# (-R 2 -x 2) in the same call. fxperf -R 2 -n 20 -w 5 -c 1.
set -u
O=$OUT/r; mkdir -p $O/k $O/n
B=gpu-run/bin; SRC=gpu-run/nccl-tests
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-smi -L > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1 &
BUILD=$!
sw() {  # sw NAME COLL SIZES ENV...
  local name=$1 coll=$2 sizes=$3; shift 3
  env "$@" timeout 60 $B/fxperf --np 2 --mem cuda -R 2 $sizes -n 20 -w 5 -c 1 $coll > $O/k/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
G="-b 16M -e 1G -f 2"
for rep in 1 2; do
  sw ga-auto-$rep gather "$G"
  sw ga-kernel-$rep gather "$G" FERROCX_CE_SIMPLE_BYTES=1G
  sw ga-kernel-b128-$rep gather "$G" FERROCX_CE_SIMPLE_BYTES=1G FERROCX_CE_SIMPLE_BLOCKS=128
  sw ga-kernel-slot256k-$rep gather "$G" FERROCX_CE_SIMPLE_BYTES=1G FERROCX_CE_SIMPLE_SLOT=256K
  sw ag-auto-$rep all_gather "$G"
  sw ag-kernel-$rep all_gather "$G" FERROCX_CE_SIMPLE_BYTES=1G FERROCX_CE_DIRECT_BYTES=0
  sw ag-nodirect-$rep all_gather "$G" FERROCX_CE_DIRECT_BYTES=0
  [ $rep = 1 ] && { wait $BUILD; for c in gather all_gather; do timeout 60 $SRC/build/${c}_perf $G -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $O/n/nccl-ce-$c.log 2>&1; echo "nccl-ce $c rc=$?" >> $S; done; }
  [ $((SECONDS-T0)) -gt 250 ] && break
done
rm -f $O/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
grep -v 'rc=0' $S; echo "done at $((SECONDS-T0))s"
