#!/usr/bin/env bash
# Session 35, dev VM (2 vCPUs): broadcast checked later at 4 ranks unbound (oversubscribed),
# OLD (3dcbafe: heads at the start of 64 KiB slots, 16 deep at 4 ranks) against NEW (83b4625: the
# heads apart, 64 deep) and Open MPI, 6 rounds of 200,000 calls, 8 B-4 KiB. Output: bcast4.txt.
set -u
O=$(dirname "$0"); OLD=${OLD:?an fxperf of 3dcbafe}; NEW=${NEW:-target/release/fxperf}
for r in 1 2 3 4 5 6; do
  for v in OLD NEW; do
    a=$(FERROCX_CHECK_CALLS=deferred ${!v} --np 4 --bind none -b 8 -e 4K -f 8 -n 200000 -w 2000 -c 1 broadcast 2>&1 | awk '/^ +[0-9]+ /{printf "%s ", $6; w+=$9+$13} END{printf "(wrong %d) ", w}')
    echo -n "${v,,} $a| "
  done
  b=$(mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader bench/build/colls -b 8 -e 4K -f 8 -n 200000 -w 2000 -c 1 broadcast 2>&1 | awk '/^ +[0-9]+ /{printf "%s ", $6}')
  echo "ompi $b"
done | tee $O/bcast4.txt
