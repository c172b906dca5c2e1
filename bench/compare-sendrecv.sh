#!/usr/bin/env bash
# fxperf sendrecv against Open MPI's MPI_Sendrecv and memcpy, back to back on
# the same machine, repeated and interleaved (this VM's bandwidth drifts), then
# one markdown table of medians with the ratio per size.
#
#   bench/compare-sendrecv.sh            # REPEAT=5, 2 ranks, 8 B .. 256 MiB
# Needs: Open MPI (apt-get install openmpi-bin libopenmpi-dev), cc, cargo, python3.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"
REPEAT="${REPEAT:-5}"
OUT="${OUT:-$HERE/results/$(date +%Y-%m-%d)-compare-sendrecv}"
mkdir -p "$OUT"
make -C "$HERE" >/dev/null
cargo build --release -q -p ferrocx-tools
FX="$ROOT/target/release/fxperf"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to core --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma)
{
  echo "# date: $(date -Is)  host: $(hostname)  cpus: $(nproc)  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "# kernel: $(uname -r)  ferrocx: $(git rev-parse --short HEAD)  $(mpirun --version | head -1)"
} > "$OUT/machine.txt"
for r in $(seq 1 "$REPEAT"); do
  echo "== round $r/$REPEAT" >&2
  "${MPIRUN[@]}" "$HERE/build/sendrecv" -b 8 -e 256M -f 2 -n 20 -w 5 > "$OUT/ompi.$r"
  "$FX" --np 2 -b 8 -e 256M -f 2 -n 20 -w 5 -R 1 sendrecv > "$OUT/fx.$r"
  "$FX" --np 2 -b 8 -e 256M -f 2 -n 20 -w 5 -R 0 sendrecv > "$OUT/fxr0.$r"
  "${MPIRUN[@]}" "$HERE/build/sendrecv" -b 8 -e 64K -f 2 -n 10000 -w 1000 > "$OUT/lat-ompi.$r"
  "$FX" --np 2 -b 8 -e 64K -f 2 -n 10000 -w 1000 sendrecv > "$OUT/lat-fx.$r"
  "$HERE/build/memcpy" -b 16M -e 256M > "$OUT/memcpy1.$r"
  "$HERE/build/memcpy" -b 16M -e 256M -j 2 > "$OUT/memcpy2.$r"
done
cat "$OUT/machine.txt"
python3 "$HERE/compare.py" "$OUT" | tee "$OUT/summary.md"
