#!/usr/bin/env bash
# Session 10, call 6 (2 GPUs): the final tree — fxinfo (ibgda's NIC pairing read from
# this host's /sys, ce's routes), then the whole device test file.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FXTEST_WORKER=$B/fxtest-worker
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; ls -l /sys/class/infiniband/ 2>&1; for d in /sys/class/infiniband/*; do echo "$d -> $(readlink -f $d/device)"; ls $d/ports 2>&1; done; } > $O/host.txt 2>&1
FERROCX_DEVNET=ibgda $B/fxrun -n 2 -- $B/fxinfo > $O/fxinfo.log 2>&1; echo "fxinfo rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
timeout $((570 - SECONDS + T0)) $B/device-tests --test-threads=1 --nocapture > $O/device-all.log 2>&1; echo "device-all rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -3 $O/host.txt; grep -A1 -i 'infiniband' $O/host.txt | head -12
grep -A2 'device networking' $O/fxinfo.log | cut -c1-900
grep -E "^test |test result|panicked" $O/device-all.log | cut -c1-140
