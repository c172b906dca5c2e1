#!/usr/bin/env bash
# Host sendrecv 4-64 KiB: shm-coll's rings with 4 KiB slots (the old default:
# larger messages take the core) and 64 KiB slots, against Open MPI; 2 ranks
# bound, 4 ranks on the 2 vCPUs unbound. ROUNDS rounds, alternating.
set -euo pipefail
FX="${FX:-target/release/fxperf}"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for np in 2 4; do
    if [ "$np" = 2 ]; then bind="--bind core"; mb="--bind-to core"; it="-n 20000 -w 1000"; else bind="--bind none"; mb="--oversubscribe --bind-to none"; it="-n 3000 -w 200"; fi
    for pb in 4K 64K; do
      echo "round $r np $np rings=$pb: $(FERROCX_SHM_COLL_P2P_BYTES=$pb $FX --np $np $bind -b 4K -e 64K -f 2 $it -c 1 sendrecv | awk '/^ +[0-9]/ {printf "%s ", $6}')"
    done
    echo "round $r np $np ompi: $(mpirun --allow-run-as-root $mb -np $np bench/build/sendrecv -b 4K -e 64K -f 2 $it -c 1 | awk '/^ +[0-9]/ {printf "%s ", $6}')"
  done
done
