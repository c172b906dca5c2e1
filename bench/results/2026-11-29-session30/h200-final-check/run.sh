#!/usr/bin/env bash
# Session 30, call 5 (one H200, ranks sharing it under MPS): the final tree (order_launch
# refactor): every device test, one at a time, 8 hardware queues per context, then
# fxperf -c 1 on device memory at 2 ranks, 8 B-64 MiB, and one timed graph run.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
FXTEST_WORKER=$B/fxtest-worker timeout 450 $B/device-tests --test-threads 1 > $O/device-tests.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
for c in all_reduce broadcast sendrecv; do
  [ $((SECONDS-T0)) -lt 500 ] && { timeout 30 $B/fxperf --np 2 --mem cuda -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 $c > $O/fx-$c.log 2>&1; echo "fx-$c rc=$? at $((SECONDS-T0))s" >> $S; }
done
[ $((SECONDS-T0)) -lt 530 ] && { timeout 30 $B/fxrun -n 2 -- $B/fxtest-worker coll-graph --replays 20 --block 8 --timed 2000 --expect ce > $O/graph-8.log 2>&1; echo "coll-graph 8 rc=$?: $(grep -o 'TIMED.*' $O/graph-8.log | head -1)" >> $S; }
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device-tests.log | grep -v " ok$" | tail -10
grep -c "^test .* ok$" $O/device-tests.log
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w+0}' $O/fx-*.log
