#!/usr/bin/env bash
# Session 29, call 4 (one H200, ranks sharing it under MPS): the final tree (ca4d737), as
# call 1 (../h200-check/run.sh) did for 585a444: every device test, one at a time, with 8
# hardware queues per context (4 contexts on one GPU), then fxperf -c 1 on device memory
# at 2 ranks, 8 B-64 MiB.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-smi -L > $O/gpus.txt 2>&1
nvidia-cuda-mps-control -d; sleep 1
FXTEST_WORKER=$B/fxtest-worker timeout 450 $B/device-tests --test-threads 1 > $O/device-tests.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
for c in all_reduce all_gather broadcast sendrecv; do
  [ $((SECONDS-T0)) -lt 540 ] && { timeout 40 $B/fxperf --np 2 --mem cuda -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 $c > $O/fx-$c.log 2>&1; echo "fx-$c rc=$? at $((SECONDS-T0))s" >> $S; }
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device-tests.log | tail -45
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/fx-*.log
