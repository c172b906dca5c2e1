#!/usr/bin/env bash
# Session 35, call 3, the nvidia-h200 machine's CPU (no GPU used). old = 3dcbafe (session 34's
# tree), mid = 4f07de7 (8c95caa, shm-coll's collective heads apart from their slots: a line per
# message side by side, 64 deep unless in lockstep; then small copies inline, peer sets once
# per shape, a repeat's fingerprint renumbered), new = 83b4625 (no store-forwarding stalls, no
# locked add per call), against Open MPI 4.1 (vader).
# 1: broadcast checked later, 2 ranks bound, old/mid/new/Open MPI, 6 rounds.
# 2: the target table, 2 ranks bound, new sync / new deferred / Open MPI, 3 rounds.
# 3: 4 ranks on 2 cores (taskset -c 0,1, unbound; Open MPI told to yield): broadcast
#    checked later old/new/Open MPI, 6 rounds; then the table, new sync/deferred/Open MPI, 3 rounds.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES= FERROCX_TIMEOUT=20
T0=$SECONDS; left() { [ $((SECONDS-T0)) -lt ${1:-480} ]; }
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
lscpu | head -20 > $O/cpu.txt
SZ="-b 8 -e 4K -f 8"; IT="-n 100000 -w 2000"
M2=(mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 --mca btl self,vader)
M4=(taskset -c 0,1 mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca pml ob1 --mca btl self,vader)
for r in $(seq 1 6); do
  for b in old mid new; do FERROCX_CHECK_CALLS=deferred timeout 30 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 broadcast > $O/bc2.$b.$r 2>&1; done
  timeout 30 "${M2[@]}" $O/mpibuild/colls $SZ $IT -c 0 broadcast > $O/bc2.ompi.$r 2>&1
done
echo "part 1 at $((SECONDS-T0))s" > $O/times.txt
CS="all_reduce all_gather reduce_scatter alltoall broadcast sendrecv"
for r in 1 2 3; do for c in $CS; do
  left 300 || break 2
  timeout 30 gpu-run/ab/new/fxperf --np 2 --bind core $SZ $IT -c 1 $c > $O/t2.sync.$c.$r 2>&1
  FERROCX_CHECK_CALLS=deferred timeout 30 gpu-run/ab/new/fxperf --np 2 --bind core $SZ $IT -c 1 $c > $O/t2.deferred.$c.$r 2>&1
  if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
  timeout 30 "${M2[@]}" $P $SZ $IT -c 1 $A > $O/t2.ompi.$c.$r 2>&1
done; done
echo "part 2 at $((SECONDS-T0))s" >> $O/times.txt
I4="-n 20000 -w 500"
for r in 1 2 3 4 5 6; do
  left 420 || break
  for b in old new; do FERROCX_CHECK_CALLS=deferred timeout 30 taskset -c 0,1 gpu-run/ab/$b/fxperf --np 4 --bind none $SZ $I4 -c 0 broadcast > $O/bc4.$b.$r 2>&1; done
  timeout 30 "${M4[@]}" $O/mpibuild/colls $SZ $I4 -c 0 broadcast > $O/bc4.ompi.$r 2>&1
done
for r in 1 2 3; do for c in $CS; do
  left || break 2
  timeout 30 taskset -c 0,1 gpu-run/ab/new/fxperf --np 4 --bind none $SZ $I4 -c 1 $c > $O/t4.sync.$c.$r 2>&1
  FERROCX_CHECK_CALLS=deferred timeout 30 taskset -c 0,1 gpu-run/ab/new/fxperf --np 4 --bind none $SZ $I4 -c 1 $c > $O/t4.deferred.$c.$r 2>&1
  if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
  timeout 30 "${M4[@]}" $P $SZ $I4 -c 1 $A > $O/t4.ompi.$c.$r 2>&1
done; done
echo "part 3 at $((SECONDS-T0))s" >> $O/times.txt
rm -rf $O/mpibuild
row() { printf "%-28s" "$1"; shift; for f in "$@"; do [ -f $f ] && awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $f; done; echo; }
{
for b in old mid new ompi; do row "bc2 deferred $b" $(ls $O/bc2.$b.* 2>/dev/null | sort -t. -k3 -n); done
for c in $CS; do for v in sync deferred ompi; do row "np2 $c $v" $O/t2.$v.$c.1 $O/t2.$v.$c.2 $O/t2.$v.$c.3; done; done
for b in old new ompi; do row "bc4 deferred $b" $(ls $O/bc4.$b.* 2>/dev/null | sort -t. -k3 -n); done
for c in $CS; do for v in sync deferred ompi; do row "np4 $c $v" $O/t4.$v.$c.1 $O/t4.$v.$c.2 $O/t4.$v.$c.3; done; done
echo "fxperf wrong (checked runs): $(cat $O/t2.sync.* $O/t2.deferred.* $O/t4.sync.* $O/t4.deferred.* 2>/dev/null | awk '/^ +[0-9]+ /{w+=$9+$13} END{print w+0}')"
grep -h "Out of bounds\|Wrong elements" $O/t2.ompi.* $O/t4.ompi.* 2>/dev/null | sort | uniq -c
cat $O/times.txt
} > $O/table.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/table.txt
