#!/usr/bin/env bash
# Session 34, call 2 (the nvidia-h200 machine's CPU, no GPU used; call 1 ran out of time:
# ranks under taskset looked unshared to the old tree and spun). old = 19eee62 (the tree
# before this session), new = 5a887f6 (blocking send/recv and Communicator::sendrecv
# straight to the plugin, fxperf's host sendrecv calling sendrecv; shm-coll's sharing
# found from the ranks' CPU affinity), against Open MPI 4.1 (vader), alternated.
# 1: sendrecv, 2 ranks bound, 8 rounds. 2: all_reduce sync, broadcast checked later,
# 2 ranks bound, 4 rounds. 3: 4 ranks on 2 cores (taskset -c 0,1, unbound), the target
# table sync / deferred / Open MPI (--oversubscribe), 3 rounds; old once at -n 2000.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES= FERROCX_TIMEOUT=20
T0=$SECONDS; left() { [ $((SECONDS-T0)) -lt ${1:-420} ]; }
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
lscpu | head -20 > $O/cpu.txt
SZ="-b 8 -e 4K -f 8"; IT="-n 100000 -w 2000"
M2=(mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 --mca btl self,vader)
M4=(taskset -c 0,1 mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader)
for r in $(seq 1 8); do
  for b in old new; do timeout 30 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 sendrecv > $O/sr2.$b.$r 2>&1; done
  timeout 30 "${M2[@]}" $O/mpibuild/sendrecv $SZ $IT -c 0 > $O/sr2.ompi.$r 2>&1
done
echo "part 1 at $((SECONDS-T0))s" > $O/times.txt
for r in $(seq 1 4); do
  for b in old new; do
    timeout 30 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 all_reduce > $O/ar2.$b.$r 2>&1
    FERROCX_CHECK_CALLS=deferred timeout 30 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 broadcast > $O/bc2.$b.$r 2>&1
  done
  timeout 30 "${M2[@]}" $O/mpibuild/colls $SZ $IT -c 0 all_reduce > $O/ar2.ompi.$r 2>&1
  timeout 30 "${M2[@]}" $O/mpibuild/colls $SZ $IT -c 0 broadcast > $O/bc2.ompi.$r 2>&1
done
echo "part 2 at $((SECONDS-T0))s" >> $O/times.txt
CS="all_reduce all_gather reduce_scatter alltoall broadcast sendrecv"
I4="-n 20000 -w 500"
for r in 1 2 3; do for c in $CS; do
  left || break 2
  timeout 30 taskset -c 0,1 gpu-run/ab/new/fxperf --np 4 --bind none $SZ $I4 -c 1 $c > $O/o4.sync.$c.$r 2>&1
  FERROCX_CHECK_CALLS=deferred timeout 30 taskset -c 0,1 gpu-run/ab/new/fxperf --np 4 --bind none $SZ $I4 -c 1 $c > $O/o4.deferred.$c.$r 2>&1
  if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
  timeout 30 "${M4[@]}" $P $SZ $I4 -c 1 $A > $O/o4.ompi.$c.$r 2>&1
done; done
left 450 && timeout 40 taskset -c 0,1 gpu-run/ab/old/fxperf --np 4 --bind none $SZ -n 2000 -w 50 -c 0 sendrecv > $O/o4.old.sendrecv.1 2>&1
echo "part 3 at $((SECONDS-T0))s" >> $O/times.txt
rm -rf $O/mpibuild
{
for t in sr2:8 ar2:4 bc2:4; do k=${t%:*}; n=${t#*:}; for b in old new ompi; do
  printf "%-10s" $k.$b; for r in $(seq 1 $n); do [ -f $O/$k.$b.$r ] && awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$k.$b.$r; done; echo
done; done
for c in $CS; do for v in sync deferred ompi; do
  printf "%-15s %-9s" $c $v; for r in 1 2 3; do [ -f $O/o4.$v.$c.$r ] && awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/o4.$v.$c.$r; done; echo
done; done
printf "%-25s" "sendrecv old (4 on 2)"; awk '/^ +[0-9]+ /{printf " %s", $6}' $O/o4.old.sendrecv.1 2>/dev/null; echo
echo "fxperf wrong (4 on 2, checked): $(cat $O/o4.sync.* $O/o4.deferred.* 2>/dev/null | awk '/^ +[0-9]+ /{w+=$9} END{print w+0}')"
grep -h "Out of bounds\|Wrong elements" $O/o4.ompi.* 2>/dev/null | sort | uniq -c
cat $O/times.txt
} > $O/p2p.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/p2p.txt
