#!/usr/bin/env bash
# Session 17, call 1 (4 GPUs): the fold loading the other ranks two at a time
# (fxperf-fp, branch wip/fold-pairs) against the main tree at 4 ranks; broadcast at
# 2 ranks 64 MiB-1 GiB as the Simple kernel (FERROCX_CE_SIMPLE_BYTES=1G) against auto;
# then the whole 2-rank table 8 B-1 GiB on GPUs 0 and 1, fxperf -R 1 next to NCCL -g 2.
set -u
O=$OUT/r; mkdir -p $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
sw() {  # sw NAME NP BIN COLL FXPERF-ARGS ENV...
  local name=$1 np=$2 bin=$3 coll=$4 args=$5; shift 5
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/$bin --np $np --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  sw ar4-main-$rep 4 fxperf all_reduce "-b 1M -e 64M -f 2 -n 40 -w 5"
  sw ar4-fp-$rep 4 fxperf-fp all_reduce "-b 1M -e 64M -f 2 -n 40 -w 5"
  sw rs4-main-$rep 4 fxperf reduce_scatter "-b 16M -e 256M -f 2 -n 20 -w 3"
  sw rs4-fp-$rep 4 fxperf-fp reduce_scatter "-b 16M -e 256M -f 2 -n 20 -w 3"
  sw bc2-auto-$rep 2 fxperf broadcast "-b 64M -e 1G -f 2 -n 20 -w 3"
  sw bc2-simple-$rep 2 fxperf broadcast "-b 64M -e 1G -f 2 -n 20 -w 3" FERROCX_CE_SIMPLE_BYTES=1G
done
left=$((580 - SECONDS + T0))
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 40 -w 5" SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=100 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt | grep -v '^ab'; grep "rc=[1-9]" $O/summary.txt; head -4 $O/gpus.txt
for f in $O/k/*.log; do echo "== $(basename $f .log)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9+$13}'; echo; grep -i "error\|panick" $f | head -2; done
grep -h "wrong\|rc=[1-9]" $O/p/summary.txt | head
