#!/usr/bin/env bash
# Session 27, call 3 (4 GPUs): at 2 ranks (GPUs 0,1) the Simple kernel's chunk
# (FERROCX_CE_SIMPLE_CHUNK=128K, whole 128 KiB slots, against auto's 64 KiB below 256 MiB
# segments) for all_reduce, reduce_scatter, all_gather, alltoall, 16 MiB-1 GiB, next to
# NCCL -g 2; at 4 ranks on windows the rows behind NCCL's CE collectives (all_gather in
# place at 128 MiB, alltoall at 512 MiB) against 128 / 256 KiB chunks, NCCL CE in the call.
set -u
O=$OUT/r; mkdir -p $O/k $O/n
B=gpu-run/bin; SRC=gpu-run/nccl-tests
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1 &
BUILD=$!
sw() {  # sw NAME NP COLL SIZES REG ENV...
  local name=$1 np=$2 coll=$3 sizes=$4 reg=$5; shift 5
  env "$@" timeout 90 $B/fxperf --np $np --mem cuda -R $reg $sizes -n 20 -w 5 -c 1 $coll > $O/k/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
L="-b 16M -e 1G -f 2"; W="-b 32M -e 512M -f 2"
two() {
  for c in all_reduce reduce_scatter all_gather alltoall; do
    CUDA_VISIBLE_DEVICES=0,1 sw p2-$c-auto-$1 2 $c "$L" 1
    CUDA_VISIBLE_DEVICES=0,1 sw p2-$c-c128-$1 2 $c "$L" 1 FERROCX_CE_SIMPLE_CHUNK=128K
  done
}
win() {
  for c in all_gather alltoall; do
    sw w4-$c-auto-$1 4 $c "$W" 2
    sw w4-$c-c128-$1 4 $c "$W" 2 FERROCX_CE_SIMPLE_CHUNK=128K
    sw w4-$c-c256-$1 4 $c "$W" 2 FERROCX_CE_SIMPLE_CHUNK=256K
  done
}
two 1
wait $BUILD; echo "build rc=$? at $((SECONDS-T0))s" >> $S
for c in all_reduce reduce_scatter all_gather alltoall; do CUDA_VISIBLE_DEVICES=0,1 timeout 60 $SRC/build/${c}_perf $L -n 20 -w 5 -c 1 -g 2 > $O/n/nccl2-$c.log 2>&1; echo "nccl2 $c rc=$?" >> $S; done
for c in all_gather alltoall; do timeout 60 $SRC/build/${c}_perf $W -n 20 -w 5 -c 1 -g 4 -R 2 -x 2 > $O/n/nccl-ce4-$c.log 2>&1; echo "nccl-ce4 $c rc=$?" >> $S; done
win 1
two 2
[ $((SECONDS-T0)) -lt 400 ] && win 2
rm -f $O/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
grep -v 'rc=0' $S; echo "done at $((SECONDS-T0))s"
for f in $O/k/*.log; do printf '%-24s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; grep -c -i 'error\|panick' $f | sed 's/^/ err=/'; done
for f in $O/n/*.log; do printf '%-24s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; echo; done
