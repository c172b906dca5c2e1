#!/usr/bin/env bash
# Session 31, call 3 (one H200, ranks under MPS): ferrocx's threads relaxed for the driver's
# capture checks, and its device calls relaxed while they run (RelaxedCapture). Against two
# mutant workers: m1 relaxes nothing (the tree before), m2 relaxes its threads only. The
# scenario: an eager all_reduce held in flight through a capture that lasts 350 ms (the ce
# watchdog polls it every 100 ms), capture in global or thread-local mode. Then the graph and
# destroy device tests, torch.cuda.graph over the drop-in, the net-carrier test three times
# (a race fixed in ibgda's proxy), and eager fxperf for the guard's cost.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=20 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/lite; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
run() {  # run NAME CMD...
  local n=$1; shift
  timeout 60 "$@" > $O/$n.log 2>&1
  echo "$n rc=$? at $((SECONDS-T0))s: $(grep -E 'FAIL|PASS' $O/$n.log | head -2 | cut -c1-400)" >> $S
}
for w in m1 m2 lite; do
  for m in global thread; do
    for k in 1 2; do
      run held-$w-$m-$k $B/fxrun -n 2 -- gpu-run/$w/fxtest-worker coll-graph --replays 20 --block 8 --mixed --held --capture $m --expect ce
    done
  done
done
run held-bin-global-256k-fork $B/fxrun -n 2 -- $B/fxtest-worker coll-graph --replays 30 --block 262144 --mixed --fork --held --capture global --expect ce
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 200 $B/device-tests global destroy net_carrier --test-threads 1 > $O/device.log 2>&1
echo "device-tests (global, destroy, net_carrier) rc=$? at $((SECONDS-T0))s" >> $S
for k in 2 3; do
  FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 100 $B/device-tests net_carrier --test-threads 1 > $O/device-net-$k.log 2>&1
  echo "device-tests net_carrier #$k rc=$? at $((SECONDS-T0))s" >> $S
done
for m in global thread_local; do
  FXT_REPLAYS=20 FXT_CAPTURE_MODE=$m LD_PRELOAD=$PWD/gpu-run/nccl/lib/libnccl.so.2 run torch-$m \
    python3 -m torch.distributed.run --nproc-per-node 2 nccl/tests/torch_graph.py
done
for c in all_reduce sendrecv; do
  timeout 40 $B/fxperf --np 2 --mem cuda -b 8 -e 64K -f 8 -n 2000 -w 100 -c 0 $c > $O/fx-$c.log 2>&1
  echo "fx-$c rc=$? at $((SECONDS-T0))s" >> $S
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device*.log | tail -12
for c in all_reduce sendrecv; do echo -n "$c: "; grep -E "^ +[0-9]+ " $O/fx-$c.log | awk '{printf "%s=%s ", $1, $6}'; echo; done
