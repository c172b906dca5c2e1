#!/usr/bin/env bash
# Session 28, dev VM (2 vCPUs): deep rings whose sender claims the next slot
# (a7c4cee, NEW) against 51beba4 (OLD), FERROCX_CHECK_CALLS=deferred, 2 ranks bound,
# broadcast, reduce and gather at 8 B-4 KiB, alternated three rounds.
set -u
O=$(dirname "$0")/logs; mkdir -p $O
for r in 1 2 3; do for c in broadcast reduce gather; do for v in old new; do
  if [ $v = old ]; then X=$OLD; else X=$NEW; fi
  FERROCX_CHECK_CALLS=deferred timeout 120 $X --np 2 --bind core -b 8 -e 4K -f 8 -n 100000 -w 2000 -c 1 $c > $O/$v.$c.$r 2>&1
done; done; done
for c in broadcast reduce gather; do for v in old new; do
  printf "%-10s np2 %-4s" $c $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.$r; done; echo
done; done > $O/../summary.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/* >> $O/../summary.txt
cat $O/../summary.txt
