#!/usr/bin/env bash
# Session 29, call 3 (one H200 host, 16 Xeon cores, no GPU visible to the ranks): the
# final tree (46cc0a1, `new`) against c484619 (`base`) and Open MPI 4.1.6, the loop of
# ../h200-repeat/run.sh (which measured 585a444): three alternated rounds, 2 and 4 ranks
# bound, 8 B-4 KiB, default settings; then deferred broadcast, reduce, gather at 2 ranks.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES=
{ lscpu | grep -E "Model name|^CPU\(s\)"; mpirun --version | head -1; } > $O/machine.txt 2>&1
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
SZ="-b 8 -e 4K -f 8"; IT="-n 50000 -w 2000"; T0=$SECONDS
CS="all_reduce all_gather reduce_scatter alltoall broadcast reduce gather sendrecv"
for r in 1 2 3; do for np in 2 4; do
  [ $((SECONDS-T0)) -gt 420 ] && break
  M=(mpirun --allow-run-as-root -np $np --bind-to core --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  for c in $CS; do
    for v in base new; do
      timeout 60 gpu-run/ab29/$v/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/$v.$c.np$np.$r 2>&1
    done
    if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
    timeout 60 "${M[@]}" $P $SZ $IT -c 1 $A > $O/ompi.$c.np$np.$r 2>&1
  done
done; done
for r in 1 2; do for c in broadcast reduce gather; do for v in base new; do
  [ $((SECONDS-T0)) -gt 540 ] && break
  FERROCX_CHECK_CALLS=deferred timeout 60 gpu-run/ab29/$v/fxperf --np 2 --bind core $SZ $IT -c 1 $c > $O/def-$v.$c.np2.$r 2>&1
done; done; done
rm -rf $O/mpibuild
for np in 2 4; do for c in $CS; do for v in base new ompi; do
  printf "%-15s np%s %-9s" $c $np $v; for r in 1 2 3; do [ -f $O/$v.$c.np$np.$r ] && awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np$np.$r; done; echo
done; done; done > $O/summary.txt
for c in broadcast reduce gather; do for v in base new; do
  printf "%-15s np2 def-%-5s" $c $v; for r in 1 2; do [ -f $O/def-$v.$c.np2.$r ] && awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/def-$v.$c.np2.$r; done; echo
done; done >> $O/summary.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/base.* $O/new.* $O/def-* >> $O/summary.txt
echo "took $((SECONDS-T0)) s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt
