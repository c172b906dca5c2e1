#!/usr/bin/env bash
# Session 13, call 3 (4 GPUs): (q) ce retiring launches by bisection from 32 tracked
# (bin3/fxperf) against the session's starting tree (fxperf-base), 2 ranks, small sizes,
# with spans, alternated; (s) 4 ranks with 256 KiB slots under auto against the base
# (reduce_scatter, all_reduce, broadcast); (d) the ce device tests that run the Simple
# kernel at 4 ranks, graph replays and a killed rank, on the new tree.
set -u
O=$OUT/r; mkdir -p $O/q $O/s $O/d
B=gpu-run/bin; N=gpu-run/bin3
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_REQUIRE_GPU=1
T0=$SECONDS
S=$O/summary.txt
{ nvidia-smi -L; nvidia-smi topo -m; } > $O/gpus.txt 2>&1
for round in 1 2; do
  for bin in $B/fxperf-base $N/fxperf; do
    tag=$(basename $(dirname $bin))-$(basename $bin)
    for c in all_reduce sendrecv broadcast; do
      FERROCX_SPANS=1 timeout 60 $bin --np 2 --mem cuda -b 8 -e 64K -f 8 -n 1000 -w 100 -c 1 $c > $O/q/$tag-$c-r$round.log 2>&1
      echo "$tag $c r$round rc=$? at $((SECONDS-T0))s" >> $S
    done
  done
done
for round in 1 2; do
  for bin in $B/fxperf-base $N/fxperf; do
    tag=$(basename $(dirname $bin))-$(basename $bin)
    timeout 60 $bin --np 4 --mem cuda -b 32M -e 1G -f 4 -n 20 -w 5 -c 1 reduce_scatter > $O/s/$tag-rs-r$round.log 2>&1; echo "$tag rs r$round rc=$? at $((SECONDS-T0))s" >> $S
    timeout 60 $bin --np 4 --mem cuda -b 1M -e 64M -f 4 -n 20 -w 5 -c 1 all_reduce > $O/s/$tag-ar-r$round.log 2>&1; echo "$tag ar r$round rc=$? at $((SECONDS-T0))s" >> $S
  done
done
export FXTEST_WORKER=$N/fxtest-worker
for t in ce_runs_mid_calls_as_one_simple_kernel ce_runs_the_reductions_2_and_4_ranks ce_in_a_cuda_graph_replayed_1000_times ce_names_a_rank_killed_mid_collective ce_runs_device_sends_as_one_kernel; do
  left=$((570 - SECONDS + T0)); [ $left -lt 30 ] && { echo "$t skipped" >> $S; continue; }
  timeout $left $N/device-tests $t --exact --nocapture --test-threads 1 > $O/d/$t.log 2>&1; echo "$t rc=$? at $((SECONDS-T0))s" >> $S
done
tar czf $OUT/logs.tgz -C $O .
cat $S; head -4 $O/gpus.txt
for f in $O/q/*-r2.log $O/q/*-r1.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]" $f | awk '{printf "%s:%s ", $1, $6}'; echo; grep -E "order|retire|cuLaunch|ce: collective|send/recv launch" $f | head -5; done
for f in $O/s/*.log; do echo "$(basename $f .log): $(grep -E '^ +[0-9]' $f | awk '{printf "%s:%s/%s/%s ", $1, $6, $10, $9}')"; done
for t in $O/d/*.log; do echo "$(basename $t): $(grep -E 'test result|panicked' $t | cut -c1-200 | head -2)"; done
