#!/usr/bin/env bash
# Session 18, call 4: do the broadcast stalls of run 3 (64 KiB-1 MiB at 13-60 us where
# runs 1 and 2 took 7-9) come back? fxperf broadcast and all_gather 64 KiB-1 MiB five
# times each, FXPERF_QUEUE_TIME=1 (the host's share of each row), rounds 4-5 with
# FERROCX_SPANS=1 (b/); then the 2-rank table 8 B-8 MiB at -n 200 once more (p1/).
set -u
O=$OUT/r; mkdir -p $O/b $O/p1
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; nproc; uptime; } > $O/gpus.txt 2>&1
for rep in 1 2 3 4 5; do
  sp=0; [ $rep -ge 4 ] && sp=1
  for c in broadcast all_gather; do
    FERROCX_SPANS=$sp FXPERF_QUEUE_TIME=1 timeout 60 $B/fxperf --np 2 --mem cuda -b 64K -e 1M -f 2 -n 200 -w 20 -c 1 $c > $O/b/$c-$rep.log 2>&1
    echo "$c-$rep rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 200 -w 20" SIZES="-b 8 -e 8M -f 2" STEP_TIMEOUT=60 timeout 200 bash scripts/gpu-check.sh $B $O/p1 perf nccl > $O/console-p1.txt 2>&1; echo "perf1 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
ps aux --sort=-%cpu | head -8 > $O/ps.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt | tr '\n' ' '; echo; head -2 $O/gpus.txt; grep -h "rc=[1-9]\|wrong" $O/p*/summary.txt | head
for f in $O/b/broadcast-*.log; do echo "$(basename $f): $(grep -E '^ +[0-9]' $f | awk '{printf "%s:%s/%s ", $1/1024, $6, $10}')"; done
