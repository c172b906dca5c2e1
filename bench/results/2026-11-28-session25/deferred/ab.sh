#!/usr/bin/env bash
# Session 25: host rooted collectives with the call check synchronous (the default),
# deferred (FERROCX_CHECK_CALLS=deferred), off, and Open MPI (vader), alternated.
#   ab.sh FXPERF OUT NP ROUNDS "ITERS" "COLLS"
set -u
FX=$1 O=$2 NP=$3 R=$4 I=$5 C=$6
S="-b 8 -e 4K -f 8"
mkdir -p $O
if [ "$NP" -le "$(nproc)" ]; then FB="--bind core"; MB="--bind-to core"; else FB="--bind none"; MB="--oversubscribe --bind-to none"; fi
for r in $(seq 1 $R); do
  for c in $C; do
    $FX --np $NP $FB $S $I -c 1 $c > $O/sync-$c-$r.txt 2>&1
    FERROCX_CHECK_CALLS=deferred $FX --np $NP $FB $S $I -c 1 $c > $O/deferred-$c-$r.txt 2>&1
    FERROCX_CHECK_CALLS=0 $FX --np $NP $FB $S $I -c 1 $c > $O/off-$c-$r.txt 2>&1
    mpirun --allow-run-as-root $MB -np $NP bench/build/colls $S $I -c 1 $c > $O/ompi-$c-$r.txt 2>&1
  done
done
for c in $C; do
  echo "== $c, µs out of place at 8 B, 64 B, 512 B, 4 KiB, per round"
  for v in sync deferred off ompi; do
    printf "%-9s" $v
    for r in $(seq 1 $R); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v-$c-$r.txt; done; echo
  done
done
echo "wrong (fxperf, both columns): $(awk '/^ +[0-9]+ /{w+=$9+$13} END{print w+0}' $O/sync-* $O/deferred-* $O/off-*)"
grep -h "Out of bounds" $O/ompi-* | sort | uniq -c
