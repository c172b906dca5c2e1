#!/usr/bin/env bash
# Session 18, call 2: the same tree (522cba8) again — the whole 2-rank table (p1/ 8 B-8 MiB
# at -n 200, p2/ 16 MiB-1 GiB at -n 40); then the NCCL drop-in under mpirun -np 2 next to
# fxperf on the same sizes, buffers registered on both sides (-R 1, d1/) and on neither
# (-R 0, d0/): the layer's cost apart from registration. fxperf alltoall_sends is the same
# grouped sends and receives nccl-tests' alltoall makes.
set -u
O=$OUT/r; mkdir -p $O/p1 $O/p2 $O/d1 $O/d0
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; command -v mpirun mpicc; } > $O/gpus.txt 2>&1
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 200 -w 20" SIZES="-b 8 -e 8M -f 2" STEP_TIMEOUT=60 timeout 200 bash scripts/gpu-check.sh $B $O/p1 perf nccl > $O/console-p1.txt 2>&1; echo "perf1 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 40 -w 5" SIZES="-b 16M -e 1G -f 2" STEP_TIMEOUT=60 timeout 200 bash scripts/gpu-check.sh $B $O/p2 perf nccl > $O/console-p2.txt 2>&1; echo "perf2 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
PC="sendrecv alltoall_sends alltoall all_gather all_reduce reduce_scatter broadcast"
MB="sendrecv alltoall all_gather all_reduce reduce_scatter broadcast"
for R in 1 0; do
  left=$((570 - SECONDS + T0)); [ $left -lt 40 ] && break
  CUDA_VISIBLE_DEVICES=0,1 NP=2 ITERS="-n 100 -w 20" SIZES="-b 8 -e 64M -f 8 -R $R" PERF_COLLS="$PC" MPI_BENCHES="$MB" STEP_TIMEOUT=60 timeout $left bash scripts/gpu-check.sh $B $O/d$R perf mpi > $O/console-d$R.txt 2>&1; echo "dropin R=$R rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt; grep -h "rc=[1-9]\|wrong" $O/*/summary.txt | head
