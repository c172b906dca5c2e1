#!/usr/bin/env bash
# Experiment: LL areas of 1 MiB; the kernel up to 1 MiB blocks vs the barrier routes above 256 KiB.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do
  for ll in 1M 256K; do
    FERROCX_CE_LL_BYTES=$ll timeout 40 gpu-run/bin/fxperf --np 2 --mem cuda -b 128K -e 4M -f 2 -n 200 -w 20 -c 1 $b > $O/a/fxperf-$b-ll$ll.log 2>&1; echo "fxperf-$b-ll$ll rc=$?" >> $O/summary.txt
  done
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt
for b in all_reduce all_gather broadcast reduce_scatter alltoall; do echo "## $b size | LL1M oop ip wrong | LL256K oop ip"; paste <(grep -E "^\s+[0-9]+ " $O/a/fxperf-$b-ll1M.log | awk '{print $1, $6, $10, $9+$13}') <(grep -E "^\s+[0-9]+ " $O/a/fxperf-$b-ll256K.log | awk '{print $6, $10}'); done
