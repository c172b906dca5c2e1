#!/usr/bin/env bash
# Session 23, call 2 (2 x H200 host): (1) host memory on a server CPU, ferrocx against
# Open MPI (ob1 + vader/sm, CMA), 2 and 4 ranks bound to cores, 8 B-32 KiB, three rounds
# alternating, broadcast also with FERROCX_CHECK_CALLS=0; (2) small device calls at 2 GPUs,
# fxperf next to NCCL (nccl-tests -g 2) and the drop-in under MPI, 8 B-1 MiB.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
T0=$SECONDS; S=$O/summary.txt; : > $S
{ nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node"; mpirun --version | head -1; ompi_info | grep -i "MCA btl"; } > $O/machine.txt 2>&1
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1 || echo "mpibuild failed" >> $S
BTL=vader; ompi_info | grep -q "btl: vader" || BTL=sm
echo "btl: $BTL" >> $S
H=$O/host; mkdir -p $H
SZ="-b 8 -e 32K -f 8"; IT="-n 20000 -w 1000"
for r in 1 2 3; do for np in 2 4; do
  M=(mpirun --allow-run-as-root -np $np --bind-to core --mca pml ob1 --mca btl self,$BTL --mca btl_${BTL}_single_copy_mechanism cma)
  for c in all_reduce broadcast all_gather reduce_scatter alltoall sendrecv; do
    if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
    timeout 60 "${M[@]}" $P $SZ $IT -c 1 $A > $H/ompi.$c.np$np.$r 2>&1
    timeout 60 $B/fxperf --np $np --bind core $SZ $IT -c 1 $c > $H/fx.$c.np$np.$r 2>&1
    [ $c = broadcast ] && FERROCX_CHECK_CALLS=0 timeout 60 $B/fxperf --np $np --bind core $SZ $IT -c 1 $c > $H/fxoff.$c.np$np.$r 2>&1
  done
done; done
echo "host: $((SECONDS - T0)) s" >> $S
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
NP=2 PERF_COLLS="sendrecv all_reduce all_gather broadcast" SIZES="-b 8 -e 1M -f 8" ITERS="-n 200 -w 20" \
  MPI_BENCHES="sendrecv all_reduce all_gather broadcast" STEP_TIMEOUT=120 \
  timeout 400 bash scripts/gpu-check.sh $B $O/gpu perf nccl mpi > $O/gpu-console.txt 2>&1
echo "gpu: rc=$? $((SECONDS - T0)) s" >> $S
rm -f $O/gpu/*build*.log
tar czf $OUT/logs.tgz -C $O .
cat $S
