#!/usr/bin/env bash
# Two GPUs: host memory now on its own channels (shm) where ranks have GPUs: fxinfo's pairs, host sendrecv 8 B-4 MiB through the core (rings off) and with the rings, the host collective matrix and host point-to-point mix on 2 ranks, then the whole device test file.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
timeout 120 gpu-run/bin/fxrun -n 2 gpu-run/bin/fxinfo > $O/a/fxinfo.log 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for r in 1 2; do
  FERROCX_SHM_COLL_P2P_BYTES=0 timeout 120 gpu-run/bin/fxperf --np 2 -b 8 -e 4M -f 8 -n 2000 -w 100 -c 1 sendrecv > $O/a/fxcore-sendrecv.$r 2>&1; echo "core sendrecv $r rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  timeout 120 gpu-run/bin/fxperf --np 2 -b 8 -e 4M -f 8 -n 2000 -w 100 -c 1 sendrecv > $O/a/fx-sendrecv.$r 2>&1; echo "sendrecv $r rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
timeout 120 gpu-run/bin/fxperf --np 2 -b 8 -e 4M -f 8 -n 500 -w 50 -c 1 all_reduce > $O/a/fx-all_reduce.log 2>&1; echo "all_reduce rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_TIMEOUT=30 timeout 200 gpu-run/bin/fxrun -n 2 gpu-run/bin/fxtest-worker coll-matrix > $O/a/matrix.log 2>&1; echo "host matrix rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_TIMEOUT=30 timeout 120 gpu-run/bin/fxrun -n 2 gpu-run/bin/fxtest-worker host-p2p 60 shm-coll > $O/a/host-p2p.log 2>&1; echo "host p2p rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_TIMEOUT=30 timeout 120 gpu-run/bin/fxrun -n 2 gpu-run/bin/fxtest-worker pairs 0,1,7,4096,1048579 --expect-transport shm > $O/a/pairs.log 2>&1; echo "pairs (expect shm) rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 300 gpu-run/bin/device-tests --test-threads 1 > $O/a/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -A4 "transport chosen" $O/a/fxinfo.log; grep -E "^test |test result|panicked" $O/a/device.log | cut -c1-150 | grep -v " ok$" | head; tail -2 $O/a/matrix.log $O/a/host-p2p.log $O/a/pairs.log | cut -c1-200
for f in fxcore-sendrecv.1 fxcore-sendrecv.2 fx-sendrecv.1 fx-sendrecv.2 fx-all_reduce.log; do echo "$f: $(grep '^# fxperf' $O/a/$f | cut -c1-60) $(grep -E '^ +[0-9]' $O/a/$f | awk '{printf "%s:%s(w%s) ", $1, $6, $9}')"; done
