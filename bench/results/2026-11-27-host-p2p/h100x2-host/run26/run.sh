#!/usr/bin/env bash
# Was round 1 of run 25's host sendrecv (killed at 60 s, no row printed) the fresh machine's cold kernel compile (ce preloads its kernels at init)? A fresh cache directory, timed; then host sendrecv 6 times on the warm cache.
set -u
O=$OUT/r; mkdir -p $O
T0=$SECONDS
( time FERROCX_KERNEL_CACHE=$O/kc timeout 300 gpu-run/bin/fxperf --np 2 -b 8 -e 8 -n 100 -w 10 -c 1 sendrecv ) > $O/cold.log 2>&1; echo "cold rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for r in 1 2 3 4 5 6; do
  ( time timeout 60 gpu-run/bin/fxperf --np 2 -b 8 -e 4K -f 8 -n 50000 -w 1000 -c 1 sendrecv ) > $O/warm.$r 2>&1; echo "warm $r rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
( time FERROCX_KERNEL_CACHE=$O/kc2 FERROCX_COLLECTIVES=^ce timeout 300 gpu-run/bin/fxperf --np 2 -b 8 -e 8 -n 100 -w 10 -c 1 sendrecv ) > $O/cold-no-ce.log 2>&1; echo "cold without ce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O cold.log cold-no-ce.log warm.1 warm.2 warm.3 warm.4 warm.5 warm.6 summary.txt
cat $O/summary.txt; grep -E "real|^ +8 " $O/cold.log $O/cold-no-ce.log; for r in 1 2 3 4 5 6; do echo "warm $r: $(grep -E '^ +[0-9]' $O/warm.$r | awk '{printf "%s:%s ", $1, $6}') $(grep real $O/warm.$r)"; done
