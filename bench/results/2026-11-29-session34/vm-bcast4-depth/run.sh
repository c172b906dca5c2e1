#!/usr/bin/env bash
# Session 34, dev VM (2 vCPUs): broadcast checked later at 4 ranks unbound (oversubscribed),
# FERROCX_SHM_COLL_MEMORY 16 MiB (the default: rings 16 deep at 4 ranks), 32 MiB (32 deep),
# 64 MiB (64 deep), against Open MPI, 3 rounds of 200,000 calls (8, 64, 512 B).
# FX: an fxperf binary (5a887f6 here). Output: depth.txt.
set -u
O=$(dirname "$0"); FX=${FX:-target/release/fxperf}
for r in 1 2 3; do for m in 16777216 33554432 67108864; do
  a=$(FERROCX_SHM_COLL_MEMORY=$m FERROCX_CHECK_CALLS=deferred $FX --np 4 --bind none -b 8 -e 512 -f 8 -n 200000 -w 2000 -c 0 broadcast 2>&1 | awk '/^ +[0-9]+ /{printf "%s ", $6}')
  echo -n "$((m>>20))M $a| "
done
b=$(mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader bench/build/colls -b 8 -e 512 -f 8 -n 200000 -w 2000 -c 0 broadcast 2>&1 | awk '/^ +[0-9]+ /{printf "%s ", $6}')
echo "ompi $b"; done | tee $O/depth.txt
