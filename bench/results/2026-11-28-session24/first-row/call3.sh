#!/usr/bin/env bash
# First-row probe 3: ce retiring at most 128 per launch, galloping, the watchdog front-only (new) vs before (old).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_MODULE_LOADING=EAGER FXPERF_QUEUE_TIME=1
timeout 300 gpu-run/e1/fxperf --np 2 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
for r in 1 2; do for v in old new; do
  B=gpu-run/e1/fxperf; [ $v = old ] && B=gpu-run/e1/fxperf-old
  for c in alltoall all_reduce all_gather; do
    FERROCX_SPANS=1 timeout 120 $B --np 2 --mem cuda -R 1 -b 16M -e 64M -n 40 -c 1 $c > $O/G.$v.$c.$r.log 2>&1
  done
  FERROCX_SPANS=1 timeout 120 $B --np 2 --mem cuda -R 1 -b 8 -e 64K -f 8 -n 2000 -c 1 all_reduce > $O/S.$v.all_reduce.$r.log 2>&1
  FERROCX_SPANS=1 timeout 120 $B --np 2 --mem cuda -R 1 -b 8 -e 64K -f 8 -n 2000 -c 1 sendrecv > $O/S.$v.sendrecv.$r.log 2>&1
done; done
tar czf $OUT/logs.tgz -C $O .
cd $O; for f in G.*.log S.*.log; do printf "%-28s" $f; grep -v '^#' $f | grep -E '^ +[0-9]' | awk '{printf " %s: %s/%s |", $1, $6, $10}'; echo; done
for f in G.*.1.log; do echo "== $f"; grep "longest" $f | head -2; grep -E "ce: (order|retire|track)|device errors" $f | head -8; done
