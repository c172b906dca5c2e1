#!/usr/bin/env bash
# fxperf collectives against Open MPI's, back to back on the same machine,
# repeated and interleaved (this VM's bandwidth drifts), then one markdown
# table per rank count and collective: per-size medians of busbw and time and
# the ferrocx / Open MPI ratios.
#
#   bench/compare-colls.sh                 # REPEAT=3, 2 and 4 ranks, 5 collectives, 8 B .. 64 MiB x4
#   REPEAT=5 NPS="2" COLLS="all_reduce" bench/compare-colls.sh
#
# Settings (environment):
#   REPEAT  rounds (default 3)           NPS    rank counts (default "2 4")
#   COLLS   collectives (default: all_reduce all_gather reduce_scatter alltoall broadcast;
#           sendrecv runs bench/mpi/sendrecv.c on the Open MPI side)
#   SIZES   size sweep (default "-b 8 -e 64M -f 4": 13 sizes; -f 2 doubles the runtime)
#   ITERS   iterations (default "-n 20 -w 5")
#   OUT     result directory (default bench/results/<date>-compare-colls)
# Both sides use float / sum / root 0 and check every element (-c 1).
# Binding mirrors compare-sendrecv.sh: with no more ranks than CPUs, rank i on
# CPU i (mpirun --bind-to core, fxperf --bind core); with more ranks than CPUs
# (4 ranks on this 2-vCPU VM) nothing is bound (mpirun --oversubscribe
# --bind-to none, fxperf --bind none). Open MPI runs ob1 + vader with CMA.
# Needs: Open MPI (apt-get install openmpi-bin libopenmpi-dev), cc, cargo, python3.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"
REPEAT="${REPEAT:-3}"
NPS="${NPS:-2 4}"
COLLS="${COLLS:-all_reduce all_gather reduce_scatter alltoall broadcast}"
SIZES="${SIZES:--b 8 -e 64M -f 4}"
ITERS="${ITERS:--n 20 -w 5}"
OUT="${OUT:-$HERE/results/$(date +%Y-%m-%d)-compare-colls}"
mkdir -p "$OUT"
make -C "$HERE" >/dev/null
cargo build --release -q -p ferrocx-tools
FX="${CARGO_TARGET_DIR:-$ROOT/target}/release/fxperf"
NCPU="$(nproc)"
START=$(date +%s)
{
  echo "# date: $(date -Is)  host: $(hostname)  cpus: $NCPU  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "# kernel: $(uname -r)  ferrocx: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core plugins sdk tools 2>/dev/null || echo '+dirty')  $(mpirun --version | head -1)"
  echo "# REPEAT=$REPEAT NPS='$NPS' COLLS='$COLLS' SIZES='$SIZES' ITERS='$ITERS'"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/machine.txt"
for r in $(seq 1 "$REPEAT"); do
  for np in $NPS; do
    if [ "$np" -le "$NCPU" ]; then
      MPIBIND=(--bind-to core); FXBIND=(--bind core)
    else
      MPIBIND=(--oversubscribe --bind-to none); FXBIND=(--bind none)
    fi
    MPIRUN=(mpirun --allow-run-as-root -np "$np" "${MPIBIND[@]}" --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
    for c in $COLLS; do
      echo "== round $r/$REPEAT, $np ranks, $c" >&2
      if [ "$c" = sendrecv ]; then OMPI=("$HERE/build/sendrecv"); else OMPI=("$HERE/build/colls"); fi
      OARG=(); [ "$c" = sendrecv ] || OARG=("$c")
      # shellcheck disable=SC2086
      "${MPIRUN[@]}" "${OMPI[@]}" $SIZES $ITERS -c 1 "${OARG[@]}" > "$OUT/ompi.$c.np$np.$r" || echo "!! ompi $c np$np round $r failed ($?)" >&2
      # shellcheck disable=SC2086
      "$FX" --np "$np" "${FXBIND[@]}" $SIZES $ITERS -c 1 "$c" > "$OUT/fx.$c.np$np.$r" || echo "!! fxperf $c np$np round $r failed ($?)" >&2
    done
  done
done
END=$(date +%s)
{
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# wall time: $((END - START)) s"
} >> "$OUT/machine.txt"
cat "$OUT/machine.txt"
python3 "$HERE/compare-colls.py" "$OUT" | tee "$OUT/summary.md"
