#!/usr/bin/env bash
# Session 26, call 3 (4 GPUs), the tree with alltoall as the Simple kernel to 128 MiB
# blocks and broadcast as the chain to 1 GiB above 2 ranks: those two rows 16 MiB-1 GiB
# next to NCCL's kernels (-R 1 / NCCL -R 0); then on symmetric windows (-R 2) every copy
# collective next to NCCL's copy-engine collectives (-R 2 -x 2), with all_gather's direct
# mode forced (FERROCX_CE_DIRECT_BYTES=1G) and gather/scatter as the Simple kernel forced
# (FERROCX_CE_SIMPLE_BYTES=1G) against auto, all in one call.
set -u
O=$OUT/r; mkdir -p $O/k $O/n
B=gpu-run/bin; SRC=gpu-run/nccl-tests
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1 &
BUILD=$!
sw() {  # sw NAME COLL SIZES REG ENV...
  local name=$1 coll=$2 sizes=$3 reg=$4; shift 4
  env "$@" timeout 90 $B/fxperf --np 4 --mem cuda -R $reg $sizes -n 20 -w 5 -c 1 $coll > $O/k/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
L="-b 16M -e 1G -f 2"; W="-b 8 -e 1G -f 4"
sw a2a-r1 alltoall "$L" 1
sw bc-r1 broadcast "$L" 1
wait $BUILD; echo "build rc=$? at $((SECONDS-T0))s" >> $S
for c in alltoall broadcast; do timeout 60 $SRC/build/${c}_perf $L -n 20 -w 5 -c 1 -g 4 > $O/n/nccl-$c.log 2>&1; echo "nccl $c rc=$?" >> $S; done
for c in alltoall all_gather gather scatter broadcast; do timeout 60 $SRC/build/${c}_perf $W -n 20 -w 5 -c 1 -g 4 -R 2 -x 2 > $O/n/nccl-ce-$c.log 2>&1; echo "nccl-ce $c rc=$?" >> $S; done
for rep in 1 2; do
  sw ag-win-auto-$rep all_gather "$W" 2
  sw ag-win-direct-$rep all_gather "$W" 2 FERROCX_CE_DIRECT_BYTES=1G
  sw ga-win-auto-$rep gather "$W" 2
  sw ga-win-simple-$rep gather "$W" 2 FERROCX_CE_SIMPLE_BYTES=1G
  sw sc-win-auto-$rep scatter "$W" 2
  sw sc-win-simple-$rep scatter "$W" 2 FERROCX_CE_SIMPLE_BYTES=1G
  [ $rep = 1 ] && { sw a2a-win alltoall "$W" 2; sw bc-win broadcast "$W" 2; }
  [ $((SECONDS-T0)) -gt 380 ] && break
done
rm -f $O/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
grep -v 'rc=0' $S; echo "done at $((SECONDS-T0))s"
