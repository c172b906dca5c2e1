#!/usr/bin/env bash
# Session 23 (final tree): host broadcast and all_reduce, 8 B-4 KiB, alternating:
# old = the tree before (0a3b... = e27ceec), new = this tree with the check on (default),
# off = FERROCX_CHECK_CALLS=0 (default memory: 64-deep rings at 2 ranks, 16 at 4),
# off64 = the same with FERROCX_SHM_COLL_MEMORY=64M (64 deep at 4 ranks), ompi = Open MPI 4.1.4 vader.
#   ab2.sh OLD NEW OUT NP ROUNDS "ITERS"
set -u
OLD=$1 NEW=$2 O=$3 NP=$4 R=$5 I=$6
S="-b 8 -e 4K -f 8"
mkdir -p $O
if [ "$NP" -le "$(nproc)" ]; then FB="--bind core"; MB="--bind-to core"; else FB="--bind none"; MB="--oversubscribe --bind-to none"; fi
for r in $(seq 1 $R); do
  for c in broadcast all_reduce; do
    $OLD --np $NP $FB $S $I -c 1 $c > $O/old-$c-$r.txt 2>&1
    $NEW --np $NP $FB $S $I -c 1 $c > $O/new-$c-$r.txt 2>&1
    FERROCX_CHECK_CALLS=0 $NEW --np $NP $FB $S $I -c 1 $c > $O/off-$c-$r.txt 2>&1
    FERROCX_CHECK_CALLS=0 FERROCX_SHM_COLL_MEMORY=64M $NEW --np $NP $FB $S $I -c 1 $c > $O/off64-$c-$r.txt 2>&1
    mpirun --allow-run-as-root $MB -np $NP bench/build/colls $S $I -c 1 $c > $O/ompi-$c-$r.txt 2>&1
  done
done
for c in broadcast all_reduce; do
  echo "== $c, µs out of place at 8 B, 64 B, 512 B, 4 KiB, per round"
  for v in old new off off64 ompi; do
    printf "%-6s" $v
    for r in $(seq 1 $R); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v-$c-$r.txt; done; echo
  done
done
echo "wrong (fxperf, both columns): $(awk '/^ +[0-9]+ /{w+=$9+$13} END{print w+0}' $O/old-* $O/new-* $O/off*)"
grep -h "Out of bounds" $O/ompi-* | sort | uniq -c
