#!/usr/bin/env bash
# Session 27, call 2 (4 GPUs), the final tree: the chain's new chunks (about 128 from 16 MiB,
# whole 256 KiB slots from 32 MiB) and broadcast on windows at 2 ranks without the direct
# mode. Device tests (the Simple kernel's matrix, the copy collectives on windows at 2 and
# 4 ranks); broadcast from every root (-r all) at 3 and 4 ranks, registered and on windows;
# 4-rank broadcast against NCCL -g 4 and on windows against NCCL's CE broadcast, alternated;
# 2-rank broadcast on windows against NCCL CE.
set -u
O=$OUT/r; mkdir -p $O/k $O/n $O/t
B=gpu-run/bin; SRC=gpu-run/nccl-tests
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > $O/nccl-build.log 2>&1 &
BUILD=$!
sw() {  # sw NAME NP COLL SIZES REG EXTRA ENV...
  local name=$1 np=$2 coll=$3 sizes=$4 reg=$5 extra=$6; shift 6
  env "$@" timeout 120 $B/fxperf --np $np --mem cuda -R $reg $sizes -n 20 -w 5 -c 1 $extra $coll > $O/k/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $S
}
L="-b 16M -e 1G -f 2"
sw bc4-auto-1 4 broadcast "$L" 1 ""
for t in ce_runs_mid_calls_as_one_simple_kernel ce_runs_the_copy_collectives_on_windows_2_and_4_ranks; do
  FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 240 $B/device-tests --exact $t --test-threads 1 > $O/t/$t.log 2>&1
  echo "test $t rc=$? at $((SECONDS-T0))s" >> $S
done
wait $BUILD; echo "build rc=$? at $((SECONDS-T0))s" >> $S
timeout 60 $SRC/build/broadcast_perf $L -n 20 -w 5 -c 1 -g 4 > $O/n/nccl-broadcast.log 2>&1; echo "nccl rc=$?" >> $S
timeout 60 $SRC/build/broadcast_perf $L -n 20 -w 5 -c 1 -g 4 -R 2 -x 2 > $O/n/nccl-ce4-broadcast.log 2>&1; echo "nccl-ce4 rc=$?" >> $S
CUDA_VISIBLE_DEVICES=0,1 timeout 60 $SRC/build/broadcast_perf $L -n 20 -w 5 -c 1 -g 2 -R 2 -x 2 > $O/n/nccl-ce2-broadcast.log 2>&1; echo "nccl-ce2 rc=$?" >> $S
sw bc4-win-1 4 broadcast "$L" 2 ""
CUDA_VISIBLE_DEVICES=0,1 sw bc2-win-1 2 broadcast "$L" 2 ""
sw bc4-auto-2 4 broadcast "$L" 1 ""
sw bc4-win-2 4 broadcast "$L" 2 ""
CUDA_VISIBLE_DEVICES=0,1 sw bc2-win-2 2 broadcast "$L" 2 ""
sw bc4-old-chunks 4 broadcast "$L" 1 "" FERROCX_CE_SIMPLE_CHUNK=64K
sw bc4-all-reg 4 broadcast "-b 1M -e 1G -f 4" 1 "-r all -n 5 -w 2"
sw bc3-all-reg 3 broadcast "-b 1M -e 1G -f 4" 1 "-r all -n 5 -w 2"
sw bc4-all-win 4 broadcast "-b 1M -e 1G -f 4" 2 "-r all -n 5 -w 2"
CUDA_VISIBLE_DEVICES=0,1 sw bc2-all-win 2 broadcast "-b 1M -e 1G -f 4" 2 "-r all -n 5 -w 2"
rm -f $O/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
grep -v 'rc=0' $S; echo "done at $((SECONDS-T0))s"
for f in $O/t/*.log; do echo "$(basename $f): $(grep -E '^test result' $f)"; done
for f in $O/k/*.log; do printf '%-16s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; grep -c -i 'error\|panick' $f | sed 's/^/ err=/'; done
for f in $O/n/*.log; do printf '%-16s' $(basename $f .log); grep -E "^ +[0-9]" $f | awk '{printf " %s:%s/%s%s", $1/1048576, $6, $10, ($9+$13>0?"!W":"")}'; echo; done
