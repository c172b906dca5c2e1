#!/usr/bin/env bash
# Session 13, call 1 (4 GPUs): the whole device test file on the tree whose capture and
# watchdog changes never ran on a GPU; where the host's time goes in an 8 B call
# (FERROCX_SPANS=1, 2 ranks); the whole 4-rank table against NCCL -g 4.
set -u
O=$OUT/r; mkdir -p $O/a $O/s $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
for c in all_reduce sendrecv broadcast; do
  FERROCX_SPANS=1 timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 3000 -w 300 -c 1 $c > $O/s/$c.log 2>&1
  echo "spans $c rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
FXTEST_WORKER=$B/fxtest-worker timeout 330 $B/device-tests --nocapture --test-threads 1 > $O/a/device-all.log 2>&1
echo "device-all rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
left=$((575 - SECONDS + T0))
[ $left -gt 100 ] && NP=4 SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=150 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -4 $O/gpus.txt
grep -E "test result|^test .*(FAILED|ok)$|panicked" $O/a/device-all.log | cut -c1-200 | tail -40
for c in all_reduce sendrecv broadcast; do echo "== spans $c"; grep -iE "span|^ +[0-9]" $O/s/$c.log | head -30; done
for c in sendrecv all_reduce all_gather reduce_scatter alltoall broadcast; do echo "== $c fxperf / nccl (oop/ip/wrong)"; for f in $O/p/fxperf-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done; done
