#!/usr/bin/env bash
# Session 34, call 3 (one H200, ranks as processes under MPS): every device test on this
# session's tree (binaries of scripts/gpu-build.sh copied to gpu-run/dev), the Python
# package on CUDA tensors (python/tests/test_cuda.py: sendrecv on tensors around the
# ring, new), and host fxperf sendrecv with the GPU visible, bytes checked. Before the
# device tests, on the CPU: 4 ranks on 2 cores (taskset -c 0,1) against Open MPI told to
# yield (mpi_yield_when_idle 1: under taskset it counts 16 slots and spins otherwise, as
# call 2 found), sendrecv, all_reduce, broadcast, 1 round.
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
make -C bench BUILD=$O/mpibuild > $O/mpibuild.log 2>&1
M4=(taskset -c 0,1 mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca pml ob1 --mca btl self,vader)
SZ="-b 8 -e 4K -f 8"; I4="-n 20000 -w 500"
for r in 1; do for c in sendrecv all_reduce broadcast; do
  CUDA_VISIBLE_DEVICES= FERROCX_TIMEOUT=20 timeout 30 taskset -c 0,1 $B/fxperf --np 4 --bind none $SZ $I4 -c 1 $c > $O/o4.sync.$c.$r 2>&1
  CUDA_VISIBLE_DEVICES= FERROCX_CHECK_CALLS=deferred FERROCX_TIMEOUT=20 timeout 30 taskset -c 0,1 $B/fxperf --np 4 --bind none $SZ $I4 -c 1 $c > $O/o4.deferred.$c.$r 2>&1
  if [ $c = sendrecv ]; then P=$O/mpibuild/sendrecv; A=""; else P=$O/mpibuild/colls; A=$c; fi
  timeout 12 "${M4[@]}" $P $SZ $I4 -c 1 $A > $O/o4.ompi.$c.$r 2>&1
done; done
rm -rf $O/mpibuild
for c in sendrecv all_reduce broadcast; do for v in sync deferred ompi; do
  printf "%-11s %-9s" $c $v; for r in 1; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/o4.$v.$c.$r; done; echo
done; done >> $S
echo "4 on 2 at $((SECONDS-T0))s" >> $S
FERROCX_TIMEOUT=60 FXTEST_WORKER=$B/fxtest-worker timeout 420 $B/device-tests --test-threads 1 > $O/device.log 2>&1
echo "device-tests rc=$? at $((SECONDS-T0))s" >> $S
echo quit | nvidia-cuda-mps-control
tar czf $OUT/logs.tgz -C $O .
cat $S
grep -E "^test |test result" $O/device.log | tail -40
