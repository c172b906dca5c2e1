#!/usr/bin/env bash
# Builds the baseline benchmarks and runs them, writing one file per
# configuration (all repeats + a median summary) to bench/results/<date>-<name>.txt.
#
#   bench/run-baselines.sh              # full set
#   REPEAT=3 NP=2 DATE=2025-01-01 bench/run-baselines.sh
#
# Needs: Open MPI (mpicc, mpirun), a C compiler.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"

NP="${NP:-2}"
DATE="${DATE:-$(date +%Y-%m-%d)}"
RESULTS="$HERE/results"
SIZES="${SIZES:--b 8 -e 256M -f 2}"
ITERS="${ITERS:--n 20 -w 5}"
# Each sendrecv configuration is run REPEAT times into the same file and a
# per-size median table is appended: this VM's memory bandwidth is noisy
# (single runs at >= 4 MiB vary by 2-4x).
REPEAT="${REPEAT:-5}"
mkdir -p "$RESULTS"

make -C "$HERE" >/dev/null

# --allow-run-as-root: the container runs as root.
# --oversubscribe:     NP ranks may equal/exceed the core count.
# --bind-to none:      let the kernel place ranks (2 ranks, 2 cores).
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NP" --bind-to none)
# Shared-memory transport: ob1 PML over the vader BTL (called "sm" from Open MPI 5).
BTL=(--mca pml ob1 --mca btl self,vader)

header() {
    echo "# date: $(date -Iseconds)"
    echo "# host: $(hostname)  cpus: $(nproc)  $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
    echo "# kernel: $(uname -r)"
    echo "# ompi: $(ompi_info --version 2>/dev/null | head -1)"
    echo "# cmd: $*"
}

runrep() { # name, command...   (REPEAT runs + median table)
    local name="$1"; shift
    local out="$RESULTS/$DATE-$name.txt"
    echo ">> $name x$REPEAT -> ${out#$ROOT/}"
    header "$@" >"$out"
    echo "# runs: $REPEAT" >>"$out"
    local i rc=0
    for ((i = 1; i <= REPEAT; i++)); do
        echo "# ===== run $i/$REPEAT =====" >>"$out"
        "$@" >>"$out" 2>&1 || { echo "!! $name run $i failed (see $out)"; rc=1; }
    done
    echo "# ===== summary =====" >>"$out"
    awk -f "$HERE/median.awk" "$out" >"$out.tmp" && cat "$out.tmp" >>"$out" && rm -f "$out.tmp"
    grep -E '^# (Avg bus bandwidth \(median|Wrong elements)' "$out" | sort | uniq -c || true
    return $rc
}

memcpy_rep() { # name, memcpy args...   (REPEAT runs; median of the per-run ceilings)
    local name="$1"; shift
    local out="$RESULTS/$DATE-$name.txt"
    echo ">> $name x$REPEAT -> ${out#$ROOT/}"
    header "$HERE/build/memcpy" "$@" >"$out"
    local i
    for ((i = 1; i <= REPEAT; i++)); do
        echo "# ===== run $i/$REPEAT =====" >>"$out"
        "$HERE/build/memcpy" "$@" >>"$out"
    done
    echo "# ===== summary: per-size median over runs of GB/s-med =====" >>"$out"
    awk '/^ +[0-9]+ +[0-9]+ / { s = $1; if (!(s in n)) o[++k] = s; v[s, ++n[s]] = $6 }
         END { printf "# %10s  %9s  %4s\n", "size", "GB/s-med", "runs"
               for (i = 1; i <= k; i++) { s = o[i]; m = n[s]
                   for (j = 1; j <= m; j++) a[j] = v[s, j]
                   for (x = 2; x <= m; x++) { t = a[x]; for (y = x - 1; y >= 1 && a[y] > t; y--) a[y + 1] = a[y]; a[y + 1] = t }
                   printf "  %10d  %9.2f  %4d\n", s, (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2, m } }' \
        "$out" >"$out.tmp" && cat "$out.tmp" >>"$out" && rm -f "$out.tmp"
    sed -n 's/^# memcpy ceiling at >=16MiB: \([0-9.]*\) GB\/s.*/\1/p' "$out" | sort -g \
        | awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
               printf "# memcpy ceiling at >=16MiB, median of %d runs: %.2f GB/s (per copier)\n", NR, m}' >>"$out"
    tail -1 "$out"
}

