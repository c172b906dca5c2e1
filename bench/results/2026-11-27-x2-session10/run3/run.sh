#!/usr/bin/env bash
# Session 10, call 3 (4 GPUs): the 4-rank rows furthest from NCCL (all_reduce 0.73-0.93x,
# copy collectives 0.93-0.95x at 256 MiB): fxperf and nccl-tests at 16-512 MiB, then
# ce's Simple kernel over slot x blocks (and two-shot past its 64 MiB limit); at 2 ranks
# the point-to-point kernel's blocks for sendrecv 64 KiB-8 MiB.
set -u
O=$OUT/r; mkdir -p $O/v
B=gpu-run/bin
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
nvidia-smi -L > $O/gpus.txt 2>&1
NP=4 SIZES="-b 16M -e 512M -f 2" ITERS="-n 10 -w 3" PERF_COLLS="all_reduce all_gather reduce_scatter alltoall" STEP_TIMEOUT=150 bash scripts/gpu-check.sh $B $O/p perf nccl > $O/console.txt 2>&1; echo "perf nccl rc=$? at $((SECONDS-T0))s" >> $O/summary.txt
P="$B/fxperf --np 4 --mem cuda -b 16M -e 512M -f 2 -n 10 -w 3 -c 1"
for v in "SLOT=128K" "BLOCKS=128" "SLOT=128K BLOCKS=128" "SLOT=128K BLOCKS=128 BYTES=1G" "BLOCKS=128 BYTES=1G"; do
  name=$(echo $v | tr ' =' '_-')
  envs=""; for kv in $v; do envs="$envs FERROCX_CE_SIMPLE_$kv"; done
  for c in all_reduce all_gather; do
    env $envs timeout 90 $P $c > $O/v/$c-$name.log 2>&1
  done
  echo "$v done at $((SECONDS-T0))s" >> $O/summary.txt
  [ $((SECONDS-T0)) -gt 480 ] && break
done
for bl in 32 128; do
  CUDA_VISIBLE_DEVICES=0,1 FERROCX_CE_SIMPLE_BLOCKS=$bl timeout 60 $B/fxperf --np 2 --mem cuda -b 64K -e 8M -f 2 -n 100 -w 10 -c 1 sendrecv > $O/v/sendrecv-blocks-$bl.log 2>&1
done
CUDA_VISIBLE_DEVICES=0,1 timeout 60 $B/fxperf --np 2 --mem cuda -b 64K -e 8M -f 2 -n 100 -w 10 -c 1 sendrecv > $O/v/sendrecv-blocks-default.log 2>&1
echo "end at $((SECONDS-T0))s" >> $O/summary.txt
tar czf $OUT/logs.tgz -C $O .
cat $O/summary.txt; head -4 $O/gpus.txt
for c in all_reduce all_gather reduce_scatter alltoall; do echo "== $c default / nccl (us oop)"; for f in $O/p/fxperf-$c.log $O/p/nccl-$c.log; do grep -E "^ +[0-9]" $f | awk '{printf "%s:%s ", $1/1048576, $6}'; echo; done; done
for f in $O/v/*.log; do echo "$(basename $f): $(grep -E '^ +[0-9]' $f | awk '{printf "%s:%s/%s ", $1/1048576, $6, $10}')"; done
