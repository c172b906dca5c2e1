#!/usr/bin/env bash
# Session 20, x4 two-shot: ferrocx all_reduce at 4 ranks, 32 MiB-1 GiB, auto (core at >= 128 MiB)
# vs ce's two-shot forced by FERROCX_CE_SIMPLE_BYTES (64 MiB: 128-256 MiB two-shot; 256 MiB:
# 512 MiB-1 GiB two-shot), two alternated rounds, next to nccl-tests all_reduce_perf -g 4.
# Built from main a42e41eee78d4d1c09a90c5eb11be130e96ad609. Run from the repo root on the device.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/x4/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=120
T0=$SECONDS
S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1

step() {  # step NAME CMD...: timeout 120, log to $O/NAME.log, rc and seconds to the summary
  local name=$1; shift; local t0=$SECONDS
  timeout 120 "$@" > $O/$name.log 2>&1
  local rc=$?
  echo "$name: rc=$rc $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S
}

# NCCL reference (builds nccl-tests on the device)
t0=$SECONDS
NP=4 PERF_COLLS=all_reduce SIZES="-b 32M -e 1G -f 2" ITERS="-n 20 -w 5" STEP_TIMEOUT=150 \
  bash gpu-run/x4/gpu-check.sh $B $O/nccl nccl > $O/console-nccl.txt 2>&1
echo "nccl (gpu-check.sh nccl): rc=$? $((SECONDS - t0)) s (at $((SECONDS - T0)) s)" >> $S
grep -h "rc=" $O/nccl/summary.txt | sed 's/^ */  /' >> $S
[ -f $O/nccl/nccl-build.log ] && [ $(stat -c %s $O/nccl/nccl-build.log) -gt 200000 ] && \
  { tail -n 50 $O/nccl/nccl-build.log > $O/nccl/nccl-build.tail.log; rm -f $O/nccl/nccl-build.log; }

for round in 1 2; do
  step fx-auto-$round $B/fxperf --np 4 --mem cuda -b 32M -e 1G -f 2 -n 20 -w 5 -c 1 all_reduce
  step fx-ts64-$round env FERROCX_CE_SIMPLE_BYTES=67108864 \
    $B/fxperf --np 4 --mem cuda -b 128M -e 256M -f 2 -n 20 -w 5 -c 1 all_reduce
  step fx-ts256-$round env FERROCX_CE_SIMPLE_BYTES=268435456 \
    $B/fxperf --np 4 --mem cuda -b 512M -e 1G -f 2 -n 20 -w 5 -c 1 all_reduce
done

echo "total: $((SECONDS - T0)) s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S; head -5 $O/gpus.txt
for f in $O/nccl/nccl-all_reduce.log $O/fx-*.log; do
  echo "== $(basename $f)"; grep -E "^ +[0-9]{6,}|ran on|Out of bounds|rror|panic" $f | grep -v "^ *$" | head -20
done
