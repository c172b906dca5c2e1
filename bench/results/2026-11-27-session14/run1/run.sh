#!/usr/bin/env bash
# Session 14, call 1 (2 GPUs): the whole device test file on the tree whose ibgda
# carrier split never ran on a GPU (devnet_*), under MPS (ranks > GPUs in some tests);
# 2-rank all_reduce knob sweep at 512 KiB-16 MiB (-n 300); the 2-rank table vs NCCL -g 2.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
FXTEST_WORKER=$B/fxtest-worker timeout 300 $B/device-tests --nocapture --test-threads 1 > $O/a/device-all.log 2>&1
echo "device-all rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control; sleep 2
S="-b 512K -e 16M -f 2 -n 300 -w 30 -c 1"
for cfg in "X=0" "FERROCX_CE_SIMPLE_BLOCKS=32" "FERROCX_CE_SIMPLE_BLOCKS=128" "FERROCX_CE_SIMPLE_SLOT=64K" "FERROCX_CE_SIMPLE_SLOT=256K" "FERROCX_CE_LL_BYTES=512K" "FERROCX_CE_LL_BYTES=2M" "X=1"; do
  env $cfg timeout 40 $B/fxperf --np 2 --mem cuda $S all_reduce > $O/k/$cfg.log 2>&1
  echo "sweep $cfg rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
left=$((580 - SECONDS + T0))
[ $left -gt 100 ] && NP=2 ITERS="-n 40 -w 5" SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=150 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -3 $O/gpus.txt
grep -E "test result|^test .*(FAILED|ok)$|panicked" $O/a/device-all.log | cut -c1-200 | tail -40
for f in $O/k/*.log; do echo "== $f"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done
for c in sendrecv all_reduce all_gather reduce_scatter alltoall broadcast; do echo "== $c fxperf / nccl (oop/ip/wrong)"; for f in $O/p/fxperf-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done; done
