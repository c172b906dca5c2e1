#!/usr/bin/env bash
# Session 33, call 6 (one H200, ranks as processes under MPS): every device test on the
# final tree (binaries of scripts/gpu-build.sh copied to gpu-run/dev), and host-memory
# fxperf with the GPU visible (ce loaded beside shm-coll: the status poll runs) checked
# later and synchronously, results compared.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/dev; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
nvidia-smi -L > $O/machine.txt 2>&1
FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=180 timeout 200 $B/fxrun -n 2 -- $B/fxtest-worker dev-smoke > $O/warm.log 2>&1
echo "warm rc=$? at $((SECONDS-T0))s" >> $S
for m in deferred 1; do
  FERROCX_CHECK_CALLS=$m FERROCX_TIMEOUT=20 timeout 60 $B/fxperf --np 2 -b 8 -e 64K -f 8 -n 2000 -w 100 -c 1 broadcast > $O/host-bcast-$m.log 2>&1
  echo "host broadcast ($m) rc=$? wrong=$(awk '/^ +[0-9]+ /{w+=$9+$13} END{print w+0}' $O/host-bcast-$m.log)" >> $S
  FERROCX_CHECK_CALLS=$m FERROCX_TIMEOUT=20 timeout 60 $B/fxperf --np 2 -b 8 -e 64K -f 8 -n 2000 -w 100 -c 1 all_reduce > $O/host-ar-$m.log 2>&1
  echo "host all_reduce ($m) rc=$? wrong=$(awk '/^ +[0-9]+ /{w+=$9+$13} END{print w+0}' $O/host-ar-$m.log)" >> $S
done
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 480 $B/device-tests --test-threads 1 > $O/device.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device.log | tail -40
