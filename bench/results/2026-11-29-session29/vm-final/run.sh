#!/usr/bin/env bash
# Session 29, dev VM (2 vCPUs, Open MPI 4.1.4 ob1 + vader, CMA): the final tree (46cc0a1,
# NEW: repeated host calls straight to the launch, a group's numbers on the stack) against
# c484619 (OLD) and Open MPI, the loop of ../vm-repeat/run.sh (three alternated rounds, 2
# ranks bound, 4 unbound; 8 B-4 KiB; deferred broadcast, reduce, gather at 2 ranks).
set -u
O=$(dirname "$0")/logs; mkdir -p $O
make -C bench >/dev/null
SZ="-b 8 -e 4K -f 8"
CS="all_reduce all_gather reduce_scatter alltoall broadcast reduce gather sendrecv"
for r in 1 2 3; do for np in 2 4; do
  if [ $np = 2 ]; then B=(--bind-to core); FB=(--bind core); IT="-n 50000 -w 2000"
  else B=(--oversubscribe --bind-to none); FB=(--bind none); IT="-n 10000 -w 500"; fi
  M=(mpirun --allow-run-as-root -np $np "${B[@]}" --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  for c in $CS; do
    for v in old new; do
      if [ $v = old ]; then X=$OLD; else X=$NEW; fi
      timeout 120 $X --np $np "${FB[@]}" $SZ $IT -c 1 $c > $O/$v.$c.np$np.$r 2>&1
    done
    if [ $c = sendrecv ]; then P=bench/build/sendrecv; A=""; else P=bench/build/colls; A=$c; fi
    timeout 120 "${M[@]}" $P $SZ $IT -c 1 $A > $O/ompi.$c.np$np.$r 2>&1
  done
done; done
for r in 1 2 3; do for c in broadcast reduce gather; do for v in old new; do
  if [ $v = old ]; then X=$OLD; else X=$NEW; fi
  FERROCX_CHECK_CALLS=deferred timeout 120 $X --np 2 --bind core $SZ -n 50000 -w 2000 -c 1 $c > $O/def-$v.$c.np2.$r 2>&1
done; done; done
for np in 2 4; do for c in $CS; do for v in old new ompi; do
  printf "%-15s np%s %-9s" $c $np $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np$np.$r; done; echo
done; done; done > $O/../summary.txt
for c in broadcast reduce gather; do for v in old new; do
  printf "%-15s np2 def-%-5s" $c $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/def-$v.$c.np2.$r; done; echo
done; done >> $O/../summary.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/old.* $O/new.* $O/def-* >> $O/../summary.txt
cat $O/../summary.txt
