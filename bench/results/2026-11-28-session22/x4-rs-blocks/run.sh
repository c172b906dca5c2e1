#!/usr/bin/env bash
# Session 22, call 6 (4 GPUs): reduce_scatter's Simple kernel with 128 sending blocks
# above 2 ranks (FERROCX_CE_SIMPLE_BLOCKS=auto, the new default) against 64 (the old),
# 1 MiB-1 GiB alternated twice, NCCL alongside; ce's reduction tests at 2 and 4 ranks.
set -u
O=$OUT/r; mkdir -p $O
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1 FERROCX_TIMEOUT=60
B=gpu-run/bin; SRC=gpu-run/nccl-tests
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
make -C $SRC -j 16 CUDA_HOME=/usr/local/cuda NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > /dev/null 2>&1
S="-b 1M -e 1G -f 2 -n 20 -w 5 -c 1"
timeout 150 $SRC/build/reduce_scatter_perf $S -g 4 > $O/nccl.log 2>&1
for rep in 1 2; do
  timeout 150 $B/fxperf --np 4 --mem cuda $S reduce_scatter > $O/fx-auto-$rep.log 2>&1; echo "auto-$rep rc=$?" >> $O/summary.txt
  FERROCX_CE_SIMPLE_BLOCKS=64 timeout 150 $B/fxperf --np 4 --mem cuda $S reduce_scatter > $O/fx-64-$rep.log 2>&1; echo "64-$rep rc=$?" >> $O/summary.txt
done
for t in ce_runs_the_reductions_2_and_4_ranks; do
  env FXTEST_WORKER=$B/fxtest-worker timeout 200 $B/device-tests --exact $t --test-threads 1 > $O/$t.log 2>&1
  echo "$t rc=$? $(grep -E 'test result' $O/$t.log)" >> $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
head -1 $O/gpus.txt
printf "%-8s " size; awk '/^ +[0-9]+ /{printf "%9s ", $1}' $O/nccl.log; echo
printf "%-8s " NCCL; awk '/^ +[0-9]+ /{printf "%9s ", $6}' $O/nccl.log; echo
for f in fx-auto-1 fx-64-1 fx-auto-2 fx-64-2; do printf "%-8s " ${f#fx-}; awk '/^ +[0-9]+ /{printf "%9s ", $6}' $O/$f.log; echo; printf "%-8s " ip; awk '/^ +[0-9]+ /{printf "%9s ", $10}' $O/$f.log; echo; grep -h -E 'wrong' $O/$f.log | head -0; done
awk '/^ +[0-9]+ /{w+=$9+$13} END{print "fxperf wrong:", w}' $O/fx-*.log
cat $O/summary.txt | tr '\n' ' '