# 1. memcpy ceiling: one core alone, and two cores copying at the same time
#    (what both ranks of a 2-rank ring do during MPI_Sendrecv).
memcpy_rep memcpy
memcpy_rep memcpy-2copiers -j 2

# 2. MPI_Sendrecv, Open MPI defaults (no transport flags) - what a user gets.
runrep ompi-sendrecv-default "${MPIRUN[@]}" "$HERE/build/sendrecv" $SIZES $ITERS

# 3. MPI_Sendrecv over vader, each single-copy mechanism.
#    cma = process_vm_readv (one copy, the default on Linux; needs ptrace
#    permission between the ranks), emulated = copy-in/copy-out through
#    shared-memory segments, none = pipelined fragments through the FIFO.
for mech in cma emulated none; do
    runrep "ompi-sendrecv-vader-$mech" "${MPIRUN[@]}" "${BTL[@]}" \
        --mca btl_vader_single_copy_mechanism "$mech" \
        "$HERE/build/sendrecv" $SIZES $ITERS
done

# 3b. Same as vader-cma with each rank bound to its own core.  With
#     --bind-to none the kernel occasionally puts both polling ranks on one
#     core (seen: 8 B latency 11.6 us instead of 0.23 us), which shows up as
#     outliers in the runs above.
runrep ompi-sendrecv-vader-cma-bindcore mpirun --allow-run-as-root --oversubscribe -np "$NP" \
    --bind-to core "${BTL[@]}" --mca btl_vader_single_copy_mechanism cma \
    "$HERE/build/sendrecv" $SIZES $ITERS

# 4. Small-message latency with many iterations (20 iterations of a ~1 us
#    operation is mostly noise).
runrep ompi-sendrecv-vader-cma-latency "${MPIRUN[@]}" "${BTL[@]}" \
    --mca btl_vader_single_copy_mechanism cma \
    "$HERE/build/sendrecv" -b 8 -e 64K -f 2 -n 10000 -w 1000

# 5. Transport actually selected (BML decision), the vader parameters in
#    effect, and whether CMA (process_vm_readv) is really used.
{
    header ompi_info / btl_base_verbose
    ompi_info | grep -E 'MCA (btl|pml|smsc)' || true
    ompi_info --param btl vader --level 9 | grep -E 'parameter "btl_vader_(single_copy|eager_limit|rndv_eager|max_send_size|fbox)' || true
    echo "# --- selection with defaults (no MCA flags) ---"
    "${MPIRUN[@]}" --mca btl_base_verbose 100 --mca pml_base_verbose 10 \
        "$HERE/build/sendrecv" -b 8 -e 8 -n 1 -w 0 2>&1 \
        | grep -E 'selected ob1|bml: Using' || true
    if command -v strace >/dev/null; then
        for mech in cma emulated none; do
            echo "# --- strace -c per rank, sendrecv -b 1M -e 1M -n 10 -w 0 (64 warm-up + 10 timed + 1 check = 75 exchanges), single_copy=$mech ---"
            tmp="$(mktemp -d)"
            "${MPIRUN[@]}" "${BTL[@]}" --mca btl_vader_single_copy_mechanism "$mech" \
                bash -c 'exec strace -f -qq -c -e trace=process_vm_readv,process_vm_writev \
                         -o "$0.rank$OMPI_COMM_WORLD_RANK" "$@"' "$tmp/st" \
                "$HERE/build/sendrecv" -b 1M -e 1M -n 10 -w 0 >/dev/null 2>&1 || true
            for f in "$tmp"/st.rank*; do
                echo "${f##*.}: $(grep -hE 'process_vm_(read|write)v' "$f" | awk '{print $NF" calls="$(NF-1)}' | tr '\n' ' ')"
            done
            rm -rf "$tmp"
        done
    fi
} >"$RESULTS/$DATE-ompi-transport.txt" 2>&1
echo ">> ompi-transport -> bench/results/$DATE-ompi-transport.txt"
