#!/usr/bin/env bash
# One device call's worth of scripts/gpu-check.sh steps, under a time budget, with the
# logs tarred for the trip back (a device call returns only a few files).
#
#   OUT=… [BUDGET=520] [STEP_TIMEOUT=120] scripts/gpu-session.sh "info device" "perf nccl" …
#
# Each argument is one group of gpu-check.sh steps, logged under $OUT/r/<a, b, c…>/; a
# group that would start after BUDGET seconds is skipped (named in $OUT/r/skipped.txt).
# Environment for gpu-check.sh (NP, SIZES, ITERS, PERF_COLLS, CE_COLLS, …) passes through;
# a group may set its own as `VAR=value … steps` (words with '=' before the steps).
# Leaves $OUT/logs.tgz and $OUT/all-summary.txt.
set -u
BIN="${BIN:-gpu-run/bin}"
O="$OUT/r"; mkdir -p "$O"
T0=$SECONDS
letters=(a b c d e f g h i j k l m n o p)
i=0
for group in "$@"; do
  dir="$O/${letters[$i]}"; i=$((i + 1))
  if [ $((SECONDS - T0)) -gt "${BUDGET:-520}" ]; then
    echo "skipped (budget): $group" >> "$O/skipped.txt"; continue
  fi
  vars=(); steps=()
  for w in $group; do
    if [ ${#steps[@]} -eq 0 ] && [[ "$w" == *=* ]]; then vars+=("$w"); else steps+=("$w"); fi
  done
  env "${vars[@]}" bash "$(dirname "$0")/gpu-check.sh" "$BIN" "$dir" "${steps[@]}" >> "$O/console.txt" 2>&1
done
cat "$O"/*/summary.txt > "$O/all-summary.txt" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$O" .
cp "$O/all-summary.txt" "$OUT/" 2>/dev/null
grep -E "^==|rc=" "$O/all-summary.txt" | paste - - | awk '{print $2, $(NF-2), $(NF-1), $NF}'
