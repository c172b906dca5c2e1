#!/usr/bin/env bash
# Session 22, call 5 (4 GPUs): where the Simple kernel's knobs put the 4-rank large
# collectives that trail NCCL (broadcast, reduce_scatter, all_reduce, 32-256 MiB): blocks
# 32/64/128, slots 64K/256K/1M, broadcast as the chain at every size; NCCL alongside.
set -u
O=$OUT/r; mkdir -p $O
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
B=gpu-run/bin; SRC=gpu-run/nccl-tests
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > /dev/null 2>&1
S="-b 32M -e 256M -f 2 -n 20 -w 5 -c 1"
for c in broadcast reduce_scatter all_reduce; do
  timeout 120 $SRC/build/${c}_perf $S -g 4 > $O/nccl-$c.log 2>&1
  for cfg in base B32 B128 S64K S1M B128S1M CHAIN CHAINB128; do
    case $cfg in
      base) E=();; B32) E=(FERROCX_CE_SIMPLE_BLOCKS=32);; B128) E=(FERROCX_CE_SIMPLE_BLOCKS=128);;
      S64K) E=(FERROCX_CE_SIMPLE_SLOT=64K);; S1M) E=(FERROCX_CE_SIMPLE_SLOT=1M);;
      B128S1M) E=(FERROCX_CE_SIMPLE_BLOCKS=128 FERROCX_CE_SIMPLE_SLOT=1M);;
      CHAIN) [ $c = broadcast ] || continue; E=(FERROCX_CE_SIMPLE_BYTES=1G);;
      CHAINB128) [ $c = broadcast ] || continue; E=(FERROCX_CE_SIMPLE_BYTES=1G FERROCX_CE_SIMPLE_BLOCKS=128);;
    esac
    env "${E[@]}" timeout 120 $B/fxperf --np 4 --mem cuda $S $c > $O/fx-$c-$cfg.log 2>&1
    echo "fx-$c-$cfg rc=$?" >> $O/summary.txt
  done
done
tar czf $OUT/logs.tgz -C $O .
for c in broadcast reduce_scatter all_reduce; do
  echo "== $c (out of place / in place µs per size 32M 64M 128M 256M)"
  printf "%-10s " NCCL; awk '/^ +[0-9]+ /{printf "%s/%s ", $6, $10}' $O/nccl-$c.log; echo
  for f in $O/fx-$c-*.log; do n=$(basename $f .log); printf "%-10s " ${n#fx-$c-}; awk '/^ +[0-9]+ /{printf "%s/%s ", $6, $10}' $f; echo; done
done
cat $O/summary.txt | tr '\n' ' '
