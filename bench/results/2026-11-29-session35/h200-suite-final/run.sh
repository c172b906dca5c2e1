#!/usr/bin/env bash
# Session 35, call 5 (one H200, ranks as processes under MPS): every device test on
# 6f95758, the final tree (binaries of scripts/gpu-build.sh copied to gpu-run/dev; the core now numbers
# every collective under its serial lock, device calls included), the Python package on
# CUDA tensors (python/tests/test_cuda.py), and host fxperf with the GPU visible, results
# checked (every collective, 2 and 3 ranks, checked and checked later).
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/dev; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
nvidia-smi -L > $O/machine.txt 2>&1
python3 -c "import torch; print('torch', torch.__version__)" >> $S 2>&1
pip install -q --no-deps --no-index --target /tmp/fxpy python/target/wheels/*.whl > $O/pip.txt 2>&1
CUDA_MODULE_LOADING=EAGER PYTHONPATH=/tmp/fxpy FERROCX_TIMEOUT=30 timeout 120 $B/fxrun -n 2 -- python3 -u python/tests/test_cuda.py > $O/test_cuda.log 2>&1
echo "test_cuda.py rc=$? at $((SECONDS-T0))s: $(grep -c PASS $O/test_cuda.log) PASS, $(grep -c FAIL $O/test_cuda.log) FAIL" >> $S
for np in 2 3; do for chk in 1 deferred; do for c in all_reduce all_gather reduce_scatter alltoall broadcast reduce gather scatter sendrecv; do
  FERROCX_CHECK_CALLS=$chk FERROCX_TIMEOUT=20 timeout 60 $B/fxperf --np $np -b 8 -e 256K -f 8 -n 200 -w 20 -c 1 $c > $O/host.$np.$chk.$c.log 2>&1
  echo "host $c np$np check=$chk rc=$? wrong=$(awk '/^ +[0-9]+ /{w+=$9+$13} END{print w+0}' $O/host.$np.$chk.$c.log)" >> $O/host.txt
done; done; done
echo "host fxperf: $(grep -c 'rc=0 wrong=0' $O/host.txt) of $(wc -l < $O/host.txt) rc=0 wrong=0 at $((SECONDS-T0))s" >> $S
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 420 $B/device-tests --test-threads 1 > $O/device.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -v "rc=0 wrong=0" $O/host.txt
grep -E "^test |test result" $O/device.log | tail -40
