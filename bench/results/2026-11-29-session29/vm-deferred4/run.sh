#!/usr/bin/env bash
# Session 29, dev VM: the rooted collectives at 4 oversubscribed ranks with
# FERROCX_CHECK_CALLS=deferred (the final tree, 46cc0a1: NEW) against Open MPI, three
# alternated rounds, 8 B-4 KiB, -n 10000.
set -u
O=$(dirname "$0")/logs; mkdir -p $O
make -C bench >/dev/null
M=(mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
for r in 1 2 3; do for c in broadcast reduce gather; do
  FERROCX_CHECK_CALLS=deferred timeout 120 $NEW --np 4 --bind none -b 8 -e 4K -f 8 -n 10000 -w 500 -c 1 $c > $O/def.$c.np4.$r 2>&1
  timeout 120 "${M[@]}" bench/build/colls -b 8 -e 4K -f 8 -n 10000 -w 500 -c 1 $c > $O/ompi.$c.np4.$r 2>&1
done; done
for c in broadcast reduce gather; do for v in def ompi; do
  printf "%-15s np4 %-9s" $c $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np4.$r; done; echo
done; done > $O/../summary.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/def.* >> $O/../summary.txt
cat $O/../summary.txt
