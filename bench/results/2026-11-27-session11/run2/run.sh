#!/usr/bin/env bash
# Session 11, call 2 (2 GPUs, asked as H100s): the LL point-to-point lines on H100s
# (sendrecv 8 B-4 MiB, FERROCX_CE_P2P_LL_BYTES 0 vs the 512K default, -n 200) next to
# NCCL; the whole 2-rank table 8 B-1 GiB vs NCCL (gpu-check perf nccl); the drop-in
# under MPI against fxperf (-n 200, 8 B-32 MiB); the device tests of the change.
set -u
O=$OUT/r; mkdir -p $O/a $O/p $O/s $O/m
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
$B/fxrun -n 2 -- $B/fxinfo > $O/fxinfo.log 2>&1
export FXTEST_WORKER=$B/fxtest-worker
for t in ce_names_a_send_that_meets_a_receive_of_another_size ce_runs_device_sends_as_one_kernel mix_on_device; do
  timeout 120 $B/device-tests $t --nocapture --test-threads 1 > $O/a/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
S="-b 8 -e 4M -f 4"
for ll in 0 512K; do
  FERROCX_CE_P2P_LL_BYTES=$ll timeout 90 $B/fxperf --np 2 --mem cuda $S -n 200 -w 20 -c 1 sendrecv > $O/s/fxperf-sendrecv-ll$ll.log 2>&1
  echo "fxperf ll=$ll rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
NP=2 SIZES="$S" ITERS="-n 200 -w 20" PERF_COLLS="sendrecv" STEP_TIMEOUT=80 bash scripts/gpu-check.sh $B $O/s nccl > $O/console-s.txt 2>&1; echo "nccl sendrecv rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=2 SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=150 bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
C="sendrecv alltoall all_reduce all_gather broadcast reduce_scatter"
left=$((570 - SECONDS + T0))
[ $left -gt 60 ] && NP=2 SIZES="-b 8 -e 32M -f 4" ITERS="-n 200 -w 20" PERF_COLLS="$C" MPI_BENCHES="$C" STEP_TIMEOUT=40 timeout $left bash scripts/gpu-check.sh $B $O/m perf mpi > $O/console-m.txt 2>&1; echo "perf mpi rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log $O/*/mpi-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for t in $O/a/*.log; do grep -E "test result|panicked|FAILED" $t | cut -c1-300 | head -3; done
for f in $O/s/fxperf-sendrecv-ll*.log $O/s/nccl-sendrecv.log; do echo "== $f"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; done
for c in $C; do echo "== $c fxperf / nccl (oop/ip us; wrong)"; for f in $O/p/fxperf-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done; done
for c in $C; do echo "== $c fxperf / drop-in -n 200"; for f in $O/m/fxperf-$c.log $O/m/dropin-mpi-$c.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s ", $1, $6}'; echo; done; done
