#!/usr/bin/env bash
# Where survivors of a killed ce peer wait under MPS: ranks started by hand, state dumped.
B=gpu-run/bin; O=$1; mkdir -p $O
export CUDA_DEVICE_MAX_CONNECTIONS=32 NCCL_NVLS_ENABLE=0 FERROCX_TIMEOUT=10
nvidia-cuda-mps-control -d
for run in 1 2 3; do
  P=$((21000 + run)); pids=""
  for r in 0 1 2; do
    FERROCX_COMM_ID=127.0.0.1:$P FERROCX_RANK=$r FERROCX_NRANKS=3 FERROCX_LOCAL_RANK=$r \
      $B/fxtest-worker coll-plugin-loop 8388608 --victim 1 --kill-after-ms $((1500 + run * 7)) > $O/run$run-rank$r.log 2>&1 &
    pids="$pids $!"
  done
  sleep 30
  for p in $pids; do
    [ -d /proc/$p ] || { echo "run $run pid $p: exited" >> $O/state.txt; continue; }
    echo "run $run pid $p: ALIVE" >> $O/state.txt
    for t in /proc/$p/task/*; do echo "   $(cat $t/comm) wchan=$(cat $t/wchan) state=$(cut -d' ' -f3 $t/stat) syscall=$(cut -d' ' -f1 $t/syscall 2>/dev/null)" >> $O/state.txt; done
  done
  kill -9 $pids 2>/dev/null; wait 2>/dev/null; sleep 2
done
echo quit | nvidia-cuda-mps-control
cat $O/state.txt; tail -n 3 $O/run*-rank0.log $O/run*-rank2.log
