#!/usr/bin/env bash
# Two GPUs: host sendrecv / all_reduce 8 B-4 KiB on this many-core host (shm-coll's rings vs the core's path vs Open MPI, issue 18), then the whole device test file after the host point-to-point routing change (regression).
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
{ nvidia-smi -L; nproc; lscpu | grep -E "Model name|Thread|Socket|NUMA node0"; mpirun --version | head -1; } > $O/machine.txt 2>&1
mpicc -O2 -o $O/sendrecv bench/mpi/sendrecv.c && mpicc -O2 -o $O/colls bench/mpi/colls.c; echo "mpicc rc=$?" >> $O/summary.txt
MPI=(mpirun --allow-run-as-root --bind-to core -np 2)
for r in 1 2 3; do
  "${MPI[@]}" $O/sendrecv -b 8 -e 4K -f 8 -n 50000 -w 1000 > $O/a/ompi-sendrecv.$r 2>&1
  timeout 60 gpu-run/bin/fxperf --np 2 -b 8 -e 4K -f 8 -n 50000 -w 1000 -c 1 sendrecv > $O/a/fx-sendrecv.$r 2>&1
  FERROCX_SHM_COLL_P2P_BYTES=0 timeout 60 gpu-run/bin/fxperf --np 2 -b 8 -e 4K -f 8 -n 50000 -w 1000 -c 1 sendrecv > $O/a/fxcore-sendrecv.$r 2>&1
  "${MPI[@]}" $O/colls -b 8 -e 4K -f 8 -n 50000 -w 1000 -c 1 all_reduce > $O/a/ompi-all_reduce.$r 2>&1
  timeout 60 gpu-run/bin/fxperf --np 2 -b 8 -e 4K -f 8 -n 50000 -w 1000 -c 1 all_reduce > $O/a/fx-all_reduce.$r 2>&1
done
echo "host bench at $((SECONDS-T0))s" >> $O/summary.txt
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 470 gpu-run/bin/device-tests --test-threads 1 > $O/a/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt $O/machine.txt; grep -E "^test |test result|panicked" $O/a/device.log | cut -c1-160 | head -30
for f in ompi-sendrecv fx-sendrecv fxcore-sendrecv ompi-all_reduce fx-all_reduce; do for r in 1 2 3; do echo "$f.$r: $(grep -E '^ +[0-9]' $O/a/$f.$r | awk '{printf "%s:%s ", $1, $6}')"; done; done
