#!/usr/bin/env bash
# Session 22, call 7 (4 GPUs): the broadcast chain at every size against auto (chain to
# 64 MiB, routes above), and all_gather / alltoall with 128 Simple blocks against 64,
# 32 MiB-1 GiB, NCCL alongside.
set -u
O=$OUT/r; mkdir -p $O
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
B=gpu-run/bin; SRC=gpu-run/nccl-tests
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > /dev/null 2>&1
S="-b 32M -e 1G -f 2 -n 10 -w 3 -c 1"
for c in broadcast all_gather alltoall; do
  timeout 100 $SRC/build/${c}_perf $S -g 4 > $O/nccl-$c.log 2>&1
done
timeout 100 $B/fxperf --np 4 --mem cuda $S broadcast > $O/fx-broadcast-auto.log 2>&1
FERROCX_CE_SIMPLE_BYTES=1G timeout 100 $B/fxperf --np 4 --mem cuda $S broadcast > $O/fx-broadcast-chain.log 2>&1
for c in all_gather alltoall; do
  timeout 100 $B/fxperf --np 4 --mem cuda $S $c > $O/fx-$c-auto.log 2>&1
  FERROCX_CE_SIMPLE_BLOCKS=128 timeout 100 $B/fxperf --np 4 --mem cuda $S $c > $O/fx-$c-B128.log 2>&1
done
tar czf $OUT/logs.tgz -C $O .
head -1 $O/gpus.txt
for c in broadcast all_gather alltoall; do
  echo "== $c (out / in place µs, 32M..1G)"
  printf "%-8s " NCCL; awk '/^ +[0-9]+ /{printf "%s/%s ", $6, $10}' $O/nccl-$c.log; echo
  for f in $O/fx-$c-*.log; do n=$(basename $f .log); printf "%-8s " ${n#fx-$c-}; awk '/^ +[0-9]+ /{printf "%s/%s ", $6, $10}' $f; echo; done
done
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w}' $O/fx-*.log
