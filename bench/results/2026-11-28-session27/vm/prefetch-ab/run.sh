#!/usr/bin/env bash
# Session 27: shm-coll's prefetch on deep rings, before (3a9e432) and after (93f2b8b)
# alternated three times, 2 ranks bound to cores, 8-512 B broadcast with the deferred check
# and with no check; fxperf of each tree copied to /tmp/fx-before and /tmp/fx-after2.
set -u
D=$(dirname "$0")
for r in 1 2 3; do for v in before after2; do for m in deferred 0; do
  FERROCX_CHECK_CALLS=$m /tmp/fx-$v --np 2 --bind core -b 8 -e 512 -f 8 -n 200000 -w 2000 -c 1 broadcast > $D/$v-check$m-$r.log 2>&1
done; done; done
for f in $D/*.log; do printf '%-22s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s", $1, $6, $10}'; echo; done
