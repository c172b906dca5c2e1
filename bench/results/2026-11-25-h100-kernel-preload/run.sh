#!/usr/bin/env bash
# One H100, 2 ranks under MPS: kernel preload time (cold, cached), the kernel tests,
# and the Python package on CUDA tensors (the probe that hung, and test_cuda.py).
set -u
B=gpu-run/bin; L=$OUT/logs; mkdir -p $L
D=bench/results/2026-11-25-h100-kernel-preload
nvidia-smi -L > $L/gpu.txt; nvidia-smi | head -5 >> $L/gpu.txt
mps() { echo quit | nvidia-cuda-mps-control 2>/dev/null; sleep 1; nvidia-cuda-mps-control -d; sleep 1; }
mps
pip install -q --no-deps --no-index --target /tmp/fxpy python/target/wheels/*.whl > $L/pip.txt 2>&1
export PYTHONPATH=/tmp/fxpy
perf() { timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 8 -n 5 -w 1 all_reduce; }
{ echo "== cold (FERROCX_KERNEL_CACHE=/tmp/kc, empty)"; rm -rf /tmp/kc
  FERROCX_KERNEL_CACHE=/tmp/kc FERROCX_DEBUG=debug perf 2>&1 | grep -E "kernels loaded|kernel|all_reduce|error" | head -20
  ls /tmp/kc | wc -l
  echo "== warm"; FERROCX_KERNEL_CACHE=/tmp/kc FERROCX_DEBUG=debug perf 2>&1 | grep -E "kernels loaded|error" | head
  echo "== off"; FERROCX_KERNEL_CACHE=off FERROCX_DEBUG=debug perf 2>&1 | grep -E "kernels loaded|error" | head
} > $L/preload.txt 2>&1
timeout 200 $B/gpu-kernels --test-threads 1 > $L/gpu-kernels.txt 2>&1; echo "rc $?" >> $L/gpu-kernels.txt
for mc in default:8 default:32 EAGER:32; do
 mode=${mc%:*}; conns=${mc#*:}
 for _ in 1; do
  for t in bench/results/2026-11-25-h100-python/pycuda_probe2.py python/tests/test_cuda.py; do
   n=$(basename $t .py | sed s/pycuda_probe2/probe/)-$mode-c$conns
   env $( [ $mode = EAGER ] && echo CUDA_MODULE_LOADING=EAGER ) CUDA_DEVICE_MAX_CONNECTIONS=$conns FERROCX_TIMEOUT=15 \
     timeout 60 $B/fxrun -n 2 -- python3 -u $t > $L/$n.txt 2>&1; rc=$?
   echo "$n rc=$rc" | tee -a $L/summary.txt
   [ $rc = 0 ] || mps
  done
 done
done
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $OUT logs
