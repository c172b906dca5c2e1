#!/usr/bin/env bash
# Session 12, call 2 (2 GPUs): (1) sendrecv with the point-to-point kernel before the review
# fixes (fxperf-old, e322f3e) and after (HEAD), lines 512K and 0, alternated twice, with the
# host's queuing time (FXPERF_QUEUE_TIME); (2) small all_reduce/all_gather queuing times;
# (3) the core's broadcast 32M-256M and alltoall 256M-1G under its chunk/channel/copy knobs;
# (4) NCCL for those benches in the same call.
set -u
O=$OUT/r; mkdir -p $O/s $O/q $O/t $O/n
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
S="-b 8 -e 512K -f 4 -n 500 -w 50 -c 1 sendrecv"
for round in 1 2; do
  for bin in fxperf-old fxperf; do
    for ll in 512K 0; do
      FXPERF_QUEUE_TIME=1 FERROCX_CE_P2P_LL_BYTES=$ll timeout 60 $B/$bin --np 2 --mem cuda $S > $O/s/$bin-ll$ll-r$round.log 2>&1
      echo "$bin ll=$ll r$round rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
    done
  done
done
for c in all_reduce all_gather broadcast; do
  FXPERF_QUEUE_TIME=1 timeout 60 $B/fxperf --np 2 --mem cuda -b 8 -e 1M -f 8 -n 500 -w 50 -c 1 $c > $O/q/$c.log 2>&1; echo "q $c rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
bc() { local name=$1; shift; env "$@" timeout 60 $B/fxperf --np 2 --mem cuda -b 32M -e 256M -f 2 -n 30 -w 5 -c 1 broadcast > $O/t/bc-$name.log 2>&1; echo "bc $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt; }
bc default A=1
bc chunk1g FERROCX_DEVICE_CHUNK=1G
bc chan16m FERROCX_DEVICE_CHANNEL_BYTES=16M
bc chunk64m-chan16m FERROCX_DEVICE_CHUNK=64M FERROCX_DEVICE_CHANNEL_BYTES=16M
bc default2 A=1
a2a() { local name=$1; shift; env "$@" timeout 60 $B/fxperf --np 2 --mem cuda -b 256M -e 1G -f 2 -n 10 -w 3 -c 1 alltoall > $O/t/a2a-$name.log 2>&1; echo "a2a $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt; }
a2a default A=1
a2a kcopy FERROCX_DEVICE_COPY=kernel
a2a chan4 FERROCX_NCHANNELS=4
NP=2 SIZES="-b 8 -e 1G -f 4" ITERS="-n 50 -w 10" PERF_COLLS="sendrecv broadcast alltoall all_reduce" STEP_TIMEOUT=100 bash scripts/gpu-check.sh $B $O/n nccl > $O/console-n.txt 2>&1; echo "nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for f in $O/s/*.log $O/q/*.log; do echo "== $f"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; grep "queuing" $f | awk '{printf "%s/%s ", $2, $6}'; echo; done
for f in $O/t/*.log $O/n/*.log; do echo "== $f (size:oop/ip/wrong)"; grep -E "^ +[0-9]" $f | awk '$1>=16777216 {printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done
for f in $O/n/*.log; do echo "== $f small"; grep -E "^ +[0-9]" $f | awk '$1<16777216 {printf "%s:%s/%s ", $1, $6, $10}'; echo; done
