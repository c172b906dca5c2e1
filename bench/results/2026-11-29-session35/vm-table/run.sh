#!/usr/bin/env bash
# Session 35, dev VM (2 vCPUs): the target table on 83b4625 (FX), sync / deferred / Open MPI,
# 2 ranks bound and 4 ranks oversubscribed (not bound), 3 rounds alternated, 8 B-4 KiB.
# Run from the repository root: bench/results/2026-11-29-session35/vm-table/run.sh
set -u
O=$(dirname "$0"); FX=${FX:-target/release/fxperf}
make -C bench >/dev/null
SZ="-b 8 -e 4K -f 8"
CS="all_reduce all_gather reduce_scatter alltoall broadcast sendrecv"
for r in 1 2 3; do for np in 2 4; do
  if [ $np = 2 ]; then FB=(--bind core); MB=(--bind-to core); IT="-n 20000 -w 1000"; else FB=(--bind none); MB=(--oversubscribe --bind-to none); IT="-n 5000 -w 500"; fi
  M=(mpirun --allow-run-as-root -np $np "${MB[@]}" --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  for c in $CS; do
    timeout 120 $FX --np $np "${FB[@]}" $SZ $IT -c 1 $c > $O/sync.$c.np$np.$r 2>&1
    FERROCX_CHECK_CALLS=deferred timeout 120 $FX --np $np "${FB[@]}" $SZ $IT -c 1 $c > $O/deferred.$c.np$np.$r 2>&1
    if [ $c = sendrecv ]; then P=bench/build/sendrecv; A=""; else P=bench/build/colls; A=$c; fi
    timeout 120 "${M[@]}" $P $SZ $IT -c 1 $A > $O/ompi.$c.np$np.$r 2>&1
  done
done; done
for np in 2 4; do for c in $CS; do for v in sync deferred ompi; do
  printf "%-15s np%s %-8s" $c $np $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np$np.$r; done; echo
done; done; done > $O/host.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/sync.* $O/deferred.* >> $O/host.txt
grep -h "Out of bounds\|Wrong elements" $O/ompi.* | sort | uniq -c >> $O/host.txt
