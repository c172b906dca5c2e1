#!/usr/bin/env bash
# The devnet MoE fault case that failed on 4 GPUs in run 45 (3 ranks, primary drops 30 completions after 40, 20 ms timeout): three times as the test has it, three times with a 100 ms timeout and 300 ms recovery.
set -u
O=$OUT/r; mkdir -p $O
B=gpu-run/bin
nvidia-smi -L > $O/gpus.txt 2>&1
for t in 20ms 20ms 20ms 100ms 100ms 100ms; do
  rec=60ms; [ $t = 100ms ] && rec=300ms
  FERROCX_IBGDA_FAULT="path=primary,after=40,count=30,drop" FERROCX_IBGDA_TIMEOUT=$t FERROCX_IBGDA_RECOVERY=$rec timeout 60 $B/fxrun -n 3 $B/fxtest-worker devnet-moe 12 64 256 3 > $O/moe-$t-$RANDOM.log 2>&1; echo "timeout $t rc=$?" | tee -a $O/summary.txt
done
tar czf $OUT/logs.tgz -C $O .
head -2 $O/gpus.txt; for f in $O/moe-*.log; do echo "== $f"; grep -E "PASS|FAIL|down|unreachable|back" $f | cut -c1-230 | head -8; done
