#!/usr/bin/env bash
# Session 26, call 2 (4 GPUs): the 4-rank rows that trail NCCL at >= 64 MiB, against
# ce's knobs, alternated twice: alltoall (in place 0.72-0.79) as the Simple kernel at
# every size; broadcast (0.83-0.96) as the chain at every size, with other slots and
# block counts; all_reduce (0.96-1.01) two-shot at every size, other slots and blocks;
# reduce_scatter from 128 MiB (0.98-1.08) with more blocks and other slots. NCCL's
# rows are call 1's (x4-table), same tree; fxperf -R 1, -n 20 -w 5 -c 1.
set -u
O=$OUT/r; mkdir -p $O/k
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
sw() {  # sw NAME COLL SIZES ENV...
  local name=$1 coll=$2 sizes=$3; shift 3
  env "$@" timeout 90 $B/fxperf --np 4 --mem cuda $sizes -n 20 -w 5 -c 1 $coll > $O/k/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
for rep in 1 2; do
  sw a2a-auto-$rep alltoall "-b 64M -e 1G -f 2"
  sw a2a-kernel-$rep alltoall "-b 64M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=256M
  sw bc-auto-$rep broadcast "-b 16M -e 1G -f 2"
  sw bc-chain-$rep broadcast "-b 16M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=1G
  sw bc-chain-slot1m-$rep broadcast "-b 16M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=1G FERROCX_CE_SIMPLE_SLOT=1M
  sw bc-chain-slot64k-$rep broadcast "-b 16M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=1G FERROCX_CE_SIMPLE_SLOT=64K
  sw bc-chain-b32-$rep broadcast "-b 16M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=1G FERROCX_CE_SIMPLE_BLOCKS=32
  sw ar-auto-$rep all_reduce "-b 32M -e 1G -f 2"
  sw ar-2shot-$rep all_reduce "-b 32M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=256M
  sw ar-slot1m-$rep all_reduce "-b 32M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=256M FERROCX_CE_SIMPLE_SLOT=1M
  sw ar-b128-$rep all_reduce "-b 32M -e 1G -f 2" FERROCX_CE_SIMPLE_BYTES=256M FERROCX_CE_SIMPLE_BLOCKS=128
  sw rs-auto-$rep reduce_scatter "-b 128M -e 1G -f 2"
  sw rs-b256-$rep reduce_scatter "-b 128M -e 1G -f 2" FERROCX_CE_SIMPLE_BLOCKS=256
  sw rs-slot1m-$rep reduce_scatter "-b 128M -e 1G -f 2" FERROCX_CE_SIMPLE_SLOT=1M
  [ $((SECONDS-T0)) -gt 400 ] && break
done
tar czf $OUT/logs.tgz -C $O .
cat $S | grep -v 'rc=0'; echo "done at $((SECONDS-T0))s"
for f in $O/k/*.log; do printf '%-22s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s", $1/1048576, $6, $10}'; grep -c -i 'error\|panick' $f | sed 's/^/ err=/'; done
