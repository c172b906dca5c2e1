#!/usr/bin/env bash
# Session 33, call 2 (the nvidia-h200 machine's CPU, no GPU used): what bounds a 2-rank
# broadcast checked later on this Xeon. new = this tree; newcut = this tree with four
# per-call checks removed (measurement only, never kept: the plugins' status poll, the
# hang report's call record, shm-coll's point-to-point check before a collective and its
# look for unheard messages; 330 instructions fewer per call on the dev VM); np 1 = the
# same path with no peer. Alternated, 3 rounds, against Open MPI. Call 3 ran it again
# with ROUNDS=12 NPS=2 (this machine's speed drifts from round to round).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES= FERROCX_TIMEOUT=20 FERROCX_CHECK_CALLS=deferred
T0=$SECONDS
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
SZ="-b 8 -e 512 -f 8"; IT="-n 200000 -w 2000"
R=${ROUNDS:-3}
for r in $(seq 1 $R); do
  for b in new newcut; do for np in ${NPS:-1 2}; do
    timeout 60 gpu-run/ab/$b/fxperf --np $np --bind core $SZ $IT -c 0 broadcast > $O/$b.np$np.$r 2>&1
  done; done
  timeout 60 mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 --mca btl self,vader $O/mpibuild/colls $SZ $IT -c 0 broadcast > $O/ompi.np2.$r 2>&1
done
rm -rf $O/mpibuild
for f in new.np1 new.np2 newcut.np1 newcut.np2 ompi.np2; do
  [ -f $O/$f.1 ] || continue
  printf "%-11s" $f; for r in $(seq 1 $R); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$f.$r; done; echo
done > $O/floor.txt
echo "done at $((SECONDS-T0))s" >> $O/floor.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/floor.txt
