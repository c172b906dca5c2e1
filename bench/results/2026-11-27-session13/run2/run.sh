#!/usr/bin/env bash
# Session 13, call 2 (4 GPUs): (q) ce retiring launches by one query of the newest
# (fxperf) against the tree before (fxperf-base), 2 ranks, small sizes, with spans;
# (m) the NCCL drop-in under nccl-tests with MPI at 4 ranks next to fxperf (issue 21's
# "within 5 %"); (t) 4-rank tuning sweeps where the 4-rank table loses (all_reduce one- vs
# two-shot and routes, reduce_scatter and broadcast Simple blocks); (k) 2 ranks on GPUs
# 0,1 of the same host for the 2 -> 4 scaling rows (all_reduce, alltoall) next to NCCL -g 2.
set -u
O=$OUT/r; mkdir -p $O/q $O/t $O/m $O/k
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
S=$O/summary.txt
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
for round in 1 2; do
  for bin in fxperf-base fxperf; do
    for c in all_reduce sendrecv; do
      FERROCX_SPANS=1 timeout 60 $B/$bin --np 2 --mem cuda -b 8 -e 64K -f 8 -n 1000 -w 100 -c 1 $c > $O/q/$bin-$c-r$round.log 2>&1
      echo "$bin $c r$round rc=$? at $((SECONDS-T0))s" >> $S
    done
  done
done
NP=4 SIZES="-b 8 -e 64M -f 8" ITERS="-n 50 -w 10" PERF_COLLS="sendrecv all_reduce all_gather alltoall broadcast reduce_scatter" \
  MPI_BENCHES="sendrecv all_reduce all_gather alltoall broadcast reduce_scatter" STEP_TIMEOUT=60 \
  timeout 260 bash scripts/gpu-check.sh $B $O/m perf mpi > $O/console-m.txt 2>&1; echo "mpi rc=$? at $((SECONDS-T0))s" >> $S
t() {  # t NAME COLL SIZES ENV...
  local n=$1 c=$2 sz=$3; shift 3
  env "$@" timeout 40 $B/fxperf --np 4 --mem cuda $sz -n 20 -w 5 -c 1 $c > $O/t/$n.log 2>&1; echo "t $n rc=$? at $((SECONDS-T0))s" >> $S
}
AR="-b 1M -e 64M -f 2"
t ar-auto all_reduce "$AR"
t ar-twoshot all_reduce "$AR" FERROCX_CE_ONESHOT_BYTES=0
t ar-blocks128 all_reduce "$AR" FERROCX_CE_SIMPLE_BLOCKS=128
t ar-slot256k all_reduce "$AR" FERROCX_CE_SIMPLE_SLOT=262144
RS="-b 32M -e 1G -f 4"
t rs-auto reduce_scatter "$RS"
t rs-blocks128 reduce_scatter "$RS" FERROCX_CE_SIMPLE_BLOCKS=128
t rs-slot256k reduce_scatter "$RS" FERROCX_CE_SIMPLE_SLOT=262144
BC="-b 16M -e 256M -f 2"
t bc-auto broadcast "$BC"
t bc-blocks128 broadcast "$BC" FERROCX_CE_SIMPLE_BLOCKS=128
t bc-slot256k broadcast "$BC" FERROCX_CE_SIMPLE_SLOT=262144
left=$((575 - SECONDS + T0))
[ $left -gt 60 ] && CUDA_VISIBLE_DEVICES=0,1 NP=2 SIZES="-b 8 -e 1G -f 4" PERF_COLLS="all_reduce alltoall" STEP_TIMEOUT=60 \
  timeout $left bash scripts/gpu-check.sh $B $O/k perf nccl > $O/console-k.txt 2>&1; echo "k rc=$? at $((SECONDS-T0))s" >> $S
rm -rf $O/*/nccl-build.log $O/*/mpi-build.log
tar czf $OUT/logs.tgz -C $O .
cat $S; head -4 $O/gpus.txt
for f in $O/q/*-r2.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s ", $1, $6}'; echo; grep -E "order|cuLaunch|ce: collective" $f | head -4; done
for b in sendrecv all_reduce all_gather alltoall broadcast reduce_scatter; do echo "== $b fxperf / drop-in (us oop, ip)"; for f in $O/m/fxperf-$b.log $O/m/dropin-mpi-$b.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $10}'; echo; done; done
for f in $O/t/*.log; do echo "$(basename $f .log): $(grep -E '^ +[0-9]' $f | awk '{printf "%s:%s/%s ", $1, $6, $10}')"; done
for b in all_reduce alltoall; do echo "== k $b fx / nccl"; for f in $O/k/fxperf-$b.log $O/k/nccl-$b.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $10}'; echo; done; done
