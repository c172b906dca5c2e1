#!/usr/bin/env bash
# Session 34, call 2 (one H200, ranks as processes under MPS): every device test on this
# session's tree (binaries of scripts/gpu-build.sh copied to gpu-run/dev), the Python
# package on CUDA tensors (python/tests/test_cuda.py: sendrecv on tensors around the
# ring, new), and host fxperf sendrecv with the GPU visible, bytes checked.
set -u
O=$OUT/r; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=8 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
B=gpu-run/dev; T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-cuda-mps-control -d; sleep 1
nvidia-smi -L > $O/machine.txt 2>&1
python3 -c "import torch; print('torch', torch.__version__)" >> $S 2>&1
pip install -q --no-deps --no-index --target /tmp/fxpy python/target/wheels/*.whl > $O/pip.txt 2>&1
CUDA_MODULE_LOADING=EAGER PYTHONPATH=/tmp/fxpy FERROCX_TIMEOUT=30 timeout 120 $B/fxrun -n 2 -- python3 -u python/tests/test_cuda.py > $O/test_cuda.log 2>&1
echo "test_cuda.py rc=$? at $((SECONDS-T0))s: $(grep -c PASS $O/test_cuda.log) PASS" >> $S
FERROCX_TIMEOUT=20 timeout 60 $B/fxperf --np 2 -b 8 -e 64K -f 8 -n 2000 -w 100 -c 1 sendrecv > $O/host-sr.log 2>&1
echo "host sendrecv rc=$? wrong=$(awk '/^ +[0-9]+ /{w+=$9} END{print w+0}' $O/host-sr.log)" >> $S
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 480 $B/device-tests --test-threads 1 > $O/device.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device.log | tail -40
