#!/usr/bin/env bash
# Session 32, call 1 (one H200, ranks under MPS): a communicator aborted then dropped, or
# dropped live, while another thread of each rank captures in global mode. m0 = the tree
# without the relaxed drop (the worker alone differs); lite = this tree. Then the graph,
# destroy and capture device tests. Then host memory on this machine's CPU (no GPU visible)
# against Open MPI: 2 and 4 ranks bound to cores, sync check / deferred / Open MPI,
# alternated, 2 rounds, 8 B-4 KiB.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=20 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/lite; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
{ nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)"; mpirun --version | head -1; } > $O/machine.txt 2>&1
run() {  # run NAME LIMIT CMD...
  local n=$1 l=$2; shift 2
  timeout $l "$@" > $O/$n.log 2>&1
  echo "$n rc=$? at $((SECONDS-T0))s: $(grep -E 'FAIL|PASS' $O/$n.log | head -2 | cut -c1-300)" >> $S
}
# The first communicator on a fresh machine compiles ce's kernels (then cached).
run warm 180 $B/fxrun -n 2 -- $B/fxtest-worker dev-smoke
for k in 1 2; do for w in m0 lite; do for how in abort drop; do
  run drop-$w-$how-$k 60 $B/fxrun -n 2 -- gpu-run/$w/fxtest-worker dropped-in-capture $how
done; done; done
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 250 $B/device-tests global destroy dropped --test-threads 1 > $O/device.log 2>&1
echo "device-tests (global destroy dropped) rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
# Host memory on this CPU.
export CUDA_VISIBLE_DEVICES=
unset FERROCX_REQUIRE_GPU
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
SZ="-b 8 -e 4K -f 8"; IT="-n 20000 -w 1000"
CS="all_reduce all_gather reduce_scatter alltoall broadcast sendrecv"
for r in 1 2; do for np in 2 4; do
  M=(mpirun --allow-run-as-root -np $np --bind-to core --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
  for c in $CS; do
    timeout 60 $B/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/sync.$c.np$np.$r 2>&1
    FERROCX_CHECK_CALLS=deferred timeout 60 $B/fxperf --np $np --bind core $SZ $IT -c 1 $c > $O/deferred.$c.np$np.$r 2>&1
    if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
    timeout 60 "${M[@]}" $P $SZ $IT -c 1 $A > $O/ompi.$c.np$np.$r 2>&1
  done
done; done
rm -rf $O/mpibuild
for np in 2 4; do for c in $CS; do for v in sync deferred ompi; do
  printf "%-15s np%s %-8s" $c $np $v; for r in 1 2; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$c.np$np.$r; done; echo
done; done; done > $O/host.txt
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/sync.* $O/deferred.* >> $O/host.txt
grep -h "Out of bounds\|Wrong elements" $O/ompi.* | sort | uniq -c >> $O/host.txt
echo "host done at $((SECONDS-T0))s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device.log | tail -12
cat $O/host.txt
