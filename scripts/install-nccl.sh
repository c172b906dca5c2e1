#!/usr/bin/env bash
# Install ferrocx's NCCL drop-in under a prefix: PREFIX/lib/libnccl.so.2 (SONAME
# libnccl.so.2), PREFIX/lib/libnccl.so -> libnccl.so.2, PREFIX/include/nccl.h.
#
#   scripts/install-nccl.sh PREFIX        release build (default)
#   PROFILE=debug scripts/install-nccl.sh PREFIX
#
# Then an unmodified NCCL program or PyTorch job runs on ferrocx:
#   LD_PRELOAD=PREFIX/lib/libnccl.so.2 torchrun --nproc-per-node 2 train.py
# and NCCL programs build against it: cc prog.c -IPREFIX/include -LPREFIX/lib -lnccl
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="${1:?usage: scripts/install-nccl.sh PREFIX}"
PROFILE="${PROFILE:-release}"
if [ "$PROFILE" = release ]; then flag=--release; else flag=; fi
cargo build $flag -q -p ferrocx-nccl
T="${CARGO_TARGET_DIR:-target}/$PROFILE"
mkdir -p "$PREFIX/lib" "$PREFIX/include"
PREFIX="$(cd "$PREFIX" && pwd)"
install -m 0755 "$T/libnccl.so" "$PREFIX/lib/libnccl.so.2"
ln -sf libnccl.so.2 "$PREFIX/lib/libnccl.so"
install -m 0644 nccl/include/nccl.h "$PREFIX/include/nccl.h"
echo "installed ferrocx's libnccl.so.2 (NCCL API 2.27) under $PREFIX"
