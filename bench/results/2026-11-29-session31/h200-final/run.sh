#!/usr/bin/env bash
# Session 31, call 4 (one H200, ranks under MPS), the final tree: torch.cuda.graph over the
# drop-in (global and thread-local capture, ncclMemAlloc/ncclMemFree inside the capture), also
# over a mutant drop-in that relaxes nothing (nccl-m1); ring exchanges captured in global mode;
# then every device test.
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
for d in nccl-m1 nccl; do
  for m in global thread_local; do
    FXT_REPLAYS=10 FXT_CAPTURE_MODE=$m LD_PRELOAD=$PWD/gpu-run/$d/lib/libnccl.so.2 run torch-$d-$m \
      python3 -m torch.distributed.run --nproc-per-node 2 nccl/tests/torch_graph.py
  done
done
run p2p-global-256k $B/fxrun -n 2 -- $B/fxtest-worker p2p-graph 262144 --replays 30 --mixed --capture global
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout $((590 - SECONDS)) $B/device-tests --test-threads 1 > $O/device.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device.log | grep -v " ok$" | tail -8
grep -c "^test .* ok$" $O/device.log
