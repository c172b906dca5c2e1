#!/usr/bin/env bash
# Session 14, call 2 (2 GPUs): the device tests call 1's 300 s cut off (from
# devnet_net_carrier on), under MPS; then knob sweeps for issue 23's remaining cells:
# broadcast 16-128 MiB (kernel vs routes), alltoall 1 GiB (kernel vs routes, in place),
# sendrecv 256 KiB-4 MiB (LL limit, blocks, slot), all_reduce 512 KiB-16 MiB (blocks).
set -u
O=$OUT/r; mkdir -p $O/a $O/k
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
FXTEST_WORKER=$B/fxtest-worker timeout 330 $B/device-tests --nocapture --test-threads 1 --skip ce_ --skip devnet_a_ --skip devnet_moe > $O/a/device-rest.log 2>&1
echo "device-rest rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control; sleep 2
sw() {  # sw NAME COLL FXPERF-ARGS ENV...
  local name=$1 coll=$2 args=$3; shift 3
  env "$@" timeout 60 $B/fxperf --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "sweep $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  sw bc-def-$rep broadcast "-b 16M -e 128M -f 2 -n 100 -w 10" X=0
  sw bc-kern-$rep broadcast "-b 16M -e 128M -f 2 -n 100 -w 10" FERROCX_CE_SIMPLE_BYTES=128M
  sw a2a-def-$rep alltoall "-b 256M -e 1G -f 2 -n 20 -w 3" X=0
  sw a2a-kern-$rep alltoall "-b 256M -e 1G -f 2 -n 20 -w 3" FERROCX_CE_SIMPLE_BYTES=1G
done
S="-b 256K -e 4M -f 2 -n 300 -w 30"
sw sr-def sendrecv "$S" X=0
sw sr-ll1m sendrecv "$S" FERROCX_CE_P2P_LL_BYTES=1M
sw sr-ll2m sendrecv "$S" FERROCX_CE_P2P_LL_BYTES=2M
sw sr-b128 sendrecv "$S" FERROCX_CE_SIMPLE_BLOCKS=128
sw sr-s256 sendrecv "$S" FERROCX_CE_SIMPLE_SLOT=256K
sw sr-def2 sendrecv "$S" X=1
S="-b 512K -e 16M -f 2 -n 300 -w 30"
sw ar-def all_reduce "$S" X=0
sw ar-b128 all_reduce "$S" FERROCX_CE_SIMPLE_BLOCKS=128
sw ar-b96 all_reduce "$S" FERROCX_CE_SIMPLE_BLOCKS=96
sw ar-def2 all_reduce "$S" X=1
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt
grep -E "test result|^ok$|FAILED|panicked|^test " $O/a/device-rest.log | cut -c1-160 | tail -30
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done
