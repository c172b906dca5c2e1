#!/usr/bin/env bash
# Session 12, call 3 (2 GPUs): where the host's ~12 µs per small device call go. Each rank of
# fxperf (symbols kept) runs sendrecv / all_reduce at 8 B for a long time while a debugger takes
# stack samples of every thread; then queuing times with the call check off.
set -u
O=$OUT/r; mkdir -p $O/g $O/q
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
{ which perf gdb; cat /proc/sys/kernel/perf_event_paranoid; } > $O/tools.txt 2>&1
GDB=$(which gdb 2>/dev/null || echo /usr/local/cuda/bin/cuda-gdb)
for bench in sendrecv all_reduce; do
  $B/fxperf-sym --np 2 --mem cuda -b 8 -e 8 -n 3000000 -w 10 -c 0 $bench > $O/g/$bench-run.log 2>&1 &
  P=$!
  sleep 6
  kids=$(pgrep -P $P | tr '\n' ' ')
  echo "$bench parent $P ranks $kids" >> $O/summary.txt
  s=$SECONDS
  while [ $((SECONDS - s)) -lt 50 ]; do
    for k in $kids; do timeout 10 $GDB -p $k -batch -ex "set pagination off" -ex "thread apply all bt 40" >> $O/g/$bench-bt-$k.txt 2>&1; done
  done
  kill $P 2>/dev/null; pkill -9 -f fxperf-sym; wait $P 2>/dev/null
  echo "$bench samples: $(grep -c '^Thread' $O/g/$bench-bt-*.txt | tr '\n' ' ') at $((SECONDS-T0))s" >> $O/summary.txt
done
for v in 1 0; do
  for c in all_reduce sendrecv; do
    FERROCX_CHECK_CALLS=$v FXPERF_QUEUE_TIME=1 timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 64K -f 8 -n 500 -w 50 -c 1 $c > $O/q/$c-check$v.log 2>&1; echo "q $c check=$v rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  done
done
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt $O/tools.txt
for f in $O/q/*.log; do echo "== $f"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; grep "queuing" $f | awk '{printf "%s/%s ", $2, $6}'; echo; done
