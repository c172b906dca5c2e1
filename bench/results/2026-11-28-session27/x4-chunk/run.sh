#!/usr/bin/env bash
# Session 27, call 1 (4 GPUs): the Simple kernel's chunk size (FERROCX_CE_SIMPLE_CHUNK, new)
# against auto (64 KiB below 256 MiB segments) at 4 ranks, 16 MiB-1 GiB: broadcast (the
# chain, 0.85-0.88x NCCL at 64-128 MiB) also with 128 blocks and 32 KiB chunks; all_reduce,
# reduce_scatter, all_gather, alltoall with 128 and 256 KiB chunks. NCCL -g 4 in the same
# call. Then 2 ranks (GPUs 0,1) broadcast on windows: the direct mode (auto, to 1 GiB)
# against the routes (FERROCX_CE_DIRECT_BYTES=32M) and NCCL's CE broadcast (-R 2 -x 2).
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
L="-b 16M -e 1G -f 2"; M="-b 32M -e 1G -f 2"
bc() {
  sw bc-auto-$1 4 broadcast "$L" 1
  sw bc-c128-$1 4 broadcast "$L" 1 FERROCX_CE_SIMPLE_CHUNK=128K
  sw bc-c256-$1 4 broadcast "$L" 1 FERROCX_CE_SIMPLE_CHUNK=256K
  sw bc-b128-$1 4 broadcast "$L" 1 FERROCX_CE_SIMPLE_BLOCKS=128
  sw bc-c32-$1 4 broadcast "$L" 1 FERROCX_CE_SIMPLE_CHUNK=32K
}
rest() {
  for c in all_reduce reduce_scatter all_gather alltoall; do
    sw $c-auto-$1 4 $c "$M" 1
    sw $c-c128-$1 4 $c "$M" 1 FERROCX_CE_SIMPLE_CHUNK=128K
    sw $c-c256-$1 4 $c "$M" 1 FERROCX_CE_SIMPLE_CHUNK=256K
  done
}
bc 1
wait $BUILD; echo "build rc=$? at $((SECONDS-T0))s" >> $S
CUDA_VISIBLE_DEVICES=0,1 sw bc2-win-auto 2 broadcast "$L" 2
CUDA_VISIBLE_DEVICES=0,1 sw bc2-win-routes 2 broadcast "$L" 2 FERROCX_CE_DIRECT_BYTES=32M
CUDA_VISIBLE_DEVICES=0,1 timeout 60 $SRC/build/broadcast_perf $L -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $O/n/nccl-ce2-broadcast.log 2>&1; echo "nccl-ce2 rc=$?" >> $S
for c in broadcast all_reduce reduce_scatter all_gather alltoall; do timeout 60 $SRC/build/${c}_perf $L -n 20 -w 5 -c 1 -g 4 > $O/n/nccl-$c.log 2>&1; echo "nccl $c rc=$?" >> $S; done
rest 1
bc 2
[ $((SECONDS-T0)) -lt 420 ] && rest 2
rm -f $O/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
grep -v 'rc=0' $S; echo "done at $((SECONDS-T0))s"
for f in $O/k/*.log; do printf '%-20s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; grep -c -i 'error\|panick' $f | sed 's/^/ err=/'; done
for f in $O/n/*.log; do printf '%-20s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; echo; done
