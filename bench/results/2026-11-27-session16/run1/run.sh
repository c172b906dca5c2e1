#!/usr/bin/env bash
# Session 16, call 1 (2 GPUs): the Simple kernel's fold with the first rank's loads
# straight into the accumulators (both ranks' loads in flight), FX_SP_FOLD_UNITS 4 / 8,
# the receivers' fence before frees on / off (FX_SP_FREE_FENCE, as NCCL's receive
# post: no fence), against the tree before (fxperf-base); broadcast chunk cap and
# blocks; NCCL -g 2 at -n 200; the device tests under the candidate defines.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; } > $O/gpus.txt 2>&1
sw() {  # sw NAME BIN COLL FXPERF-ARGS ENV...
  local name=$1 bin=$2 coll=$3 args=$4; shift 4
  env FERROCX_TIMEOUT=15 "$@" timeout 60 $B/$bin --np 2 --mem cuda $args -c 1 $coll > $O/k/$name.log 2>&1
  echo "ab $name rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
S="-b 1M -e 32M -f 2 -n 200 -w 20"
for rep in 1 2; do
  sw ar-base-$rep fxperf-base all_reduce "$S"
  sw ar-f4-$rep fxperf all_reduce "$S"
  sw ar-f8-$rep fxperf all_reduce "$S" FX_EXP_DEFINES=FX_SP_FOLD_UNITS=8
  sw ar-f8n-$rep fxperf all_reduce "$S" FX_EXP_DEFINES=FX_SP_FOLD_UNITS=8,FX_SP_FREE_FENCE=0
  sw ar-f4n-$rep fxperf all_reduce "$S" FX_EXP_DEFINES=FX_SP_FREE_FENCE=0
done
for rep in 1 2; do
  sw sr-base-$rep fxperf-base sendrecv "-b 256K -e 4M -f 2 -n 200 -w 20"
  sw sr-new-$rep fxperf sendrecv "-b 256K -e 4M -f 2 -n 200 -w 20"
  sw sr-nf-$rep fxperf sendrecv "-b 256K -e 4M -f 2 -n 200 -w 20" FX_EXP_DEFINES=FX_SP_FREE_FENCE=0
done
BS="-b 16M -e 128M -f 2 -n 60 -w 10"
for rep in 1 2; do
  sw bc-base-$rep fxperf-base broadcast "$BS"
  sw bc-nf-$rep fxperf broadcast "$BS" FX_EXP_DEFINES=FX_SP_FREE_FENCE=0
  sw bc-c128-$rep fxperf broadcast "$BS" FX_EXP_DEFINES=FX_SP_FREE_FENCE=0 FX_EXP_CHUNK_MAX=131072
  sw bc-b96-$rep fxperf broadcast "$BS" FX_EXP_DEFINES=FX_SP_FREE_FENCE=0 FERROCX_CE_SIMPLE_BLOCKS=96
done
PERF_COLLS="all_reduce broadcast sendrecv" NP=2 ITERS="-n 200 -w 20" SIZES="-b 1M -e 128M -f 2" STEP_TIMEOUT=150 timeout 200 bash scripts/gpu-check.sh $B $O/p nccl > $O/console-p.txt 2>&1; echo "nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
FX_EXP_DEFINES=FX_SP_FOLD_UNITS=8,FX_SP_FREE_FENCE=0 FXTEST_WORKER=$B/fxtest-worker timeout 150 $B/device-tests --nocapture --test-threads 1 --exact ce_runs_mid_calls_as_one_simple_kernel ce_runs_device_sends_as_one_kernel ce_runs_the_reductions_2_and_4_ranks ce_names_a_rank_killed_mid_collective > $O/a/device.log 2>&1
echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control; sleep 1
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -2 $O/gpus.txt
grep -E "test result|FAILED|panicked|^test " $O/a/device.log | cut -c1-200 | tail -8
for f in $O/k/*.log; do echo "== $(basename $f .log)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9+$13}'; echo; grep -i "error\|panick" $f | head -2; done
for c in all_reduce broadcast sendrecv; do echo "== nccl $c"; grep -E "^ +[0-9]" $O/p/nccl-$c.log | awk '{printf "%s:%s/%s ", $1, $6, $10}'; echo; done
