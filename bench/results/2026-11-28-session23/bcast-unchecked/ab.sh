#!/usr/bin/env bash
# Session 23: host broadcast with the call check on (old tree and this one) and off
# (this one: roots run ahead through the deeper rings), against Open MPI, alternating.
#   ab.sh OLD NEW OUT NP ROUNDS "SIZES" "ITERS"
set -u
OLD=$1 NEW=$2 O=$3 NP=$4 R=$5 S=$6 I=$7
mkdir -p $O
if [ "$NP" -le "$(nproc)" ]; then FB="--bind core"; MB="--bind-to core"; else FB="--bind none"; MB="--oversubscribe --bind-to none"; fi
for r in $(seq 1 $R); do
  for c in broadcast; do
    $OLD --np $NP $FB $S $I -c 1 $c > $O/old-$c-$NP-$r.txt 2>&1
    $NEW --np $NP $FB $S $I -c 1 $c > $O/new-$c-$NP-$r.txt 2>&1
    FERROCX_CHECK_CALLS=0 $NEW --np $NP $FB $S $I -c 1 $c > $O/off-$c-$NP-$r.txt 2>&1
    mpirun --allow-run-as-root $MB -np $NP bench/build/colls $S $I -c 1 $c > $O/ompi-$c-$NP-$r.txt 2>&1
  done
done
for v in old new off ompi; do
  printf "%-5s" $v
  for r in $(seq 1 $R); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v-broadcast-$NP-$r.txt; done; echo
done
grep -h "wrong\|Wrong\|Out of bounds" $O/*-$NP-*.txt | sort | uniq -c
