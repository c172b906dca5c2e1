#!/usr/bin/env bash
# Session 33, one call on the nvidia-h200 machine's CPU (16 Xeon cores, no GPU used):
# host memory against Open MPI. Part 1, A/B: base = 95341a4's parent tree (43abc36,
# credits every message), new = 95341a4 (credits every quarter ring, a few
# instructions fewer), both checked later, and new synchronous; broadcast, reduce and
# all_reduce, 2 and 4 ranks bound, alternated, 3 rounds. Part 2: the whole target table
# on the new tree (sync / deferred / Open MPI), 2 rounds.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES= FERROCX_TIMEOUT=20
T0=$SECONDS; S=$O/summary.txt; : > $S
{ lscpu | grep -E "Model name|^CPU\(s\)|MHz"; mpirun --version | head -1; } > $O/machine.txt 2>&1
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
SZ="-b 8 -e 4K -f 8"; IT="-n 20000 -w 1000"
mpi() { # np coll out
  local np=$1 c=$2 out=$3
  local M=(mpirun --allow-run-as-root -np $np --bind-to core --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
  timeout 60 "${M[@]}" $P $SZ $IT -c 1 $A > $out 2>&1
}
for r in 1 2 3; do for np in 2 4; do for c in broadcast reduce all_reduce; do
  FERROCX_CHECK_CALLS=deferred timeout 60 gpu-run/ab/base/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/ab.base-def.$c.np$np.$r 2>&1
  FERROCX_CHECK_CALLS=deferred timeout 60 gpu-run/ab/new/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/ab.new-def.$c.np$np.$r 2>&1
  timeout 60 gpu-run/ab/new/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/ab.new-sync.$c.np$np.$r 2>&1
  mpi $np $c $O/ab.ompi.$c.np$np.$r
done; done; done
echo "A/B done at $((SECONDS-T0))s" >> $S
for np in 2 4; do for c in broadcast reduce all_reduce; do for v in base-def new-def new-sync ompi; do
  printf "%-11s np%s %-9s" $c $np $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/ab.$v.$c.np$np.$r; done; echo
done; done; done > $O/ab.txt
CS="all_reduce all_gather reduce_scatter alltoall broadcast sendrecv"
for r in 1 2; do for np in 2 4; do for c in $CS; do
  timeout 60 gpu-run/ab/new/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/sync.$c.np$np.$r 2>&1
  FERROCX_CHECK_CALLS=deferred timeout 60 gpu-run/ab/new/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/deferred.$c.np$np.$r 2>&1
  mpi $np $c $O/ompi.$c.np$np.$r
  [ $((SECONDS-T0)) -gt 540 ] && break 3
done; done; done
rm -rf $O/mpibuild
for np in 2 4; do for c in $CS; do for v in sync deferred ompi; do
  printf "%-15s np%s %-8s" $c $np $v; for r in 1 2; do [ -f $O/$v.$c.np$np.$r ] && awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np$np.$r; done; echo
done; done; done > $O/host.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/ab.* $O/sync.* $O/deferred.* >> $O/host.txt
grep -h "Out of bounds\|Wrong elements" $O/ompi.* $O/ab.ompi.* | sort | uniq -c >> $O/host.txt
echo "host done at $((SECONDS-T0))s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S $O/machine.txt $O/ab.txt $O/host.txt
