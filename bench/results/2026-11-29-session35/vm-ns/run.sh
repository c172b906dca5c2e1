#!/usr/bin/env bash
# Session 35, dev VM (2 vCPUs): nanoseconds per 8-byte broadcast checked later, from wall
# time (fxperf prints two decimals of a microsecond, too coarse here): N calls minus a run of
# 10, per call; fxperf times N out-of-place and N in-place calls, Open MPI's colls N
# out-of-place ones. 1 rank and 2 ranks bound, OLD (3dcbafe) against NEW, and Open MPI at
# 2 ranks; 5 rounds alternated. Output: ns.txt.
set -u
O=$(dirname "$0"); OLD=${OLD:?an fxperf of 3dcbafe}; NEW=${NEW:-target/release/fxperf}
N=4000000
ns() { # calls-per-run command...
  local k=$1; shift
  local s e s2 e2
  s=$(date +%s%N); "$@" -n $N -w 10 >/dev/null 2>&1; e=$(date +%s%N)
  s2=$(date +%s%N); "$@" -n 10 -w 10 >/dev/null 2>&1; e2=$(date +%s%N)
  echo $(( ((e - s) - (e2 - s2)) / (k * N) ))
}
export FERROCX_CHECK_CALLS=deferred
for r in 1 2 3 4 5; do
  line=""
  for np in 1 2; do for v in OLD NEW; do
    line="$line np$np-${v,,} $(ns 2 ${!v} --np $np --bind core -b 8 -e 8 -c 0 broadcast)"
  done; done
  line="$line np2-ompi $(ns 1 mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 --mca btl self,vader bench/build/colls -b 8 -e 8 -c 0 broadcast)"
  echo "$line"
done | tee $O/ns.txt
