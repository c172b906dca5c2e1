#!/usr/bin/env bash
# Session 35, dev VM (2 vCPUs): sendrecv, 4 ranks unbound (oversubscribed), old (3dcbafe)
# against new (83b4625) against Open MPI, alternated, 8 rounds of 200,000 calls
# (the target table's 5,000-call runs are noisier). OLD and NEW: fxperf binaries.
set -u
O=$(dirname "$0")
for r in $(seq 1 8); do
  for v in old new; do
    B=$OLD; [ $v = new ] && B=$NEW
    timeout 120 $B --np 4 --bind none -b 8 -e 4K -f 8 -n 200000 -w 2000 -c 0 sendrecv > $O/$v.$r 2>&1
  done
  timeout 120 mpirun --allow-run-as-root -np 4 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader bench/build/sendrecv -b 8 -e 4K -f 8 -n 200000 -w 2000 -c 0 > $O/ompi.$r 2>&1
done
for v in old new ompi; do
  printf "%-5s" $v; for r in $(seq 1 8); do awk '/^ +[0-9]+ /{printf " %s", $6} END{printf " |"}' $O/$v.$r; done; echo
done > $O/sr4.txt
cat $O/sr4.txt
