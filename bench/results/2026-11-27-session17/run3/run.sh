#!/usr/bin/env bash
# Session 17, call 3 (4 GPUs): the LL128 kernel. ce's device tests (the new LL128
# matrix at 2 and 4 ranks, the LL128 hang and killed-rank cases, and every other ce
# test); all_reduce at 2 ranks 64 KiB-8 MiB with LL128 off / auto / wide
# (LL to 32K, LL128 to 4M); the other collectives and 4 ranks off / wide; then the
# whole 2-rank table 8 B-1 GiB on GPUs 0 and 1, fxperf -R 1 next to NCCL -g 2.
set -u
O=$OUT/r; mkdir -p $O/k $O/p $O/a $O/i
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
timeout 60 $B/fxrun -n 2 -- $B/fxinfo > $O/i/fxinfo.txt 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FXTEST_WORKER=$B/fxtest-worker timeout 240 $B/device-tests --nocapture --test-threads 1 ce_ > $O/a/device-ce.log 2>&1
echo "device-ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
sw() {  # sw NAME NP COLL FXPERF-ARGS ENV...
  local name=$1 np=$2 coll=$3 args=$4; shift 4
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/fxperf --np $np --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
W="FERROCX_CE_LL_BYTES=32K FERROCX_CE_LL128_BYTES=4M"
for rep in 1 2; do
  sw ar2-off-$rep 2 all_reduce "-b 64K -e 8M -f 2 -n 200 -w 20" FERROCX_CE_LL128_BYTES=0
  sw ar2-auto-$rep 2 all_reduce "-b 64K -e 8M -f 2 -n 200 -w 20"
  sw ar2-wide-$rep 2 all_reduce "-b 64K -e 8M -f 2 -n 200 -w 20" $W
done
for c in all_gather alltoall broadcast reduce_scatter; do
  sw $c-2-off 2 $c "-b 64K -e 8M -f 2 -n 100 -w 10" FERROCX_CE_LL128_BYTES=0
  sw $c-2-wide 2 $c "-b 64K -e 8M -f 2 -n 100 -w 10" $W
done
for c in all_reduce all_gather alltoall broadcast reduce_scatter; do
  sw $c-4-off 4 $c "-b 64K -e 8M -f 2 -n 100 -w 10" FERROCX_CE_LL128_BYTES=0
  sw $c-4-wide 4 $c "-b 64K -e 8M -f 2 -n 100 -w 10" $W
done
left=$((585 - SECONDS + T0))
[ $left -gt 60 ] && CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 40 -w 5" SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=100 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt | grep -v '^ab'; grep "rc=[1-9]" $O/summary.txt; head -2 $O/gpus.txt
grep -E "test result|FAILED|panicked|skipping" $O/a/device-ce.log | cut -c1-200 | head -20
grep -iE "LL128" $O/i/fxinfo.txt | head -8 | cut -c1-200
for f in $O/k/*.log; do echo "== $(basename $f .log)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1/1024, $6, $10, $9+$13}'; echo; grep -i "error\|panick" $f | head -2; done
grep -h "wrong\|rc=[1-9]" $O/p/summary.txt | head
