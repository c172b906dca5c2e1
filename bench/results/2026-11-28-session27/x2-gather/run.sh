#!/usr/bin/env bash
# Session 27, call 5 (2 GPUs): with whole 128 KiB chunks from 16 MiB segments at 2 ranks,
# the rows behind NCCL's CE collectives on windows: gather (the routes, 0.96-0.98 at 64-128
# MiB and 512 MiB-1 GiB) against the Simple kernel forced (FERROCX_CE_SIMPLE_BYTES=1G);
# all_gather in place at 128 MiB (the direct mode, 0.95) against the direct mode off
# (FERROCX_CE_DIRECT_BYTES=0: the Simple kernel to 64 MiB blocks, the routes above).
# NCCL CE (-R 2 -x 2) in the same call, two alternations.
set -u
O=$OUT/r; mkdir -p $O/k $O/n
B=gpu-run/bin; SRC=gpu-run/nccl-tests
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1 &
BUILD=$!
sw() {  # sw NAME COLL ENV...
  local name=$1 coll=$2; shift 2
  env "$@" timeout 90 $B/fxperf --np 2 --mem cuda -R 2 -b 16M -e 1G -f 2 -n 20 -w 5 -c 1 $coll > $O/k/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
r() {
  sw ga-auto-$1 gather
  sw ga-kernel-$1 gather FERROCX_CE_SIMPLE_BYTES=1G
  sw ag-auto-$1 all_gather
  sw ag-nodirect-$1 all_gather FERROCX_CE_DIRECT_BYTES=0
}
r 1
wait $BUILD; echo "build rc=$? at $((SECONDS-T0))s" >> $S
for c in gather all_gather; do timeout 60 $SRC/build/${c}_perf -b 16M -e 1G -f 2 -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $O/n/nccl-ce-$c.log 2>&1; echo "nccl-ce $c rc=$?" >> $S; done
r 2
rm -f $O/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
grep -v 'rc=0' $S; echo "done at $((SECONDS-T0))s"
for f in $O/k/*.log $O/n/*.log; do printf '%-16s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; echo; done
