#!/usr/bin/env bash
# Session 34, call 4 (one H200 under MPS): python/tests/test_cuda.py again after fixing
# its own expected text (call 3: the transfers passed, the mixed-memory error's wording
# differed from the test's substring).
set -u
O=$OUT/r; mkdir -p $O; export CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_MAX_CONNECTIONS=8
nvidia-cuda-mps-control -d; sleep 1
pip install -q --no-deps --no-index --target /tmp/fxpy python/target/wheels/*.whl > $O/pip.txt 2>&1
CUDA_MODULE_LOADING=EAGER PYTHONPATH=/tmp/fxpy FERROCX_TIMEOUT=30 timeout 120 gpu-run/dev/fxrun -n 2 -- python3 -u python/tests/test_cuda.py > $O/test_cuda.log 2>&1
echo "test_cuda.py rc=$?" >> $O/test_cuda.log
echo quit | nvidia-cuda-mps-control
cat $O/test_cuda.log
