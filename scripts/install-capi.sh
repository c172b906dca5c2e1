#!/usr/bin/env bash
# Install the C API under a prefix: PREFIX/lib/libferrocx.so, PREFIX/include/ferrocx.h,
# PREFIX/lib/pkgconfig/ferrocx.pc. Then: cc prog.c $(pkg-config --cflags --libs ferrocx)
# (with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig, and LD_LIBRARY_PATH=PREFIX/lib or an rpath).
#
#   scripts/install-capi.sh PREFIX        release build (default)
#   PROFILE=debug scripts/install-capi.sh PREFIX
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="${1:?usage: scripts/install-capi.sh PREFIX}"
PROFILE="${PROFILE:-release}"
if [ "$PROFILE" = release ]; then flag=--release; else flag=; fi
cargo build $flag -q -p ferrocx-capi
T="${CARGO_TARGET_DIR:-target}/$PROFILE"
mkdir -p "$PREFIX/lib/pkgconfig" "$PREFIX/include"
PREFIX="$(cd "$PREFIX" && pwd)"
install -m 0755 "$T/libferrocx_c.so" "$PREFIX/lib/libferrocx.so"
install -m 0644 capi/include/ferrocx.h "$PREFIX/include/ferrocx.h"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
cat > "$PREFIX/lib/pkgconfig/ferrocx.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: ferrocx
Description: collectives and point-to-point between ranks holding host or GPU memory
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lferrocx
Cflags: -I\${includedir}
PC
echo "installed ferrocx $version under $PREFIX"
