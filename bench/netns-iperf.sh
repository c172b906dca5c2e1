#!/usr/bin/env bash
# Cross-host bandwidth on one machine: two network namespaces act as two hosts,
# joined by RAILS veth pairs (rail i: interface fxr<i> on both sides,
# 10.<200+i>.0.1 in host A, 10.<200+i>.0.2 in host B). Measures
#   1. iperf3 (server in B, client in A, -t T): rail 0 alone with 1 stream,
#      rail 0 with -P 2, and, with 2 rails, one iperf3 per rail at the same
#      time (summed);
#   2. fxperf sendrecv and all_reduce between rank 0 in A and rank 1 in B
#      (FERROCX_HOSTID makes them two hosts, so net-socket carries the data),
#      with FERROCX_SOCKET_IFNAME=fxr0 (exact name: one rail) and then =fxr
#      (prefix: every rail).
# Every output goes to OUT, plus summary.md.
#
# fxperf sendrecv with 2 ranks sends both ways at once, so its ceiling is iperf3
# --bidir (per direction); those runs are measured too. RATE (e.g. 2gbit) shapes
# every rail in both directions with a token bucket (tc tbf), so the link, not the
# 2-core CPU, is the bottleneck — as with real NICs — and two rails can be compared
# with one. Unset RATE measures raw veth, which is CPU-bound.
#
#   bench/netns-iperf.sh                  # as root; RAILS=2 T=5
#   FXPERF=/path/fxperf bench/netns-iperf.sh   # use that binary, skip the build
# Other knobs: OUT (default bench/results/<date>-netns-iperf), SIZES (fxperf's
# size flags, default "-b 1M -e 256M -f 2"), ITERS ("-n 20 -w 5"), BIND (1: pin
# each rank / iperf3 to its own CPU with taskset when there are 2 or more).
# Needs: root, iproute2, iperf3 (apt-get install -y iperf3), cargo (unless FXPERF).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
RAILS="${RAILS:-2}"
T="${T:-5}"
SIZES="${SIZES:--b 1M -e 256M -f 2}"
ITERS="${ITERS:--n 20 -w 5}"
BIND="${BIND:-1}"
RATE="${RATE:-}"
OUT="${OUT:-$HERE/results/$(date +%F)-netns-iperf}"

die() { echo "netns-iperf: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (it creates network namespaces with ip netns)"
command -v ip >/dev/null 2>&1 || die "ip (iproute2) is missing: apt-get install -y iproute2"
command -v iperf3 >/dev/null 2>&1 || die "iperf3 is missing: apt-get install -y iperf3"
command -v ss >/dev/null 2>&1 || die "ss (iproute2) is missing: apt-get install -y iproute2"
case "$RAILS" in 1|2) ;; *) die "RAILS must be 1 or 2" ;; esac

if [ -n "${FXPERF:-}" ]; then
  FX="$FXPERF"
else
  (cd "$ROOT" && cargo build --release -q -p ferrocx-tools --bin fxperf)
  FX="${CARGO_TARGET_DIR:-$ROOT/target}/release/fxperf"
fi
[ -x "$FX" ] || die "no fxperf at $FX"
FX="$(cd "$(dirname "$FX")" && pwd)/$(basename "$FX")"

NSA="fxbench$$a"
NSB="fxbench$$b"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  ip netns del "$NSA" 2>/dev/null || true
  ip netns del "$NSB" 2>/dev/null || true
}
trap cleanup EXIT

addr() { echo "10.$((200 + $1)).0.$2"; }   # addr RAIL HOST(1=A, 2=B)

ip netns add "$NSA"
ip netns add "$NSB"
ip -n "$NSA" link set lo up
ip -n "$NSB" link set lo up
for r in $(seq 0 $((RAILS - 1))); do
  ip link add "fxr$r" netns "$NSA" type veth peer name "fxr$r" netns "$NSB"
  ip -n "$NSA" addr add "$(addr "$r" 1)/24" dev "fxr$r"
  ip -n "$NSB" addr add "$(addr "$r" 2)/24" dev "fxr$r"
  ip -n "$NSA" link set "fxr$r" up
  ip -n "$NSB" link set "fxr$r" up
  if [ -n "$RATE" ]; then
    for ns in "$NSA" "$NSB"; do
      tc -n "$ns" qdisc add dev "fxr$r" root tbf rate "$RATE" burst 512kb latency 20ms
    done
  fi
