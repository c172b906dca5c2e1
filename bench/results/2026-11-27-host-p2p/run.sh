#!/usr/bin/env bash
# Host send/recv on shm-coll's rings vs the core's path vs Open MPI (issue 18),
# and the small collectives before/after the change (the rings' cross-checks sit
# on the collective path too). Run from the repository root; OLD_FXPERF is an
# fxperf built at dd07bf9 (git worktree + cargo build --release -p ferrocx-tools).
set -euo pipefail
D=bench/results/2026-11-27-host-p2p
export REPEAT=3 NPS="2 4" COLLS="sendrecv" SIZES="-b 8 -e 64K -f 8" ITERS="-n 20000 -w 1000"
OUT=$D/shm-coll bench/compare-colls.sh > /dev/null
FERROCX_SHM_COLL_P2P_BYTES=0 OUT=$D/core bench/compare-colls.sh > /dev/null
# Collectives, 2 ranks bound, old and new binaries alternating.
NEW=target/release/fxperf
: > $D/colls-old-new.txt
for r in 1 2 3; do
  for c in all_reduce alltoall broadcast; do
    for b in old new; do
      bin=$NEW; [ $b = old ] && bin=$OLD_FXPERF
      echo "== round $r $c $b" >> $D/colls-old-new.txt
      $bin --np 2 --bind core -b 8 -e 4K -f 8 -n 20000 -w 1000 -c 1 $c | grep -E "^ +[0-9]" >> $D/colls-old-new.txt
    done
  done
done
