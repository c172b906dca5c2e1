#!/usr/bin/env bash
# Six alternations of Open MPI's and ferrocx's sendrecv, 2 ranks bound, 8 B-4 KiB
# (the VM flips between a fast and a slow state for minutes at a time: each pair
# ran back to back within a second or two). Prints one line per run.
set -u
for r in 1 2 3 4 5 6; do
  echo "== $r ompi $(date +%T)"
  mpirun --allow-run-as-root --bind-to core -np 2 --mca pml ob1 --mca btl self,vader bench/build/sendrecv -b 8 -e 4K -f 8 -n 50000 -w 1000 | grep -E "^ +[0-9]" | awk '{printf "%s:%s ", $1, $6} END {print ""}'
  echo "== $r ferrocx"
  target/release/fxperf --np 2 -b 8 -e 4K -f 8 -n 50000 -w 1000 -c 1 sendrecv | grep -E "^ +[0-9]" | awk '{printf "%s:%s(wrong %s) ", $1, $6, $9} END {print ""}'
done
