#!/usr/bin/env bash
# Session 14, call 4 (4 GPUs): with device sends to 1 MiB as LL lines, the NCCL drop-in
# under nccl-tests with MPI at 4 ranks (alltoall, sendrecv: grouped sends and receives)
# next to fxperf --np 4 and NCCL -g 4; torch.distributed on the drop-in at 4 ranks.
set -u
O=$OUT/r; mkdir -p $O/m $O/n $O/t
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
S=$O/summary.txt
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
NP=4 SIZES="-b 8 -e 64M -f 4" ITERS="-n 100 -w 10" PERF_COLLS="alltoall sendrecv" MPI_BENCHES="alltoall sendrecv" STEP_TIMEOUT=90 \
  timeout 300 bash scripts/gpu-check.sh $B $O/m perf mpi > $O/console-m.txt 2>&1; echo "mpi rc=$? at $((SECONDS-T0))s" >> $S
NP=4 SIZES="-b 8 -e 64M -f 4" ITERS="-n 100 -w 10" PERF_COLLS="alltoall sendrecv" STEP_TIMEOUT=90 \
  timeout 150 bash scripts/gpu-check.sh $B $O/n nccl > $O/console-n.txt 2>&1; echo "nccl rc=$? at $((SECONDS-T0))s" >> $S
left=$((560 - SECONDS + T0))
[ $left -gt 40 ] && DROPIN_RANKS=4 STEP_TIMEOUT=$left timeout $left bash scripts/gpu-check.sh $B $O/t dropin-torch > $O/console-t.txt 2>&1; echo "torch rc=$? at $((SECONDS-T0))s" >> $S
rm -rf $O/*/nccl-build.log $O/*/mpi-build.log
tar czf $OUT/logs.tgz -C $O .
cat $S; head -5 $O/gpus.txt
for b in alltoall sendrecv; do echo "== $b fxperf / drop-in / nccl (us oop, ip)"; for f in $O/m/fxperf-$b.log $O/m/dropin-mpi-$b.log $O/n/nccl-$b.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done; done
tail -15 $O/t/dropin-torch.log
