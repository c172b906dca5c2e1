#!/usr/bin/env bash
# Build what scripts/gpu-check.sh runs on a GPU host, into gpu-run/bin (stripped
# release binaries: fxrun, fxperf, fxinfo, fxtest-worker and the test binaries sdk-tests,
# core-tests, p2p-tests). Optionally copy nccl-tests' source (NCCL_TESTS_SRC, a
# fetched copy) to gpu-run/nccl-tests. gpu-run/ is ignored by git.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=gpu-run/bin
mkdir -p "$OUT"
cargo build --release -q -p ferrocx-tools --bin fxrun --bin fxperf --bin fxinfo
cargo build --release -q -p ferrocx-tests --bin fxtest-worker
T="${CARGO_TARGET_DIR:-target}/release"
cp "$T/fxrun" "$T/fxperf" "$T/fxinfo" "$T/fxtest-worker" "$OUT/"
# Test binaries: the path of each crate's unit-test executable, from cargo's JSON.
testbin() {  # testbin NAME CARGO-ARGS...
  local name="$1"; shift
  local exe
  exe=$(cargo test --release --no-run --message-format=json "$@" 2>/dev/null |
        grep -o '"executable":"[^"]*/deps/[^"]*"' | head -1 | cut -d'"' -f4)
  [ -n "$exe" ] && cp "$exe" "$OUT/$name" && echo "$name <- $exe"
}
testbin sdk-tests -p ferrocx-sdk --features cuda,testing --lib
testbin core-tests -p ferrocx --lib
testbin gpu-kernels -p ferrocx --test gpu_kernels
testbin device-tests -p ferrocx-tests --test device
testbin p2p-tests -p ferrocx-p2p --test transport || echo "p2p tests did not build"
strip --strip-all "$OUT"/*
# The NCCL drop-in (gpu-check.sh's dropin-* steps): gpu-run/nccl/{lib,include}.
scripts/install-nccl.sh gpu-run/nccl
strip --strip-unneeded gpu-run/nccl/lib/libnccl.so.2  # carried to the device with gpu-run/bin (64 MiB in all)
if [ -n "${NCCL_TESTS_SRC:-}" ]; then
  rm -rf gpu-run/nccl-tests && cp -r "$NCCL_TESTS_SRC" gpu-run/nccl-tests
fi
du -sh gpu-run
