#!/usr/bin/env bash
# Session 17, call 2 (4 GPUs, run 1's machine if still warm): all_reduce at 2 ranks
# 256 KiB-2 MiB as LL (auto) against the Simple kernel (FERROCX_CE_LL_BYTES=128K);
# the whole device test file on 4 GPUs (the session-16 kernels' first run there);
# the whole 4-rank table 8 B-1 GiB, fxperf -R 1 next to NCCL -g 4.
set -u
O=$OUT/r; mkdir -p $O/k $O/p $O/a
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
sw() {  # sw NAME NP COLL FXPERF-ARGS ENV...
  local name=$1 np=$2 coll=$3 args=$4; shift 4
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/fxperf --np $np --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  sw ar2-ll-$rep 2 all_reduce "-b 256K -e 2M -f 2 -n 300 -w 30"
  sw ar2-simple-$rep 2 all_reduce "-b 256K -e 2M -f 2 -n 300 -w 30" FERROCX_CE_LL_BYTES=128K
done
FXTEST_WORKER=$B/fxtest-worker timeout 320 $B/device-tests --nocapture --test-threads 1 > $O/a/device-all.log 2>&1
echo "device-all rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
left=$((585 - SECONDS + T0))
[ $left -gt 100 ] && NP=4 SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=150 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt | grep -v '^ab'; grep "rc=[1-9]" $O/summary.txt; head -2 $O/gpus.txt
grep -E "test result|^test .*(FAILED|ok)$|panicked" $O/a/device-all.log | cut -c1-160 | tail -40
for f in $O/k/*.log; do echo "== $(basename $f .log)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9+$13}'; echo; grep -i "error\|panick" $f | head -2; done
grep -h "wrong\|rc=[1-9]" $O/p/summary.txt | head
