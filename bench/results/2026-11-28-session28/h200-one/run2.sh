#!/usr/bin/env bash
# Session 28, call 2 (one H200, 16 Xeon cores): (A) host memory, an experimental build
# (a7c4cee + two switches, not committed): XB=N credits a deep ring every N messages
# instead of every one; XPW2=1 claims the next slot (PREFETCHW) in 2-deep rings too,
# when a peer's message is taken. 2 and 4 ranks bound, alternated three rounds.
# (B) 4 ranks sharing the GPU under MPS (8 hardware queues each: 32 fail to start 4
# contexts): the chain broadcast from every root with FERROCX_CE_SIMPLE_CHUNK auto, 32K,
# 256K, fxperf -c 1 at 16 MiB-256 MiB, registered and on windows.
set -u
O=$OUT/r; mkdir -p $O/host $O/gpu
X=gpu-run/abL/exp/fxperf; T0=$SECONDS; S=$O/summary.txt; : > $S
SZ="-b 8 -e 4K -f 8"; IT="-n 50000 -w 2000"
for r in 1 2 3; do
  for np in 2 4; do for b in 1 16; do
    XB=$b FERROCX_CHECK_CALLS=deferred CUDA_VISIBLE_DEVICES= timeout 60 $X --np $np --bind core $SZ $IT -c 1 broadcast > $O/host/xb$b.np$np.$r 2>&1
  done; done
  for c in all_reduce broadcast all_gather; do for p in 0 1; do
    if [ $p = 1 ]; then E=XPW2=1; else E=XPW2_OFF=1; fi
    env $E CUDA_VISIBLE_DEVICES= timeout 60 $X --np 2 --bind core $SZ $IT -c 1 $c > $O/host/pw$p.$c.$r 2>&1
  done; done
done
echo "host done at $((SECONDS-T0))s" >> $S
export CUDA_DEVICE_MAX_CONNECTIONS=8 FERROCX_TIMEOUT=60 NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER CUDA_VISIBLE_DEVICES=0
nvidia-cuda-mps-control -d; sleep 1
g() { local name=$1 np=$2 reg=$3; shift 3
  env "$@" timeout 120 gpu-run/abL/new/fxperf --np $np --mem cuda -R $reg -b 16M -e 256M -f 4 -n 5 -w 2 -c 1 -r all broadcast > $O/gpu/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
for k in auto 32K 256K; do
  [ $((SECONDS-T0)) -lt 450 ] && g n4-broadcast-$k 4 1 FERROCX_CE_SIMPLE_CHUNK=$k
  [ $((SECONDS-T0)) -lt 450 ] && g w4-broadcast-$k 4 2 FERROCX_CE_SIMPLE_CHUNK=$k
done
echo quit | nvidia-cuda-mps-control
echo "total $((SECONDS-T0))s" >> $S
tar czf $OUT/logs.tgz -C $O .
cat $S
for np in 2 4; do for b in 1 16; do printf "bcast-deferred np%s XB=%-3s" $np $b; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/host/xb$b.np$np.$r; done; echo; done; done
for c in all_reduce broadcast all_gather; do for p in 0 1; do printf "%-10s XPW2=%s" $c $p; for r in 1 2 3; do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/host/pw$p.$c.$r; done; echo; done; done
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "host fxperf wrong:", w+0}' $O/host/*
for f in $O/gpu/*.log; do printf '%-22s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; grep -c -i 'error\|panick' $f | sed 's/^/ err=/'; grep -m1 "ran on" $f; tail -2 $f | grep -i error; done
