#!/usr/bin/env bash
# First-row probe 2: which call of the first timed window stalls, and in which span.
set -u
B=gpu-run/e1/fxperf; O=$OUT/r; mkdir -p $O
export CUDA_MODULE_LOADING=EAGER FXPERF_QUEUE_TIME=1
timeout 300 $B --np 2 --mem cuda -b 8 -e 8 -n 5 all_reduce > $O/prime.log 2>&1
for c in alltoall all_reduce; do
  FERROCX_SPANS=1 timeout 120 $B --np 2 --mem cuda -R 1 -b 16M -e 32M -n 40 -c 0 $c > $O/F1.$c.log 2>&1
  FERROCX_CHECK_CALLS=0 timeout 120 $B --np 2 --mem cuda -R 1 -b 16M -e 32M -n 40 -c 0 $c > $O/F2.$c.log 2>&1
  FERROCX_COLLECTIVES=^ce timeout 120 $B --np 2 --mem cuda -R 1 -b 16M -e 32M -n 40 -c 0 $c > $O/F3.$c.log 2>&1
  timeout 120 $B --np 2 --mem cuda -R 1 -b 16M -e 32M -n 400 -c 0 $c > $O/F4.$c.log 2>&1
done
tar czf $OUT/logs.tgz -C $O .
cd $O; for f in F*.log; do echo "== $f"; grep -v '^#' $f | grep -E "fxperf:|^ +[0-9]|span|ce:|core:|sdk:" ; done
