#!/usr/bin/env bash
# Session 23, call 3: the collective bids remembered per shape (new) against the tree
# before (old = a856ba9), host memory, 2 and 4 ranks bound to cores, no GPU visible,
# alternating three rounds; Open MPI in the same loop.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES=
{ lscpu | grep -E "Model name|^CPU\(s\)"; mpirun --version | head -1; } > $O/machine.txt 2>&1
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
SZ="-b 8 -e 512 -f 8"; IT="-n 50000 -w 2000"
for r in 1 2 3; do for np in 2 4; do
  M=(mpirun --allow-run-as-root -np $np --bind-to core --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  for c in all_reduce all_gather alltoall reduce_scatter broadcast sendrecv; do
    for v in old new; do
      timeout 60 gpu-run/abK/fxperf-$v --np $np --bind core $SZ $IT -c 1 $c > $O/$v.$c.np$np.$r 2>&1
    done
    if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
    timeout 60 "${M[@]}" $P $SZ $IT -c 1 $A > $O/ompi.$c.np$np.$r 2>&1
  done
done; done
rm -rf $O/mpibuild
tar czf $OUT/logs.tgz -C $O .
for np in 2 4; do for c in all_reduce all_gather alltoall reduce_scatter broadcast sendrecv; do for v in old new ompi; do
  printf "%-15s np%s %-5s" $c $np $v; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np$np.$r; done; echo
done; done; done
