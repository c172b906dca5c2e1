#!/usr/bin/env bash
# Session 14, call 3 (2 GPUs): the new defaults (device sends to 1 MiB as LL lines;
# alltoall at 2 ranks as the Simple kernel to 512 MiB blocks): the device tests they
# touch and the two no call of this session ran, under MPS; the tree before
# (fxperf-base) against the new one, alternated; the whole 2-rank table vs NCCL -g 2.
set -u
O=$OUT/r; mkdir -p $O/a $O/k $O/p
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
nvidia-cuda-mps-control -d; echo "mps rc=$?" >> $O/summary.txt
FXTEST_WORKER=$B/fxtest-worker timeout 200 $B/device-tests --nocapture --test-threads 1 --exact killed_rank_during_device_transfers the_cores_device_sends_and_receives_are_checked ce_runs_device_sends_as_one_kernel ce_names_a_send_that_meets_a_receive_of_another_size ce_runs_the_copy_collectives_on_windows_2_and_4_ranks > $O/a/device.log 2>&1
echo "device rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
echo quit | nvidia-cuda-mps-control; sleep 2
sw() {  # sw NAME BIN COLL FXPERF-ARGS
  timeout 60 $B/$2 --np 2 --mem cuda $4 -c 1 $3 > $O/k/$1.log 2>&1
  echo "ab $1 rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
}
for rep in 1 2; do
  sw sr-base-$rep fxperf-base sendrecv "-b 256K -e 4M -f 2 -n 300 -w 30"
  sw sr-new-$rep fxperf sendrecv "-b 256K -e 4M -f 2 -n 300 -w 30"
  sw a2a-base-$rep fxperf-base alltoall "-b 512M -e 1G -f 2 -n 20 -w 3"
  sw a2a-new-$rep fxperf alltoall "-b 512M -e 1G -f 2 -n 20 -w 3"
done
left=$((560 - SECONDS + T0))
[ $left -gt 100 ] && NP=2 ITERS="-n 40 -w 5" SIZES="-b 8 -e 1G -f 2" STEP_TIMEOUT=150 timeout $left bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console-p.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
rm -f $O/*/nccl-build.log
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -3 $O/gpus.txt
grep -E "test result|^ok$|FAILED|panicked|^test " $O/a/device.log | cut -c1-160 | tail -20
for f in $O/k/*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}'; echo; done
