#!/usr/bin/env bash
# Session 34, call 1 (the nvidia-h200 machine's CPU, no GPU used): old = 19eee62 (the tree
# before this session), new = this session's p2p route (blocking send/recv and
# Communicator::sendrecv straight to the plugin; fxperf's host sendrecv calls sendrecv),
# against Open MPI (MPI_Sendrecv, vader), alternated. Part 1: 2 ranks bound, 8 rounds.
# Part 2: 4 ranks on 2 cores (taskset -c 0,1, not bound: oversubscribed as the dev VM's
# 4 ranks on 2 vCPUs), 8 rounds. Part 3: no regression on collectives: synchronous
# all_reduce and broadcast checked later, 2 ranks bound, 4 rounds.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_VISIBLE_DEVICES= FERROCX_TIMEOUT=20
T0=$SECONDS
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
lscpu | head -20 > $O/cpu.txt
SZ="-b 8 -e 4K -f 8"; IT="-n 100000 -w 2000"
M2=(mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 --mca btl self,vader)
M4=(taskset -c 0,1 mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader)
for r in $(seq 1 8); do
  for b in old new; do
    timeout 60 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 sendrecv > $O/sr2.$b.$r 2>&1
  done
  timeout 60 "${M2[@]}" $O/mpibuild/sendrecv $SZ $IT -c 0 > $O/sr2.ompi.$r 2>&1
done
for r in $(seq 1 8); do
  for b in old new; do
    timeout 60 taskset -c 0,1 gpu-run/ab/$b/fxperf --np 4 --bind none $SZ -n 50000 -w 1000 -c 0 sendrecv > $O/sr4.$b.$r 2>&1
  done
  timeout 60 "${M4[@]}" $O/mpibuild/sendrecv $SZ -n 50000 -w 1000 -c 0 > $O/sr4.ompi.$r 2>&1
done
for r in $(seq 1 4); do
  for b in old new; do
    timeout 60 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 all_reduce > $O/ar2.$b.$r 2>&1
    FERROCX_CHECK_CALLS=deferred timeout 60 gpu-run/ab/$b/fxperf --np 2 --bind core $SZ $IT -c 0 broadcast > $O/bc2.$b.$r 2>&1
  done
  timeout 60 "${M2[@]}" $O/mpibuild/colls $SZ $IT -c 0 all_reduce > $O/ar2.ompi.$r 2>&1
  timeout 60 "${M2[@]}" $O/mpibuild/colls $SZ $IT -c 0 broadcast > $O/bc2.ompi.$r 2>&1
done
# A checked run of each new path (bytes compared).
timeout 60 gpu-run/ab/new/fxperf --np 2 --bind core $SZ -n 2000 -w 100 -c 1 sendrecv > $O/check.sr2 2>&1
timeout 60 taskset -c 0,1 gpu-run/ab/new/fxperf --np 4 --bind none $SZ -n 2000 -w 100 -c 1 sendrecv > $O/check.sr4 2>&1
rm -rf $O/mpibuild
{
for t in sr2:8 sr4:8 ar2:4 bc2:4; do k=${t%:*}; n=${t#*:}; for b in old new ompi; do
  printf "%-10s" $k.$b; for r in $(seq 1 $n); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$k.$b.$r; done; echo
done; done
echo "checked runs, wrong: $(awk '/^ +[0-9]+ /{w+=$9} END{print w+0}' $O/check.sr2 $O/check.sr4) (rows: $(grep -c '^ \+[0-9]\+ ' $O/check.sr2 $O/check.sr4 | tr '\n' ' '))"
echo "done at $((SECONDS-T0))s"
} > $O/p2p.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/p2p.txt
