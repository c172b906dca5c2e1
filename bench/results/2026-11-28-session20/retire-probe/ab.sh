#!/usr/bin/env bash
# A/B of branch wip/retire-probe (ce's launch-side retirement probes 8 calls behind the
# newest first) against main 58b4426, on one host with two GPUs (2 ranks, one GPU each).
# Binaries: gpu-run/ab/main/ (main 58b4426) and gpu-run/ab/retire/ (main + f8653e3 8553ff1
# cherry-picked), release, stripped. Run from the repository root on the device machine:
#   bash gpu-run/ab/ab.sh
# Logs go to $OUT/ab/, then into $OUT/ab.tgz (the folder is removed afterwards: at most
# 8 files come back from $OUT). Rounds alternate main, retire three times.
set -u
: "${OUT:?OUT unset}"
O=$OUT/ab; mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 FERROCX_TIMEOUT=60 FERROCX_REQUIRE_GPU=1
export CUDA_VISIBLE_DEVICES=0,1
T0=$SECONDS
BUDGET=${BUDGET:-450}   # seconds; steps past it are skipped so the tar always happens
S=$O/steps.txt; : > "$S"
{ date -Is; hostname; nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; nproc; } > "$O/info.txt" 2>&1
sha256sum gpu-run/ab/main/* gpu-run/ab/retire/* >> "$O/info.txt" 2>&1

step() {  # step LOGNAME CMD...
  local log="$1"; shift
  if [ $((SECONDS - T0)) -gt "$BUDGET" ]; then echo "$log SKIPPED (budget) at $((SECONDS - T0))s" >> "$S"; return; fi
  local t=$SECONDS
  timeout 120 "$@" > "$O/$log" 2>&1
  echo "$log rc=$? $((SECONDS - t))s at $((SECONDS - T0))s" >> "$S"
}

for round in 1 2 3; do
  for tag in main retire; do
    B=gpu-run/ab/$tag
    for c in all_reduce sendrecv broadcast all_gather; do
      step "r$round-$tag-$c.log" "$B/fxperf" --np 2 --mem cuda -b 8 -e 1M -f 4 -n 2000 -w 200 "$c"
    done
    FERROCX_SPANS=1 step "r$round-$tag-spans.log" "$B/fxperf" --np 2 --mem cuda -b 8 -e 8 -n 20000 -w 1000 all_reduce
  done
done
date -Is >> "$O/info.txt"
tar czf "$OUT/ab.tgz" -C "$O" .
cp "$S" "$OUT/steps.txt"
cat "$S"; head -3 "$O/info.txt"
# A digest in the output tail, in case the tarball does not come back.
for f in "$O"/r1-*.log "$O"/r3-*.log; do
  echo "== $(basename "$f")"; grep -E "^ +[0-9]" "$f" | awk '{print $1, $6, $10}' | tr '\n' ';'; echo
  grep -E "ce: (order|retire|collective launch)|core: device collective" "$f" | head -6
done
rm -rf "$O"
