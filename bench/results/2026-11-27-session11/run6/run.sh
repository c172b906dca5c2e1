#!/usr/bin/env bash
# Session 11, call 6 (2 GPUs): run 5's one failure, a hang in the core's device path
# after a mismatch (the_cores_device_sends_and_receives_are_checked, case dev-recv: rank 0
# logged the mismatch and aborted, then never returned; killed at 90 s; it passed in four
# earlier runs). The case alone, many times; a run still going after 40 s gets every
# thread's backtrace (cuda-gdb, symbols kept) and kernel stack before it is killed.
set -u
O=$OUT/r; mkdir -p $O/h
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
export FERROCX_COLLECTIVES=^ce FERROCX_TRANSPORTS=p2p FERROCX_TIMEOUT=20
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
GDB=/usr/local/cuda/bin/cuda-gdb
i=0
while [ $((SECONDS - T0)) -lt 300 ]; do
  i=$((i+1))
  for c in dev-recv dev-send; do
    FERROCX_DEBUG=info $B/fxrun -n 2 -- $B/fxtest-worker mismatch $c > $O/h/run$i-$c.log 2>&1 &
    P=$!
    s=$SECONDS
    while kill -0 $P 2>/dev/null && [ $((SECONDS - s)) -lt 40 ]; do sleep 0.5; done
    if kill -0 $P 2>/dev/null; then
      echo "run $i $c HUNG" >> $O/summary.txt
      for pid in $(pgrep -f "fxtest-worker mismatch"); do
        { echo "== pid $pid"; for t in /proc/$pid/task/*; do echo "-- $(cat $t/comm) $(cat $t/wchan)"; cat $t/stack 2>/dev/null | head -8; done; } >> $O/h/hang$i-$c-stacks.txt 2>&1
        timeout 40 $GDB -p $pid -batch -ex "set pagination off" -ex "thread apply all bt 25" > $O/h/hang$i-$c-bt-$pid.txt 2>&1
      done
      pkill -9 -f "fxtest-worker mismatch"; kill -9 $P 2>/dev/null; wait $P 2>/dev/null
    else
      wait $P; echo "run $i $c rc=$? in $((SECONDS - s))s" >> $O/summary.txt
    fi
  done
done
tar czf $OUT/logs.tgz -C $O .
grep -c "rc=0" $O/summary.txt; grep -v "rc=0" $O/summary.txt | head
ls $O/h | grep hang | head
for f in $O/h/hang*-bt-*.txt; do [ -f $f ] && { echo "== $f"; grep -E "^#|^Thread" $f | grep -v "libc.so\|libpthread" | cut -c1-200 | head -60; }; done