done

# CPU pinning: rank / client on the first CPU, peer / server on the second.
NCPU="$(nproc)"
pin() {  # pin SLOT -> taskset prefix (empty when not binding)
  if [ "$BIND" = 1 ] && [ "$NCPU" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    echo "taskset -c $(( $1 % NCPU ))"
  fi
}

mkdir -p "$OUT"
{
  echo "# date: $(date -Is)  host: $(hostname)  cpus: $NCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "# kernel: $(uname -r)  ferrocx: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')  $(iperf3 --version | head -1)"
  echo "# rails: $RAILS (veth pairs fxr0..fxr$((RAILS - 1)) between namespaces $NSA and $NSB), shaped: ${RATE:-no}, iperf3 -t $T, fxperf $SIZES $ITERS, bind $BIND"
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"

# Wait (at most 10 s) until something listens on PORT in host B.
wait_listen() {
  local port="$1" i
  for i in $(seq 1 1000); do
    if ip netns exec "$NSB" ss -Hltn "sport = :$port" | grep -q .; then return 0; fi
    sleep 0.01
  done
  die "iperf3 server on port $port in $NSB did not start"
}

# The receiver's bit rate in Gbit/s from an iperf3 -f g report (the [SUM] line with -P;
# with --bidir, the mean of the two directions).
iperf_gbps() {
  grep -E 'receiver' "$1" | awk '
    { for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") v = $(i - 1) }
    /\[SUM\]/ { sum = v } / \[(TX|RX)-C\]/ { bi += v; nb++ } { last = v }
    END { if (nb) printf "%.2f\n", bi / nb; else if (sum != "") print sum; else print last }'
}

# iperf RAIL PORT FILE [client flags]: one server in B (one test, then exits), one client in A.
iperf_start() {
  local rail="$1" port="$2" file="$3"; shift 3
  ip netns exec "$NSB" $(pin 1) iperf3 -s -1 -B "$(addr "$rail" 2)" -p "$port" > "$file.server" 2>&1 &
  PIDS+=($!)
  wait_listen "$port"
  ip netns exec "$NSA" $(pin 0) iperf3 -c "$(addr "$rail" 2)" -B "$(addr "$rail" 1)" -p "$port" -t "$T" -f g "$@" > "$file" 2>&1 &
  PIDS+=($!)
}

echo "== iperf3 rail 0, 1 stream" >&2
iperf_start 0 5201 "$OUT/iperf-rail0.txt"
wait
echo "== iperf3 rail 0, -P 2" >&2
iperf_start 0 5202 "$OUT/iperf-rail0-P2.txt" -P 2
wait
echo "== iperf3 rail 0, --bidir" >&2
iperf_start 0 5205 "$OUT/iperf-rail0-bidir.txt" --bidir
wait
if [ "$RAILS" -ge 2 ]; then
  echo "== iperf3 on both rails at once (one iperf3 per rail)" >&2
  iperf_start 0 5203 "$OUT/iperf-2rails-rail0.txt"
  iperf_start 1 5204 "$OUT/iperf-2rails-rail1.txt"
  wait
  echo "== iperf3 on both rails at once, --bidir" >&2
  iperf_start 0 5206 "$OUT/iperf-2rails-bidir-rail0.txt" --bidir
  iperf_start 1 5207 "$OUT/iperf-2rails-bidir-rail1.txt" --bidir
  wait
fi
PIDS=()

# fxperf BENCH IFNAME TAG PORT: rank 0 in A (its table goes to fxperf-TAG.txt), rank 1 in B.
fxperf() {
  local bench="$1" ifname="$2" tag="$3" port="$4"
  local common=(FERROCX_NRANKS=2 "FERROCX_COMM_ID=$(addr 0 1):$port" "FERROCX_SOCKET_IFNAME=$ifname"
                FERROCX_TIMEOUT=300 FERROCX_DEBUG=info)
  echo "== fxperf $bench, FERROCX_SOCKET_IFNAME=$ifname" >&2
  # shellcheck disable=SC2086
  ip netns exec "$NSB" env "${common[@]}" FERROCX_RANK=1 "FERROCX_HOSTID=$NSB" $(pin 1) \
    "$FX" $SIZES $ITERS "$bench" > "$OUT/fxperf-$tag.rank1.txt" 2>&1 &
  local peer=$!
  local rc=0
  # shellcheck disable=SC2086
  ip netns exec "$NSA" env "${common[@]}" FERROCX_RANK=0 "FERROCX_HOSTID=$NSA" $(pin 0) \
    "$FX" $SIZES $ITERS "$bench" > "$OUT/fxperf-$tag.txt" 2> "$OUT/fxperf-$tag.rank0.log" || rc=$?
  wait "$peer" || rc=$?
  [ "$rc" = 0 ] || echo "fxperf $bench ($ifname) failed with $rc: see $OUT/fxperf-$tag.*" >&2
  grep -E 'ferrocx::select|net-socket' "$OUT/fxperf-$tag.rank0.log" >&2 || true
}

fxperf sendrecv =fxr0 sendrecv-fxr0 29500
fxperf all_reduce =fxr0 all_reduce-fxr0 29501
if [ "$RAILS" -ge 2 ]; then
  fxperf sendrecv fxr sendrecv-fxr 29502
  fxperf all_reduce fxr all_reduce-fxr 29503
fi

# Summary: iperf3 in Gbit/s; fxperf's out-of-place busbw of the largest row and
# its peak in GB/s (and Gbit/s), and nccl-tests' average bus bandwidth.
{
  cat "$OUT/machine.txt"
  echo
  echo "| iperf3 (A -> B, -t $T) | Gbit/s | GB/s |"
  echo "|---|---:|---:|"
  row() { printf '| %s | %s | %s |\n' "$1" "$2" "$(awk -v g="$2" 'BEGIN { if (g == "") print "?"; else printf "%.2f", g / 8 }')"; }
  row "rail 0, 1 stream" "$(iperf_gbps "$OUT/iperf-rail0.txt")"
  row "rail 0, -P 2" "$(iperf_gbps "$OUT/iperf-rail0-P2.txt")"
  if [ "$RAILS" -ge 2 ]; then
    g0="$(iperf_gbps "$OUT/iperf-2rails-rail0.txt")"
    g1="$(iperf_gbps "$OUT/iperf-2rails-rail1.txt")"
    row "rails 0 and 1 at once: rail 0" "$g0"
    row "rails 0 and 1 at once: rail 1" "$g1"
    row "rails 0 and 1 at once: sum" "$(awk -v a="$g0" -v b="$g1" 'BEGIN { printf "%.2f", a + b }')"
  fi
  row "rail 0, --bidir (per direction)" "$(iperf_gbps "$OUT/iperf-rail0-bidir.txt")"
  if [ "$RAILS" -ge 2 ]; then
    b0="$(iperf_gbps "$OUT/iperf-2rails-bidir-rail0.txt")"
    b1="$(iperf_gbps "$OUT/iperf-2rails-bidir-rail1.txt")"
    row "rails 0 and 1 at once, --bidir: sum per direction" "$(awk -v a="$b0" -v b="$b1" 'BEGIN { printf "%.2f", a + b }')"
  fi
  echo
  echo "| fxperf (rank 0 in A, rank 1 in B) | transport | largest size | busbw there, GB/s (Gbit/s) | peak busbw, GB/s (size) | avg busbw, GB/s |"
  echo "|---|---|---:|---:|---:|---:|"
  for f in "$OUT"/fxperf-*.txt; do
    case "$f" in *.rank1.txt) continue ;; esac
    tag="$(basename "$f" .txt)"
    transport="$(sed -n 's/.*transport \([^ ]*\) (rank 0 -> 1).*/\1/p' "$f" | head -1)"
    awk -v tag="${tag#fxperf-}" -v tr="${transport:-?}" '
      /^#/ && /Avg bus bandwidth/ { avg = $NF }
      !/^#/ && NF >= 9 { size = $1; bw = $8; if (bw + 0 > peak + 0) { peak = bw; psize = $1 } }
      END {
        if (size == "") { printf "| %s | %s | failed | | | |\n", tag, tr; exit }
        printf "| %s | %s | %d MiB | %.2f (%.1f) | %.2f (%d MiB) | %s |\n", tag, tr, size / 1048576, bw, bw * 8, peak, psize / 1048576, avg
      }' "$f"
  done
} > "$OUT/summary.md"
echo
cat "$OUT/summary.md"
echo "outputs in $OUT" >&2
