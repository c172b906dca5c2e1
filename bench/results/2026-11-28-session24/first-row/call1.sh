#!/usr/bin/env bash
# First-row out-of-place anomaly probe (issue 21), 2 GPUs.
set -u
B=gpu-run/e1/fxperf; O=$OUT/r; mkdir -p $O
nvidia-smi > $O/smi.txt 2>&1; nvidia-smi topo -m >> $O/smi.txt 2>&1
export CUDA_MODULE_LOADING=EAGER
timeout 300 $B --np 2 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv,noheader -lms 20 > $O/clocks.csv 2>&1 &
SP=$!
run() { local tag=$1; shift; echo "$(date +%s.%N) start $tag" >> $O/marks.txt
  timeout 120 "$@" > $O/$tag.log 2>&1; echo "$(date +%s.%N) end $tag rc=$?" >> $O/marks.txt; }
for c in alltoall all_gather all_reduce; do
  run E1a.$c $B --np 2 --mem cuda -R 1 -b 16M -e 64M -f 2 -n 40 -w 5 -c 1 $c
  run E1b.$c $B --np 2 --mem cuda -R 1 -b 16M -e 64M -f 2 -n 40 -w 5 -c 1 $c
  run E1r0.$c $B --np 2 --mem cuda -R 0 -b 16M -e 64M -f 2 -n 40 -w 5 -c 1 $c
  run E2.$c $B --np 2 --mem cuda -R 1 -b 16M -e 64M -f 2 -n 400 -w 5 -c 1 $c
  run E3.$c $B --np 2 --mem cuda -R 1 -b 8M -e 64M -f 2 -n 40 -w 5 -c 1 $c
  FXPERF_QUEUE_TIME=1 run E4.$c $B --np 2 --mem cuda -R 1 -b 16M -e 32M -f 2 -n 40 -w 5 -c 0 $c
  run E5.$c $B --np 2 --mem cuda -R 1 -b 16M -e 64M -f 2 -n 40 -w 2000 -c 1 $c
done
kill $SP
tar czf $OUT/logs.tgz -C $O .
cd $O; for f in E*.log; do printf "%-22s" $f; grep -v '^#' $f | grep -E '^ +[0-9]' | awk '{printf " %s: %s/%s |", $1/1048576, $6, $10}'; echo; done
grep -h "queuing" E4.*.log | head
