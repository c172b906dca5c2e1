#!/bin/bash
# usage: ab.sh NP COLL ROUNDS
np=$1; c=$2; R=${3:-4}
if [ "$np" -le 2 ]; then B="--bind core"; N="-n 50000 -w 2000"; else B="--bind none"; N="-n 3000 -w 300"; fi
for i in $(seq $R); do
 for b in old new; do
  [ $b = old ] && X=/work/tgt-ab/release/fxperf || X=/work/main/target/release/fxperf
  echo "$b $(timeout 300 $X --np $np $B -b 8 -e 512 -f 8 $N -c 1 $c | awk '/^ *[0-9]/{printf "%s:%s ", $1, $6}')"
 done
done
