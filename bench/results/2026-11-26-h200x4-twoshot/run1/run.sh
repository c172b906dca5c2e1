#!/usr/bin/env bash
# Four GPUs: two-shot all_reduce (Simple RS + AG) and ce's point-to-point kernel at 4 ranks; all six collectives vs NCCL -g 4.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1; nvidia-smi topo -m >> $O/gpus.txt 2>&1
NP=4 gpu-run/bin/fxinfo > $O/a/fxinfo.log 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 200 gpu-run/bin/device-tests ce_runs_mid ce_runs_device_sends --nocapture --test-threads 1 > $O/a/device.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=4 SIZES="-b 8 -e 1G -f 4" STEP_TIMEOUT=60 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl >> $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
FERROCX_CE_SIMPLE_BYTES=0 timeout 90 gpu-run/bin/fxperf --np 4 --mem cuda -b 1M -e 1G -f 4 -n 20 -w 5 -c 1 all_reduce > $O/a/all_reduce-no-simple.log 2>&1; echo "AR without Simple rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device.log | cut -c1-140 | head; head -6 $O/gpus.txt
python3 scripts/bench-compare.py $O/p 2>&1 | head -80
echo "== AR without Simple"; grep -E "^ +[0-9]" $O/a/all_reduce-no-simple.log | awk '{print $1, $6}' | tr '\n' ' '
