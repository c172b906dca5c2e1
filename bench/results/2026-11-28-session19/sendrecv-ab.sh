#!/usr/bin/env bash
# Host 8 B-4 KiB sendrecv, 2 ranks bound: fxperf before (OLD) and after (NEW)
# the one-launch route, and Open MPI's sendrecv, alternating, ROUNDS rounds.
#   OLD=/tmp/fxperf-old NEW=target/release/fxperf bench/results/2026-11-28-session19/sendrecv-ab.sh
set -euo pipefail
ROUNDS="${ROUNDS:-3}"
for r in $(seq 1 "$ROUNDS"); do
  for who in old new ompi; do
    case $who in
      old) out=$("$OLD" --np 2 --bind core -b 8 -e 4K -f 8 -n 100000 -w 2000 -c 1 sendrecv) ;;
      new) out=$("$NEW" --np 2 --bind core -b 8 -e 4K -f 8 -n 100000 -w 2000 -c 1 sendrecv) ;;
      ompi) out=$(mpirun --allow-run-as-root --bind-to core -np 2 bench/build/sendrecv -b 8 -e 4K -f 8 -n 100000 -w 2000 -c 1) ;;
    esac
    echo "$out" | awk -v r="$r" -v w="$who" '/^ +[0-9]/ {printf "round %s %-4s %6s B %s us\n", r, w, $1, $6}'
  done
done
