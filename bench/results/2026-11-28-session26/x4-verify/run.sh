#!/usr/bin/env bash
# Session 26, call 4 (4 GPUs), the final selection (gather and scatter as the Simple
# kernel to 32 MiB blocks above 2 ranks, alltoall to 128 MiB, broadcast's chain to
# 1 GiB): the Simple kernel's device matrix (now with gather and scatter at 4 ranks,
# every root), the rooted calls with the root's own buffer outside windows, then fxperf
# gather, scatter and broadcast from every root in turn (-r all), 1 MiB-1 GiB, on
# windows (-R 2) and registered (-R 1), checked.
set -u
O=$OUT/r; mkdir -p $O/t $O/k
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
T0=$SECONDS; S=$O/summary.txt; : > $S
nvidia-smi -L > $O/gpus.txt 2>&1
for t in ce_runs_mid_calls_as_one_simple_kernel ce_runs_rooted_calls_whose_roots_own_buffer_is_outside_windows; do
  t1=$SECONDS
  FXTEST_WORKER=$B/fxtest-worker FERROCX_REQUIRE_GPU=1 timeout 200 $B/device-tests --exact $t --test-threads 1 > $O/t/$t.log 2>&1
  echo "$t rc=$? $((SECONDS - t1)) s" >> $S
done
for c in gather scatter broadcast; do for r in 2 1; do
  timeout 60 $B/fxperf --np 4 --mem cuda -R $r -r all -b 1M -e 1G -f 4 -n 10 -w 3 -c 1 $c > $O/k/$c-R$r.log 2>&1
  echo "$c -R $r rc=$? at $((SECONDS-T0))s wrong=$(grep -E '^ +[0-9]' $O/k/$c-R$r.log | awk '{s+=$9+$13} END {print s+0}')" >> $S
done; done
tar czf $OUT/logs.tgz -C $O .
cat $S
for f in $O/t/*.log; do grep -E "test result|panicked" $f | head -3; done
