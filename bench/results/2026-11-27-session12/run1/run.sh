#!/usr/bin/env bash
# Session 12, call 1 (2 GPUs): what the last session could not run on a GPU — the point-to-point
# kernel's review fixes (header counts, early credits), Engine::fail_all opening held streams
# (the dev-recv/dev-send hang loop), fxperf's warm first row — then a tuning sweep for issue 23's
# open cells (all_reduce 256K-16M: LL limit, Simple blocks and slot; broadcast 16M-128M and
# alltoall 256M-1G with the Simple kernel's limit raised).
set -u
O=$OUT/r; mkdir -p $O/a $O/h $O/s $O/t
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
export FXTEST_WORKER=$B/fxtest-worker
for t in ce_names_a_send_that_meets_a_receive_of_another_size ce_runs_device_sends_as_one_kernel mix_on_device; do
  timeout 120 $B/device-tests $t --nocapture --test-threads 1 > $O/a/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
S="-b 8 -e 4M -f 4"
for ll in 0 512K; do
  FERROCX_CE_P2P_LL_BYTES=$ll timeout 90 $B/fxperf --np 2 --mem cuda $S -n 200 -w 20 -c 1 sendrecv > $O/s/fxperf-sendrecv-ll$ll.log 2>&1
  echo "fxperf ll=$ll rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
# the hang loop (run 6 of session 11), 90 s
( export FERROCX_COLLECTIVES=^ce FERROCX_TRANSPORTS=p2p FERROCX_TIMEOUT=20
  T1=$SECONDS; i=0
  while [ $((SECONDS - T1)) -lt 90 ]; do
    i=$((i+1))
    for c in dev-recv dev-send; do
      s=$SECONDS
      timeout 40 $B/fxrun -n 2 -- $B/fxtest-worker mismatch $c > $O/h/run$i-$c.log 2>&1
      rc=$?; echo "run $i $c rc=$rc in $((SECONDS - s))s" >> $O/h/summary.txt
      [ $rc = 124 ] && pkill -9 -f "fxtest-worker mismatch"
    done
  done )
echo "hang loop: $(grep -c 'rc=0' $O/h/summary.txt) ok, $(grep -vc 'rc=0' $O/h/summary.txt) not, at $((SECONDS-T0))s" >> $O/summary.txt
# tuning: all_reduce 256K-16M, -n 100
AR="-b 256K -e 16M -f 2 -n 100 -w 20 -c 1 all_reduce"
tune() { local name=$1; shift; env "$@" timeout 60 $B/fxperf --np 2 --mem cuda $AR > $O/t/ar-$name.log 2>&1; echo "tune $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt; }
tune default A=1
tune ll512k FERROCX_CE_LL_BYTES=512K
tune ll256k FERROCX_CE_LL_BYTES=256K
tune blocks32 FERROCX_CE_SIMPLE_BLOCKS=32
tune blocks128 FERROCX_CE_SIMPLE_BLOCKS=128
tune slot64k FERROCX_CE_SIMPLE_SLOT=64K
tune slot256k FERROCX_CE_SIMPLE_SLOT=256K
tune default2 A=1
for v in auto 1G; do
  FERROCX_CE_SIMPLE_BYTES=$v timeout 60 $B/fxperf --np 2 --mem cuda -b 16M -e 128M -f 2 -n 50 -w 10 -c 1 broadcast > $O/t/bc-$v.log 2>&1; echo "bc $v rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
  FERROCX_CE_SIMPLE_BYTES=$v timeout 60 $B/fxperf --np 2 --mem cuda -b 256M -e 1G -f 2 -n 10 -w 3 -c 1 alltoall > $O/t/a2a-$v.log 2>&1; echo "a2a $v rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
done
left=$((585 - SECONDS + T0))
[ $left -gt 60 ] && { timeout $left $B/device-tests --test-threads 1 > $O/a/device-all.log 2>&1; echo "device-all rc=$? at $((SECONDS-T0))s" >> $O/summary.txt; }
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
for t in $O/a/*.log; do echo "$t: $(grep -E 'test result|panicked|FAILED|^test .* \.\.\. ' $t | grep -v ' ok$' | cut -c1-200 | head -5)"; done
grep -v "rc=0" $O/h/summary.txt | head
for f in $O/s/*.log; do echo "== $f"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s ", $1, $6, $9}'; echo; done
for f in $O/t/*.log; do echo "== $f (size:oop/ip/wrong)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done
