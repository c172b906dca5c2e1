#!/usr/bin/env bash
# Two GPUs: ce's point-to-point kernel — device tests, then sendrecv vs NCCL and the crossover vs the core's path.
set -u
O=$OUT/r; mkdir -p $O/a
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=16
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1; nvidia-smi topo -m >> $O/gpus.txt 2>&1
FXTEST_WORKER=gpu-run/bin/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 300 gpu-run/bin/device-tests ce_runs_device_sends ce_names_a_send smoke_over_p2p_and_shm ce_runs_small --nocapture --test-threads 1 > $O/a/device-p2p.log 2>&1; echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
NP=2 SIZES="-b 8 -e 1G -f 4" PERF_COLLS="sendrecv alltoall" STEP_TIMEOUT=60 bash scripts/gpu-check.sh gpu-run/bin $O/p perf nccl >> $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
for v in 0 4M 64M; do
  FERROCX_CE_P2P_BYTES=$v timeout 90 gpu-run/bin/fxperf --np 2 --mem cuda -b 8 -e 256M -f 4 -n 20 -w 5 -c 1 sendrecv > $O/a/sendrecv-p2p-$v.log 2>&1; echo "sendrecv P2P_BYTES=$v rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; grep -E "^test |test result|panicked|FAILED" $O/a/device-p2p.log | cut -c1-160 | head -20; head -4 $O/gpus.txt
python3 scripts/bench-compare.py $O/p 2>&1 | head -60
for v in 0 4M 64M; do echo "== P2P_BYTES=$v"; grep -E "^\s+[0-9]" $O/a/sendrecv-p2p-$v.log | awk '{print $1, $(NF-3), $(NF-2), $NF}' | head -20; done
