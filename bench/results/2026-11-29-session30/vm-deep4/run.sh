#!/usr/bin/env bash
# Session 30, dev VM (2 vCPUs): 4 oversubscribed ranks with FERROCX_CHECK_CALLS=deferred,
# shm-coll's slots left to auto (NEW: 16 KiB slots, rings 64 deep at 4 ranks) against the
# same binary with FERROCX_SHM_COLL_BYTES=65536 (the old rule: 64 KiB slots, 16 deep) and
# Open MPI (vader, CMA), three alternated rounds, 8 B-32 KiB, -n 5000. NEW=path to fxperf.
set -u
O=$(dirname "$0")/logs; mkdir -p $O
make -C bench >/dev/null
M=(mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
for r in 1 2 3; do for c in broadcast reduce gather all_reduce; do
  FERROCX_CHECK_CALLS=deferred timeout 120 $NEW --np 4 --bind none -b 8 -e 32K -f 8 -n 5000 -w 300 -c 1 $c > $O/new.$c.$r 2>&1
  FERROCX_SHM_COLL_BYTES=65536 FERROCX_CHECK_CALLS=deferred timeout 120 $NEW --np 4 --bind none -b 8 -e 32K -f 8 -n 5000 -w 300 -c 1 $c > $O/old.$c.$r 2>&1
  timeout 120 "${M[@]}" bench/build/colls -b 8 -e 32K -f 8 -n 5000 -w 300 -c 1 $c > $O/ompi.$c.$r 2>&1
done; done
for c in broadcast reduce gather all_reduce; do for v in old new ompi; do
  printf "%-11s %-5s" $c $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.$r; done; echo
done; done > $O/../summary.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/new.* $O/old.* >> $O/../summary.txt
cat $O/../summary.txt
