#!/usr/bin/env bash
# Session 28, dev VM (2 vCPUs): the synchronous check's rings without credits
# (lockstep) against the tree before it (a7c4cee), Open MPI in the same loop,
# alternated three rounds; 2 ranks bound to cores and 4 oversubscribed, 8 B-4 KiB,
# default settings (synchronous check). BASE and NEW are the two fxperf binaries.
set -u
O=${OUT:-$(dirname "$0")}/logs; mkdir -p $O
SZ="-b 8 -e 4K -f 8"
CS="all_reduce all_gather reduce_scatter alltoall broadcast reduce gather sendrecv"
for r in 1 2 3; do for np in 2 4; do
  if [ $np = 2 ]; then B="--bind core"; MB="--bind-to core"; IT="-n 50000 -w 2000"; else B="--bind none"; MB="--oversubscribe --bind-to none"; IT="-n 5000 -w 500"; fi
  M=(mpirun --allow-run-as-root -np $np $MB --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  for c in $CS; do
    for v in base new; do
      if [ $v = base ]; then X=$BASE; else X=$NEW; fi
      timeout 120 $X --np $np $B $SZ $IT -c 1 $c > $O/$v.$c.np$np.$r 2>&1
    done
    if [ $c = sendrecv ]; then P=bench/build/sendrecv; A=""; else P=bench/build/colls; A=$c; fi
    timeout 120 "${M[@]}" $P $SZ $IT -c 1 $A > $O/ompi.$c.np$np.$r 2>&1
  done
done; done
for np in 2 4; do for c in $CS; do for v in base new ompi; do
  printf "%-15s np%s %-5s" $c $np $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np$np.$r; done; echo
done; done; done > $O/../summary.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/base.* $O/new.* >> $O/../summary.txt
cat $O/../summary.txt
