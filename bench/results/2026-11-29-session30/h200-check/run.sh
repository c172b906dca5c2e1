#!/usr/bin/env bash
# Session 30, call 3 (one H200, ranks sharing it under MPS): (1) mutant B (chain.rs without
# the capture dependency on the previous ce node) against the forked-capture scenarios: the
# graph check must find two kernels on no common path; (2) every device test on the tree;
# (3) captured device sendrecv timed (graph kernels on/off) and eager fxperf sendrecv.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/bin; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
for b in 8 4096; do
  timeout 60 $B/fxrun -n 2 -- gpu-run/mutB/fxtest-worker coll-graph --replays 20 --expect ce --block $b --mixed --fork > $O/mutB-$b.log 2>&1
  echo "mutB fork block=$b rc=$? at $((SECONDS-T0))s: $(grep -ho 'PASS.*\|ERROR.*' $O/mutB-$b.log | head -2 | cut -c1-240 | tr '\n' ' ')" >> $S
done
FXTEST_WORKER=$B/fxtest-worker timeout 480 $B/device-tests --test-threads 1 > $O/device-tests.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
for gk in 1 0; do
  for b in 8 4096 65536; do
    [ $((SECONDS-T0)) -gt 560 ] && break 2
    FERROCX_CE_GRAPH_KERNELS=$gk timeout 40 $B/fxrun -n 2 -- $B/fxtest-worker p2p-graph $b --replays 20 --timed 2000 > $O/p2p-graph-gk$gk-$b.log 2>&1
    echo "p2p-graph gk=$gk len=$b rc=$? at $((SECONDS-T0))s: $(grep -o 'TIMED.*' $O/p2p-graph-gk$gk-$b.log | tr '\n' ' ')" >> $S
  done
done
[ $((SECONDS-T0)) -lt 570 ] && timeout 30 $B/fxperf --np 2 --mem cuda -b 8 -e 64K -f 8 -n 2000 -w 100 -c 0 sendrecv > $O/fx-sendrecv.log 2>&1
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result|panicked" $O/device-tests.log | grep -v "^test .* ok$" | tail -20
grep -c "^test .* ok$" $O/device-tests.log
grep -E "^ +[0-9]+ " $O/fx-sendrecv.log | head -8
