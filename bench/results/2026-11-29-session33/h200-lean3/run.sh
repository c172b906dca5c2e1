#!/usr/bin/env bash
# Session 33, call 5 (the nvidia-h200 machine's CPU, no GPU used): base = 43abc36 (the
# tree before this session), lean = this session's final tree (credits every quarter ring, peer sets once
# per call, rare paths out of line, the status poll skipped without device plugins,
# a repeated call's derivations reused),
# against Open MPI, 2 ranks bound, alternated. Part 1: broadcast checked later, 12
# rounds (this machine's speed drifts from round to round). Part 2: the default
# (synchronous) check, broadcast and all_reduce, and sendrecv, 6 rounds; broadcast checked
# later at 4 ranks bound, 6 rounds. lean is 265e8f7.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES= FERROCX_TIMEOUT=20
T0=$SECONDS
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
SZ="-b 8 -e 512 -f 8"; IT="-n 200000 -w 2000"
M=(mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 --mca btl self,vader)
for r in $(seq 1 12); do
  for b in base lean; do
    FERROCX_CHECK_CALLS=deferred timeout 60 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 broadcast > $O/def.$b.broadcast.$r 2>&1
  done
  timeout 60 "${M[@]}" $O/mpibuild/colls $SZ $IT -c 0 broadcast > $O/def.ompi.broadcast.$r 2>&1
done
for r in $(seq 1 6); do
  for b in base lean; do
    FERROCX_CHECK_CALLS=deferred timeout 60 gpu-run/ab/$b/fxperf --np 4 --bind core $SZ $IT -c 0 broadcast > $O/def4.$b.broadcast.$r 2>&1
  done
  timeout 60 mpirun --allow-run-as-root -np 4 --bind-to core --mca pml ob1 --mca btl self,vader $O/mpibuild/colls $SZ $IT -c 0 broadcast > $O/def4.ompi.broadcast.$r 2>&1
done
for r in $(seq 1 6); do for c in broadcast all_reduce sendrecv; do
  for b in base lean; do
    timeout 60 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 $c > $O/sync.$b.$c.$r 2>&1
  done
  if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
  timeout 60 "${M[@]}" $P $SZ $IT -c 0 $A > $O/sync.ompi.$c.$r 2>&1
done; done
rm -rf $O/mpibuild
{
for f in def.base.broadcast def.lean.broadcast def.ompi.broadcast; do
  printf "%-20s" $f; for r in $(seq 1 12); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$f.$r; done; echo
done
for b in base lean ompi; do
  printf "%-20s" def4.$b.broadcast; for r in $(seq 1 6); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/def4.$b.broadcast.$r; done; echo
done
for c in broadcast all_reduce sendrecv; do for b in base lean ompi; do
  printf "%-20s" sync.$b.$c; for r in $(seq 1 6); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/sync.$b.$c.$r; done; echo
done; done
echo "done at $((SECONDS-T0))s"
} > $O/lean.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/lean.txt
