#!/usr/bin/env bash
# The long flap soak of issue 17 and its baselines (needs root and iproute2):
#   scripts/flap-soak.sh [FLAPS] [LOGDIR]
# 1. FLAPS (default 120) flaps of rail 1 under checked mixed traffic, with the
#    timing of the issue's report (2.5 s down, 1.5 s up, rail timeout 2 s, recovery 1 s);
# 2. the same traffic for 60 s on both rails without flaps, and on rail 0 alone.
# Release build (the checker's own cost is then small); one log per run in LOGDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
flaps=${1:-120}
out=${2:-bench/results/$(date +%F)-flap-soak}
mkdir -p "$out"
run() {
    local name=$1
    shift
    echo "== $name: $*"
    env "$@" FXTEST_REQUIRE_NETNS=1 cargo test -q --release -p ferrocx-tests --test flap -- --nocapture \
        2>&1 | grep -E "flaps \(|^rank [01]:|test result|panicked|FAIL" | tee "$out/$name.log"
}
timing=(FXTEST_FLAP_DOWN_MS=2500 FXTEST_FLAP_UP_MS=1500 FXTEST_FLAP_RAIL_TIMEOUT=2s FXTEST_FLAP_RECOVERY=1s)
run flapping "${timing[@]}" FXTEST_FLAPS="$flaps"
run two-rails "${timing[@]}" FXTEST_FLAPS=0 FXTEST_FLAP_MIN_SECS=60
run one-rail "${timing[@]}" FXTEST_FLAPS=0 FXTEST_FLAP_MIN_SECS=60 FXTEST_FLAP_IFNAME==fxr0
